"""What this process already answered, so that an input handed out again is not answered twice.

JetStream writes a consumer's delivery state lazily: after a nats-server crash an input that
was answered (its ack lost with the server) can come back as a *first* delivery. See
``redelivery.py`` for how both guards below are used.
"""

import uuid
from collections import OrderedDict

# How many settled inputs a process remembers: far more than a crash can leave unacked.
SETTLED_REMEMBERED = 1024


# Answers' ids are name-based UUIDs of their input's id: as long as any id (ids are capped).
ANSWER_NAMESPACE = uuid.UUID("5b0f3c1e-9d2a-4c47-8e61-0a4f2b7d9c33")


def answer_id_for(input_id: str) -> str:
    """The id of the answer to a user message: one per input, whichever process gives it."""
    return str(uuid.uuid5(ANSWER_NAMESPACE, input_id))


class SettledInputs:
    """The ids of the inputs this process finished, newest last, bounded."""

    def __init__(self, size: int = SETTLED_REMEMBERED) -> None:
        self._size = size
        self._ids: OrderedDict[str, None] = OrderedDict()

    def add(self, input_id: str) -> None:
        self._ids[input_id] = None
        self._ids.move_to_end(input_id)
        while len(self._ids) > self._size:
            self._ids.popitem(last=False)

    def __contains__(self, input_id: object) -> bool:
        return input_id in self._ids
