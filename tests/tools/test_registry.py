"""The registry over a real bus: local tools, ledger events, schema checks, policies, config files."""

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from delegate.agent.tools import ConfigError, ToolRegistry
from delegate.contracts.events import Fence, ToolCall, ToolResult
from delegate.contracts.ids import new_id
from delegate.contracts.messages import ToolCallRequest
from tests.support.waiting import eventually

from .helpers import bus_call, bus_list, bus_names, ledger_events, run_registry, tool_settings, write_json


async def test_local_tool_over_the_bus_is_recorded_in_the_ledger(nats_url: str, tmp_path: Path) -> None:
    run = await run_registry(nats_url, tmp_path / "rt")
    try:
        specs = {t.name: t for t in await bus_list(run.client)}
        assert {"notes_create", "notes_search", "memory_remember", "memory_recall"} <= set(specs)
        assert "local" in specs["notes_create"].tags and "notes" in specs["notes_create"].tags
        # Unconfigured channels are not registered at all.
        assert not {"send_sms_to_owner", "send_email_to_owner", "web_search"} & set(specs)
        assert not any(n.startswith("github_") for n in specs)

        conv, span, parent = new_id(), new_id(), new_id()
        reply = await bus_call(run.client, "notes_create", {"title": "Groceries", "body": "oat milk, lemons"},
                               conversation_id=conv, span_id=span, parent_id=parent, channel="sms", call_id="c-1")
        assert reply.ok and reply.error_code is None and "Groceries" in reply.output
        found = await bus_call(run.client, "notes_search", {"query": "lemons"})
        assert found.ok and "oat milk" in found.output

        events = [e for e in await ledger_events(run.client) if e.payload.get("call_id") == "c-1"]
        assert [e.kind for e in events] == ["tool.call", "tool.result"]
        call, result = events
        assert (call.conversation_id, call.span_id, call.channel, call.parent_id) == (conv, span, "sms", parent)
        assert call.typed(ToolCall).arguments == {"title": "Groceries", "body": "oat milk, lemons"}
        assert (result.conversation_id, result.span_id, result.parent_id) == (conv, span, call.id)
        assert result.typed(ToolResult).ok and "Groceries" in result.typed(ToolResult).output
    finally:
        await run.aclose()


async def test_schema_violation_and_unknown_tool_are_clear_errors(nats_url: str, tmp_path: Path) -> None:
    run = await run_registry(nats_url, tmp_path / "rt")
    try:
        bad = await bus_call(run.client, "notes_create", {"title": 42, "colour": "red"}, call_id="bad-1")
        assert not bad.ok and bad.error_code == "invalid_arguments"
        assert "42 is not of type 'string' (at title)" in bad.output
        assert "'colour' was unexpected" in bad.output

        missing = await bus_call(run.client, "memory_recall", {})
        assert missing.error_code == "invalid_arguments" and "'query' is a required property" in missing.output

        unknown = await bus_call(run.client, "launch_rockets", {})
        assert unknown.error_code == "unknown_tool" and "notes_create" in unknown.output

        results = [e for e in await ledger_events(run.client) if e.kind == "tool.result"]
        assert {r.typed(ToolResult).error_code for r in results} == {"invalid_arguments", "unknown_tool"}
        assert all(not r.typed(ToolResult).ok for r in results)
    finally:
        await run.aclose()


async def test_policy_hides_and_refuses_with_a_ledger_event(nats_url: str, tmp_path: Path) -> None:
    rt = tmp_path / "rt"
    rt.mkdir()
    write_json(rt / "agent-policies.json", {"agents": {
        "base": {"allow_tags": ["local"], "deny_names": ["memory_forget"]},
        "voice": {"allow_tags": ["notes"], "allow_names": ["memory_rec*"]},
    }})
    run = await run_registry(nats_url, rt)
    try:
        voice = await bus_names(run.client, "voice")
        assert "notes_create" in voice and "memory_recall" in voice
        assert "memory_remember" not in voice
        base = await bus_names(run.client, "base")
        assert "memory_remember" in base and "memory_forget" not in base
        assert await bus_names(run.client, "tasks") == set()  # not in the file and no "*" entry
        assert {t["name"] for t in run.registry.openai_tools("voice")} == voice

        refused = await bus_call(run.client, "memory_remember", {"text": "x"}, agent="voice", call_id="deny-1")
        assert not refused.ok and refused.error_code == "denied"
        assert "not allowed for the 'voice' agent" in refused.output
        denied_forget = await run.registry.call(_req("memory_forget", {"id": "x"}, agent="base"))
        assert denied_forget.error_code == "denied"

        events = [e for e in await ledger_events(run.client) if e.payload.get("call_id") == "deny-1"]
        assert [e.kind for e in events] == ["tool.call", "tool.result"]
        assert events[0].typed(ToolCall).agent == "voice"
        assert events[1].typed(ToolResult).error_code == "denied" and events[1].parent_id == events[0].id
    finally:
        await run.aclose()


async def test_notes_survive_a_restart_of_the_registry(tmp_path: Path) -> None:
    rt = tmp_path / "rt"
    first = ToolRegistry(rt, None, settings=tool_settings())
    await first.start()
    made = await first.call(_req("notes_create", {"title": "Passport", "body": "renew by May", "tags": ["admin"]}))
    assert made.ok
    note_id = json.loads(made.output.split(": ", 1)[1])["id"]
    assert (await first.call(_req("notes_update", {"id": note_id, "append": "book photo booth"}))).ok
    await first.aclose()

    second = ToolRegistry(rt, None, settings=tool_settings())
    await second.start()
    try:
        listed = await second.call(_req("notes_list", {"tag": "admin"}))
        assert note_id in listed.output and "Passport" in listed.output
        found = await second.call(_req("notes_search", {"query": "photo booth"}))
        assert "renew by May\\nbook photo booth" in found.output
        gone = await second.call(_req("notes_delete", {"id": note_id}))
        assert gone.ok
        again = await second.call(_req("notes_delete", {"id": note_id}))
        assert again.error_code == "failed" and "no note with id" in again.output
    finally:
        await second.aclose()
    # The store is plain JSON, replaced atomically: no temp file is left behind.
    assert json.loads((rt / "notes.json").read_text())["notes"] == []
    assert not list(rt.glob("*.tmp")) and not list(rt.glob(".notes.json.*.tmp"))


@pytest.mark.parametrize("filename", ["agent-policies.json", "mcp-servers.json"])
async def test_bad_json_at_start_names_the_file_and_line(tmp_path: Path, filename: str) -> None:
    rt = tmp_path / "rt"
    rt.mkdir()
    (rt / filename).write_text('{\n  "agents": {\n    "base": {"allow_tags": ["local"],}\n  }\n}\n')
    registry = ToolRegistry(rt, None, settings=tool_settings())
    with pytest.raises(ConfigError) as err:
        await registry.start()
    assert str(rt / filename) in str(err.value) and "line 3" in str(err.value)
    await registry.aclose()


async def test_wrong_shape_is_a_clear_error(tmp_path: Path) -> None:
    rt = tmp_path / "rt"
    rt.mkdir()
    write_json(rt / "mcp-servers.json", {"servers": {"x": {"command": "a", "url": "http://h/mcp"}}})
    with pytest.raises(ConfigError, match=r"mcp-servers.json: servers.x: .*exactly one of"):
        await ToolRegistry(rt, None, settings=tool_settings()).start()
    write_json(rt / "mcp-servers.json", {"servers": {}})
    write_json(rt / "agent-policies.json", {"agents": {"base": {"allow_tag": ["local"]}}})
    with pytest.raises(ConfigError, match=r"agent-policies.json: agents.base.allow_tag: Extra inputs"):
        await ToolRegistry(rt, None, settings=tool_settings()).start()


async def test_policy_reload_and_a_bad_reload_keeps_the_previous(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rt = tmp_path / "rt"
    rt.mkdir()
    policies = rt / "agent-policies.json"
    write_json(policies, {"agents": {"voice": {"allow_tags": ["notes"]}}})
    registry = ToolRegistry(rt, None, settings=tool_settings())
    await registry.start()
    try:
        def voice() -> set[str]:
            return {s.name for s in registry.specs("voice")}

        assert "memory_recall" not in voice()
        write_json(policies, {"agents": {"voice": {"allow_tags": ["notes", "memory"]}}})

        async def widened() -> bool:
            return "memory_recall" in voice()

        await eventually(widened, what="the watcher picked up the new policy")

        caplog.set_level(logging.ERROR)
        policies.write_text('{"agents": {"voice": {"allow_tags": []}\n')  # broken: no closing brace

        async def complained() -> bool:
            return any("keeping the previous policies" in r.getMessage() and "line 2" in r.getMessage()
                       for r in caplog.records)

        await eventually(complained, what="the bad reload was logged")
        assert "memory_recall" in voice()  # still the last good configuration
        # Allowed (not denied); without a bus the memory service is simply not reachable.
        assert (await registry.call(_req("memory_recall", {"query": "tea"}, agent="voice"))).error_code == "unavailable"

        policies.unlink()  # no file: back to the default (local tools for every agent)

        async def defaulted() -> bool:
            return "memory_remember" in voice() and registry.policies_from_file is False

        await eventually(defaulted, what="the default policy after the file was removed")
    finally:
        await registry.aclose()


async def test_the_records_carry_the_leadership_terms_fence(nats_url: str, tmp_path: Path) -> None:
    """What the registry records is the agent's: it carries the term's fence, and the token is in
    the message id, so a successor's copy of an event is never deduplicated against a deposed one's."""
    fence = Fence(singleton="agent", token=7)
    run = await run_registry(nats_url, tmp_path / "rt", fence=fence)
    try:
        reply = await bus_call(run.client, "notes_create", {"title": "Fenced"}, call_id="f-1")
        assert reply.ok
        events = [e for e in await ledger_events(run.client) if e.payload.get("call_id") == "f-1"]
        assert [e.kind for e in events] == ["tool.call", "tool.result"]
        assert all(e.fence == fence for e in events)
        info = await run.client.js.stream_info("LEDGER")
        ids = set()
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await run.client.js.get_msg("LEDGER", seq)
            ids.add((msg.headers or {}).get("Nats-Msg-Id"))
        assert {f"{e.id}:7" for e in events} <= ids
    finally:
        await run.aclose()


def _req(name: str, arguments: dict[str, Any], agent: str = "base") -> ToolCallRequest:
    return ToolCallRequest(name=name, arguments=arguments, agent=agent)
