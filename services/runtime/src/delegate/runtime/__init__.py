"""Delegate's shared runtime: bus helper, settings base, lifecycle. Not a service."""
