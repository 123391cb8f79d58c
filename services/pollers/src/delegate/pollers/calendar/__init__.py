"""The owner's calendar over CalDAV (RFC 4791): a local projection kept in sync with the
server, the agent's calendar tools answered from it, and the signals it raises.

- ``server``: the CalDAV client (sync-collection, conditional writes);
- ``ical``: occurrences of a resource (recurrence expanded) and the events Delegate writes;
- ``store``: the projection (SQLite under RUNTIME_DATA_DIR/calendar/);
- ``sync``: a pass from the server into the projection, ``calendar.changed`` for others' changes;
- ``desk``: ``pollers.cmd.calendar``: agenda, free time, idempotent and confirmed writes;
- ``alerts``: ``calendar.upcoming`` and the morning agenda;
- ``run``: the worker that ties them together.
"""
