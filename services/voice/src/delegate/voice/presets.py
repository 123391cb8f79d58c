"""Voice presets: ``RUNTIME_DATA_DIR/voice-presets/*.json``, hot-reloaded.

One file per preset::

    {"name": "calm", "voice": "marin", "style": "Speak slowly and warmly.",
     "vad": {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300, "silence_duration_ms": 500},
     "greeting": "Hi, it's Delegate.", "default": true}

A file is read again when its stamp (mtime, size, inode) changes. A file that cannot be used is
reported (``errors``: file name -> why, and a log line) and its last good version keeps serving,
so a half-saved edit never takes a preset away mid-day. With no usable file the built-in default
serves.
"""

import json
import logging
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

log = logging.getLogger(__name__)

PRESETS_DIR = "voice-presets"
BUILTIN_NAME = "default"


class Vad(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["server_vad", "semantic_vad"] = "server_vad"
    threshold: float | None = Field(default=None, ge=0, le=1)
    prefix_padding_ms: int | None = Field(default=None, ge=0, le=5000)
    silence_duration_ms: int | None = Field(default=None, ge=0, le=10_000)
    eagerness: Literal["low", "medium", "high", "auto"] | None = None

    def turn_detection(self) -> dict[str, Any]:
        """The Realtime ``audio.input.turn_detection`` object: the model answers and yields by itself."""
        detection: dict[str, Any] = {"type": self.type, "create_response": True, "interrupt_response": True}
        if self.type == "server_vad":
            for key in ("threshold", "prefix_padding_ms", "silence_duration_ms"):
                value = getattr(self, key)
                if value is not None:
                    detection[key] = value
        elif self.eagerness is not None:
            detection["eagerness"] = self.eagerness
        return detection


class Preset(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=100)
    voice: str = Field(default="marin", min_length=1, max_length=100)
    style: str = Field(default="", max_length=4000)
    vad: Vad = Field(default_factory=Vad)
    greeting: str | None = Field(default=None, max_length=500)
    default: bool = False


BUILTIN = Preset(
    name=BUILTIN_NAME,
    voice="marin",
    style="Speak naturally and warmly, at a relaxed pace.",
    greeting="Hi, it's Delegate. How can I help?",
    default=True,
)

Stamp = tuple[int, int, int]


class PresetStore:
    def __init__(self, runtime_dir: Path) -> None:
        self.folder = Path(runtime_dir) / PRESETS_DIR
        self._good: dict[str, Preset] = {}  # file name -> its last good preset
        self._stamps: dict[str, Stamp] = {}
        self.errors: dict[str, str] = {}

    def refresh(self) -> bool:
        """Read what changed; True when the presets or their errors changed."""
        found: dict[str, Stamp] = {}
        try:
            for path in sorted(self.folder.glob("*.json")):
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue
                found[path.name] = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError as exc:
            log.warning("cannot list %s: %s", self.folder, exc)
        changed = False
        for name in [n for n in self._stamps if n not in found]:
            self._stamps.pop(name)
            self._good.pop(name, None)
            self.errors.pop(name, None)
            changed = True
        for name, stamp in found.items():
            if self._stamps.get(name) == stamp:
                continue
            self._stamps[name] = stamp
            changed = True
            try:
                preset = _load(self.folder / name)
            except ValueError as exc:
                self.errors[name] = str(exc)
                kept = f"; keeping its last good version {self._good[name].name!r}" if name in self._good else ""
                log.error("voice preset %s is not usable: %s%s", name, exc, kept)
                continue
            self.errors.pop(name, None)
            self._good[name] = preset
            log.info("voice preset %r loaded from %s", preset.name, name)
        return changed

    def presets(self) -> dict[str, Preset]:
        """By preset name; the built-in one when no file gave one."""
        by_name: dict[str, Preset] = {}
        for file_name in sorted(self._good):
            preset = self._good[file_name]
            by_name.setdefault(preset.name, preset)
        return by_name or {BUILTIN.name: BUILTIN}

    def default(self) -> Preset:
        presets = self.presets()
        return next((p for p in presets.values() if p.default), next(iter(presets.values())))

    def get(self, name: str | None) -> Preset | None:
        """The named preset (None if there is none by that name), or the default one."""
        if not name:
            return self.default()
        return self.presets().get(name)


def _load(path: Path) -> Preset:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text ({exc.reason})") from exc
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    if isinstance(data, dict) and "name" not in data:
        data = {**data, "name": path.stem}
    try:
        return Preset.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors()[:5]:
            where = ".".join(str(p) for p in err["loc"]) or "top level"
            problems.append(f"{where}: {err['msg']}")
        raise ValueError("; ".join(problems)) from exc
