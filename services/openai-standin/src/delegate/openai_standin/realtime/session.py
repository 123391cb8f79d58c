"""The session config: GA defaults, `session.update` merging, and the rules OpenAI's
schema cannot say (its shapes, types, ranges and unknown parameters were checked before,
by `strict`).

Only fields present in an update change; `audio.input` / `audio.output` merge key by
key, `turn_detection: null` turns VAD off and a new `turn_detection` object starts from
its type's defaults. An invalid update changes nothing and raises `EventError`."""

import copy
import time
from typing import Any

from delegate.openai_standin.ids import new_id
from delegate.openai_standin.realtime.wire import EventError

Config = dict[str, Any]

SESSION_TTL_S = 3600
DEFAULT_INSTRUCTIONS = "You are the Delegate offline stand-in. Answer briefly."
PCM_RATE = 24_000
MAX_OUTPUT_TOKENS = 4096  # the SDK's docstring; the spec gives no bound


def vad_defaults(kind: str) -> Config:
    if kind == "semantic_vad":
        return {"type": "semantic_vad", "eagerness": "auto", "create_response": True, "interrupt_response": True}
    return {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 500,
        "idle_timeout_ms": None,
        "create_response": True,
        "interrupt_response": True,
    }


def default_session(model: str) -> Config:
    return {
        "type": "realtime",
        "object": "realtime.session",
        "id": new_id("sess"),
        "model": model,
        "expires_at": int(time.time()) + SESSION_TTL_S,
        "instructions": DEFAULT_INSTRUCTIONS,
        "output_modalities": ["audio"],
        "audio": {
            "input": {
                "format": {"type": "audio/pcm", "rate": PCM_RATE},
                "transcription": None,
                "noise_reduction": None,
                "turn_detection": vad_defaults("server_vad"),
            },
            "output": {"format": {"type": "audio/pcm", "rate": PCM_RATE}, "voice": "marin", "speed": 1.0},
        },
        "tools": [],
        "tool_choice": "auto",
        "max_output_tokens": "inf",
        "include": None,
        "tracing": None,
        "prompt": None,
        "truncation": "auto",
    }


def merged(current: Config, update: Config, *, audio_started: bool) -> Config:
    """The config after `update` (a `session.update`'s `session`, which the spec took)."""
    config = copy.deepcopy(current)
    for key, value in update.items():
        if key == "audio":
            _merge_audio(config, value, audio_started=audio_started)
        else:
            config[key] = _checked(key, value, config)
    return config


def _checked(key: str, value: Any, config: Config) -> Any:
    param = f"session.{key}"
    if key == "type" and value != "realtime":
        raise EventError("Only 'realtime' sessions are supported by the stand-in.", param=param)
    if key == "model" and value != config["model"]:
        raise EventError("The session's model cannot be changed.", param=param)
    if key == "output_modalities" and value not in (["audio"], ["text"]):
        raise EventError('\'session.output_modalities\' must be ["audio"] or ["text"].', param=param)
    if key == "max_output_tokens" and value != "inf" and not 1 <= value <= MAX_OUTPUT_TOKENS:
        raise EventError(f"'session.max_output_tokens' must be 1..{MAX_OUTPUT_TOKENS} or \"inf\".", param=param)
    return value


def _merge_audio(config: Config, audio: Config, *, audio_started: bool) -> None:
    for side in ("input", "output"):
        for key, value in (audio.get(side) or {}).items():
            param = f"session.audio.{side}.{key}"
            if key == "format":
                value = checked_format(value)
            elif key == "turn_detection":
                value = _turn_detection(value)
            elif key == "voice":
                current = config["audio"]["output"]["voice"]
                if audio_started and value != current:
                    raise EventError("Cannot update a voice after the model has produced audio.", param=param)
            config["audio"][side][key] = value


def checked_format(value: Config) -> Config:
    """A format the spec took, with the PCM rate filled in (24000 is the only one)."""
    if value["type"] == "audio/pcm":
        return {"type": "audio/pcm", "rate": PCM_RATE}
    return {"type": value["type"]}


def _turn_detection(value: Config | None) -> Config | None:
    param = "session.audio.input.turn_detection"
    if value is None:
        return None
    result = {**vad_defaults(value["type"]), **value}
    # Ranges the spec leaves open and the API documents.
    threshold = result.get("threshold", 0.5)
    if not 0.0 <= threshold <= 1.0:
        raise EventError("'threshold' must be from 0.0 to 1.0.", param=f"{param}.threshold")
    for key in ("prefix_padding_ms", "silence_duration_ms"):
        if result.get(key, 0) < 0:
            raise EventError(f"'{key}' must be a non-negative integer.", param=f"{param}.{key}")
    return result
