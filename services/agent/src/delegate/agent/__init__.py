"""Delegate's agent: the singleton session that owns the Responses chain.

One process at a time holds the lease and consumes user input and inner activations,
one at a time; a second process waits as a hot standby. The ledger is the only
memory that counts: all state is re-derived from it at start and after a takeover.
"""
