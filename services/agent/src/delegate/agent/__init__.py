"""Delegate's agent: the fenced singleton that owns the Responses chain.

One process at a time holds the lease (its leadership term) and consumes user input and
inner activations, one at a time; a second process waits as a hot standby. Everything a
term publishes to the ledger carries its fencing token, so a deposed leader cannot write.
The ledger is the only memory that counts: all state is re-derived from it at start and
after a takeover.
"""
