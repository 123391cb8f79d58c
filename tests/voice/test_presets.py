"""Voice presets: hot reload, a broken file keeps its last good version, the built-in default."""

from collections.abc import Callable
from typing import Any

from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually
from tests.voice.conftest import write_preset
from tests.voice.peer import events_until, session_updates, voice_state


async def test_presets_reload_and_a_broken_file_keeps_the_last_good_one(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    system = make_system("voice", fresh=True)  # the preset files it writes are its own
    bus, caller = await connect(system)
    assert (await voice_state(bus)).presets == ["quiet"]

    write_preset(system, "calm.json", {"name": "calm", "voice": "cedar", "style": "Speak very slowly.",
                                       "vad": {"type": "semantic_vad", "eagerness": "low"}})
    state = await poll(bus, lambda s: "calm" in s.presets)
    assert state.default_preset == "quiet" and not state.preset_errors

    assert (await caller.prepare("phone", preset="calm")).ok
    update = (await eventually(lambda: session_updates(standin), "the session.update"))[0]
    assert update["audio"]["output"]["voice"] == "cedar" and "Speak very slowly." in update["instructions"]
    assert update["audio"]["input"]["turn_detection"] == {
        "type": "semantic_vad", "eagerness": "low", "create_response": True, "interrupt_response": True,
    }
    assert (await caller.attach()).ok
    assert (await voice_state(bus)).preset == "calm"
    await caller.hang_up()
    await events_until(bus, caller.session_id, "span.closed")

    write_preset(system, "calm.json", '{"name": "calm", "voice": ')  # a half-saved edit
    state = await poll(bus, lambda s: "calm.json" in s.preset_errors)
    assert "calm" in state.presets and "invalid JSON" in state.preset_errors["calm.json"]
    write_preset(system, "loud.json", {"name": "loud", "vad": {"type": "shouting"}})
    state = await poll(bus, lambda s: "loud.json" in s.preset_errors)
    assert "loud" not in state.presets and "vad.type" in state.preset_errors["loud.json"]

    refused = await caller.prepare("phone", preset="nope")
    assert not refused.ok and refused.reason == "bad_preset"
    assert (await caller.prepare("phone", preset="calm")).ok  # the last good calm still serves
    assert (await caller.attach()).ok
    await caller.hang_up()


async def test_builtin_default_preset_without_files(make_system: Callable[..., System], connect: Any) -> None:
    system = make_system("voice", quiet=False)
    bus, _ = await connect(system)
    state = await voice_state(bus)
    assert state.presets == ["default"] and state.default_preset == "default" and not state.preset_errors


async def poll(bus: Any, check: Callable[[Any], bool], timeout: float = 15.0) -> Any:
    async def matching() -> Any:
        state = await voice_state(bus)
        return state if check(state) else None

    return await eventually(matching, "the voice state to match", timeout, interval=0.2)
