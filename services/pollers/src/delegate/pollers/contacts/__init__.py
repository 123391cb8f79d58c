"""Contacts from the owner's CardDAV address book (RFC 6352), on the calendar's server settings:
each card becomes a ``person.imported`` event the memory service resolves to a person."""
