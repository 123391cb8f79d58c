"""The Realtime voice bridge: phone calls (G.711 µ-law 8 kHz) and browser voice (PCM16 24 kHz).

Modules, one concept each: ``main`` (the bus face), ``manager`` (``Calls``: prepare, state, one call at a
time), ``calls`` (one call's lifecycle), ``realtime_session`` (the bridge to the model),
``playout`` (what the caller has heard: barge-in), ``recorder`` (ledger events in spoken order),
``context`` (a call's instructions), ``presets``, ``lock`` (the voice lock), ``ledger``,
``stale`` (closing a dead process's call), ``tools`` (the agent's registry), ``outbound_call``.
"""
