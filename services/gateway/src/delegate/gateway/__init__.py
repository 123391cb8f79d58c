"""Delegate's gateway: the one process browsers (and later Twilio) talk to.

It holds no conversation state: every request becomes a bus message or a query,
and the /chat fan-out is rebuilt from the ledger after any restart.
"""
