"""The session config: GA defaults, `session.update` merging and validation.

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
FORMATS = ("audio/pcm", "audio/pcmu", "audio/pcma")
PCM_RATE = 24_000
VAD_TYPES = ("server_vad", "semantic_vad")
EAGERNESS = ("low", "medium", "high", "auto")

_TOP_LEVEL = {
    "type",
    "model",
    "instructions",
    "output_modalities",
    "audio",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "max_output_tokens",
    "include",
    "tracing",
    "prompt",
    "truncation",
}
_INPUT_KEYS = {"format", "transcription", "noise_reduction", "turn_detection"}
_OUTPUT_KEYS = {"format", "voice", "speed"}


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


def merged(current: Config, update: Any, *, audio_started: bool) -> Config:
    """The config after `update` (a `session.update`'s `session`), validated."""
    if not isinstance(update, dict):
        raise EventError("Invalid type for 'session': expected an object.", code="invalid_type", param="session")
    for key in update:
        if key not in _TOP_LEVEL:
            raise EventError(f"Unknown parameter: 'session.{key}'.", code="unknown_parameter", param=f"session.{key}")
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
    if key == "instructions" and not isinstance(value, str):
        raise EventError("Invalid 'session.instructions': expected a string.", code="invalid_type", param=param)
    if key == "output_modalities" and value not in (["audio"], ["text"]):
        raise EventError('\'session.output_modalities\' must be ["audio"] or ["text"].', param=param)
    if key == "tools" and not (isinstance(value, list) and all(isinstance(t, dict) for t in value)):
        raise EventError("Invalid 'session.tools': expected a list of tools.", code="invalid_type", param=param)
    if key == "max_output_tokens" and not (value == "inf" or (isinstance(value, int) and 1 <= value <= 4096)):
        raise EventError("'session.max_output_tokens' must be 1..4096 or \"inf\".", param=param)
    if key == "truncation":
        _check_truncation(value)
    return value


def _check_truncation(value: Any) -> None:
    if value in ("auto", "disabled"):
        return
    param = "session.truncation"
    if not isinstance(value, dict) or value.get("type") != "retention_ratio":
        raise EventError('\'session.truncation\' must be "auto", "disabled" or a retention_ratio object.', param=param)
    ratio = value.get("retention_ratio")
    if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0.0 <= ratio <= 1.0:
        raise EventError(
            "'session.truncation.retention_ratio' must be a number from 0.0 to 1.0.",
            param="session.truncation.retention_ratio",
        )
    limits = value.get("token_limits")
    if limits is not None and not isinstance(limits, dict):
        raise EventError(
            "'session.truncation.token_limits' must be an object.", param="session.truncation.token_limits"
        )


def _merge_audio(config: Config, audio: Any, *, audio_started: bool) -> None:
    if not isinstance(audio, dict):
        raise EventError("Invalid 'session.audio': expected an object.", code="invalid_type", param="session.audio")
    for side, allowed in (("input", _INPUT_KEYS), ("output", _OUTPUT_KEYS)):
        part = audio.get(side)
        if part is None:
            continue
        if not isinstance(part, dict):
            raise EventError(f"Invalid 'session.audio.{side}': expected an object.", param=f"session.audio.{side}")
        for key, value in part.items():
            param = f"session.audio.{side}.{key}"
            if key not in allowed:
                raise EventError(f"Unknown parameter: '{param}'.", code="unknown_parameter", param=param)
            if key == "format":
                value = checked_format(value, param)
            elif key == "turn_detection":
                value = _turn_detection(value)
            elif key == "voice":
                current = config["audio"]["output"]["voice"]
                if audio_started and value != current:
                    raise EventError("Cannot update a voice after the model has produced audio.", param=param)
            elif key == "speed" and not (isinstance(value, int | float) and 0.25 <= value <= 1.5):
                raise EventError(f"'{param}' must be from 0.25 to 1.5.", param=param)
            config["audio"][side][key] = value
    for key in audio:
        if key not in ("input", "output"):
            raise EventError(f"Unknown parameter: 'session.audio.{key}'.", code="unknown_parameter")


def checked_format(value: Any, param: str) -> Config:
    if not isinstance(value, dict) or value.get("type") not in FORMATS:
        got = value.get("type") if isinstance(value, dict) else value
        raise EventError(
            f"Invalid value: '{got}'. Supported values are: {', '.join(repr(f) for f in FORMATS)}.",
            param=f"{param}.type",
        )
    if value["type"] == "audio/pcm":
        rate = value.get("rate", PCM_RATE)
        if rate != PCM_RATE:
            raise EventError("'audio/pcm' supports only a rate of 24000.", param=f"{param}.rate")
        return {"type": "audio/pcm", "rate": PCM_RATE}
    return {"type": value["type"]}


def _turn_detection(value: Any) -> Config | None:
    param = "session.audio.input.turn_detection"
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in VAD_TYPES:
        raise EventError("'turn_detection.type' must be 'server_vad' or 'semantic_vad'.", param=f"{param}.type")
    result = vad_defaults(value["type"])
    for key, item in value.items():
        if key not in result:
            raise EventError(f"Unknown parameter: '{param}.{key}'.", code="unknown_parameter", param=f"{param}.{key}")
        result[key] = item
    threshold = result.get("threshold", 0.5)
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0.0 <= threshold <= 1.0:
        raise EventError("'threshold' must be from 0.0 to 1.0.", param=f"{param}.threshold")
    for key in ("prefix_padding_ms", "silence_duration_ms"):
        if key in result and not (isinstance(result[key], int) and result[key] >= 0):
            raise EventError(f"'{key}' must be a non-negative integer.", param=f"{param}.{key}")
    if result.get("eagerness", "auto") not in EAGERNESS:
        raise EventError("'eagerness' must be low, medium, high or auto.", param=f"{param}.eagerness")
    return result
