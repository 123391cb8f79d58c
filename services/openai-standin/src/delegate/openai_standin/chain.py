"""Conversation state: `previous_response_id` chains and the rules OpenAI
enforces on them (known ids only, every tool call answered, every tool output
answering a call)."""

from delegate.openai_standin.compaction import check_compaction_items, prune
from delegate.openai_standin.errors import invalid_request, previous_response_not_found
from delegate.openai_standin.items import Item
from delegate.openai_standin.store import ResponseStore, StoredResponse


def resolve(
    store: ResponseStore, previous_response_id: object, new_items: list[Item]
) -> tuple[list[Item], StoredResponse | None]:
    """The effective input: the stored chain, then this request's items, with what
    the latest compaction item supersedes left out."""
    previous: StoredResponse | None = None
    inherited: list[Item] = []
    if previous_response_id is not None:
        previous_response_id = str(previous_response_id)  # the spec made sure it is one
        previous = store.get(previous_response_id)
        if previous is None:
            raise previous_response_not_found(previous_response_id)
        inherited = previous.chain_items()
    check_compaction_items(new_items)
    return prune([*inherited, *new_items]), previous


def check_tool_pairs(items: list[Item]) -> None:
    calls: list[str] = []
    answered: set[str] = set()
    for item in items:
        if item.get("type") == "function_call":
            calls.append(str(item.get("call_id")))
        elif item.get("type") == "function_call_output":
            call_id = str(item.get("call_id"))
            if call_id not in calls:
                raise invalid_request(
                    f"No tool call found for function call output with call_id {call_id}.", param="input"
                )
            answered.add(call_id)
    for call_id in calls:
        if call_id not in answered:
            raise invalid_request(f"No tool output found for function call {call_id}.", param="input")


def split_trigger(items: list[Item]) -> tuple[list[Item], bool]:
    """Remove a `compaction_trigger` item, which must be the last input item."""
    positions = [i for i, item in enumerate(items) if item.get("type") == "compaction_trigger"]
    if not positions:
        return items, False
    if positions != [len(items) - 1]:
        raise invalid_request(
            "Invalid 'input': a 'compaction_trigger' item must be the final input item.",
            param="input",
            code="invalid_value",
        )
    return items[:-1], True
