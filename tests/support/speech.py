"""Real spoken phrases for voice tests: espeak-ng renders a phrase, sox converts it.

``phone_audio`` is raw G.711 µ-law at 8 kHz (what Twilio sends), ``browser_audio`` raw PCM16
LE mono at 24 kHz (what the page's AudioWorklet sends). Each rendering is cached per phrase
(and voice) in a folder under the system's temporary directory, written atomically, so parallel
test processes share it safely and a run renders each phrase once.
"""

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

Format = Literal["ulaw8k", "pcm24k"]

CACHE = Path(tempfile.gettempdir()) / "delegate-speech-cache"
_SOX_ARGS: dict[Format, list[str]] = {
    "ulaw8k": ["-t", "raw", "-r", "8000", "-c", "1", "-e", "mu-law", "-b", "8"],
    "pcm24k": ["-t", "raw", "-r", "24000", "-c", "1", "-e", "signed-integer", "-b", "16", "-L"],
}


def tools_available() -> bool:
    return shutil.which("espeak-ng") is not None and shutil.which("sox") is not None


def render(phrase: str, fmt: Format, *, voice: str = "en-us", speed: int = 160) -> bytes:
    """``phrase`` spoken, as raw audio in ``fmt``; cached."""
    key = hashlib.sha256(f"{voice}|{speed}|{phrase}".encode()).hexdigest()[:24]
    target = CACHE / f"{key}.{fmt}"
    if target.exists():
        return target.read_bytes()
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as work:
        wav = Path(work) / "speech.wav"
        out = Path(work) / f"speech.{fmt}"
        subprocess.run(
            ["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(wav), phrase],
            check=True, capture_output=True, timeout=60,
        )
        subprocess.run(["sox", str(wav), *_SOX_ARGS[fmt], str(out)], check=True, capture_output=True, timeout=60)
        os.replace(out, target)  # atomic: a concurrent reader sees all of it or nothing
    return target.read_bytes()


def phone_audio(phrase: str, *, voice: str = "en-us", speed: int = 160) -> bytes:
    """Raw µ-law 8 kHz mono: 8 bytes per millisecond, as a Twilio media payload carries it."""
    return render(phrase, "ulaw8k", voice=voice, speed=speed)


def browser_audio(phrase: str, *, voice: str = "en-us", speed: int = 160) -> bytes:
    """Raw PCM16 LE mono 24 kHz: 48 bytes per millisecond."""
    return render(phrase, "pcm24k", voice=voice, speed=speed)


def ulaw_silence(ms: int) -> bytes:
    return b"\xff" * (ms * 8)


def pcm16_silence(ms: int) -> bytes:
    return b"\x00\x00" * (ms * 24)
