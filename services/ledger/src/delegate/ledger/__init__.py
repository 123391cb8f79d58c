"""The ledger: the only process that writes the event database.

It consumes ``ledger.evt.append`` in batches, commits each batch in one
transaction (idempotently by event id), announces what it committed on
``ledger.live.committed``, and answers history, query, get and resume requests.
"""
