"""In-memory store of responses created with `store` true, and their chains."""

from dataclasses import dataclass, field
from typing import Any

from delegate.openai_standin.items import Item


@dataclass
class StoredResponse:
    response: dict[str, Any]
    input_items: list[Item]  # the effective input, as `input_items` lists it
    # What a chained request inherits before this response's output. Empty after a
    # compaction: the compaction item leads the output and stands for all of it.
    context: list[Item]
    output: list[Item]
    compacted: bool = False

    def chain_items(self) -> list[Item]:
        if self.response.get("status") not in ("completed", "incomplete"):
            return list(self.context)
        return [*self.context, *self.output]


@dataclass
class ResponseStore:
    _responses: dict[str, StoredResponse] = field(default_factory=dict)

    def put(self, stored: StoredResponse) -> None:
        self._responses[stored.response["id"]] = stored

    def get(self, response_id: str) -> StoredResponse | None:
        return self._responses.get(response_id)

    def delete(self, response_id: str) -> bool:
        return self._responses.pop(response_id, None) is not None

    def clear(self) -> None:
        self._responses.clear()

    def __len__(self) -> int:
        return len(self._responses)
