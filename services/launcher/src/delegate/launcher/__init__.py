"""Delegate's launcher: ``make run`` on one machine, and the nats-server config for others.

Not a library the services use: it carries the pinned nats-server binary, which no service
image needs.
"""
