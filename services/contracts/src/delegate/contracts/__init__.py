"""Delegate's shared contracts: what crosses a process boundary, spelled once.

Pure data (pydantic models, subject names, stream specs, cursors); nothing here
opens a socket, so tests, the gateway and schema exports import it freely.
"""
