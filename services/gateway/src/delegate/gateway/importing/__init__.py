"""``POST /api/import``: history from elsewhere, read, checked whole, planned, then written.

- ``lines``: one imported message (``ImportLine``) and the bounded list of what is wrong;
- ``ndjson``: the NDJSON body, line by line;
- ``chatgpt``: ChatGPT's ``conversations.json`` export, each conversation's current branch;
- ``plan``: the lines as ledger events, past conversations with deterministic ids (pure);
- ``job``: writing a plan, one atomic batch per conversation, between ``import.started``
  and ``import.finished``.
"""
