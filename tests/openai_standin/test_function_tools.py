"""Function tool schemas the API refuses (HTTP 400 invalid_function_parameters), whichever tool."""

import openai
import pytest
from openai import OpenAI

MODEL = "gpt-5.5"


def _tool(name: str, parameters: dict[str, object]) -> dict[str, object]:
    return {"type": "function", "name": name, "parameters": parameters, "strict": False}


@pytest.mark.parametrize(("parameters", "said"), [
    ({"type": "object", "properties": {"tags": {"type": "array"}}},
     "Invalid schema for function 'tag_notes': In context=('properties', 'tags'), array schema missing items."),
    ({"type": "string"}, "schema must be a JSON Schema of 'type: \"object\"', got 'type: \"string\"'."),
    ({"type": "object", "anyOf": [{"required": ["a"]}]}, "not have 'oneOf'/'anyOf'/'allOf'/'enum'/'not' at the top"),
])
def test_a_bad_function_schema_refuses_the_whole_request(
    client: OpenAI, parameters: dict[str, object], said: str
) -> None:
    good = _tool("echo", {"type": "object", "properties": {"text": {"type": "string"}}})
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input="hi", tools=[good, _tool("tag_notes", parameters)])  # type: ignore[list-item]
    assert refused.value.code == "invalid_function_parameters" and said in refused.value.message
    assert refused.value.param == "tools[1].parameters"
    ok = client.responses.create(model=MODEL, input="hi", tools=[good, _tool("tag_notes", {  # type: ignore[list-item]
        "type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string"}}}})])
    assert ok.status == "completed"
