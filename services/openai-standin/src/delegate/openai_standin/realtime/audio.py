"""Audio formats (PCM16 24 kHz, G.711 µ-law / A-law 8 kHz) and the answer audio.

The answer is a deterministic tone (440 Hz sine at -12 dBFS with short fades) in the
session's output format; the offline demo may render the words with espeak-ng
instead (`speak`). Codecs and resampling are the stdlib's `audioop` (deprecated in
3.11, removed in 3.13: its warning is silenced locally)."""

import array
import asyncio
import io
import logging
import math
import shutil
import warnings
import wave
from typing import Any

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

log = logging.getLogger(__name__)

G711_RATE = 8_000
PCM_RATE = 24_000
TONE_HZ = 440.0
TONE_DBFS = -12.0
FADE_MS = 10
ESPEAK_TIMEOUT_S = 10.0


def rate(fmt: dict[str, Any]) -> int:
    return PCM_RATE if fmt["type"] == "audio/pcm" else G711_RATE


def bytes_per_ms(fmt: dict[str, Any]) -> float:
    """Encoded bytes per millisecond: 48 for PCM16 24 kHz, 8 for G.711."""
    return rate(fmt) * (2 if fmt["type"] == "audio/pcm" else 1) / 1000


def duration_ms(data: bytes, fmt: dict[str, Any]) -> float:
    return len(data) / bytes_per_ms(fmt)


def to_pcm16(data: bytes, fmt: dict[str, Any]) -> bytes:
    """Decoded 16-bit samples at the format's own rate (what the VAD measures)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if fmt["type"] == "audio/pcmu":
            return audioop.ulaw2lin(data, 2)
        if fmt["type"] == "audio/pcma":
            return audioop.alaw2lin(data, 2)
    return data[: len(data) - len(data) % 2]


def from_pcm16(pcm: bytes, source_rate: int, fmt: dict[str, Any]) -> bytes:
    """16-bit mono samples at `source_rate`, resampled and encoded into `fmt`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        target = rate(fmt)
        if source_rate != target:
            pcm, _ = audioop.ratecv(pcm, 2, 1, source_rate, target, None)
        if fmt["type"] == "audio/pcmu":
            return audioop.lin2ulaw(pcm, 2)
        if fmt["type"] == "audio/pcma":
            return audioop.lin2alaw(pcm, 2)
    return pcm


def rms(pcm: bytes) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return int(audioop.rms(pcm, 2)) if pcm else 0


def tone(ms: int, fmt: dict[str, Any], *, hz: float = TONE_HZ, dbfs: float = TONE_DBFS) -> bytes:
    """`ms` of a sine in `fmt`, faded in and out so chunk edges do not click."""
    sample_rate = rate(fmt)
    count = sample_rate * ms // 1000
    peak = 32767 * 10 ** (dbfs / 20)
    fade = max(1, sample_rate * FADE_MS // 1000)
    samples = array.array("h", bytes(2 * count))
    for n in range(count):
        envelope = min(1.0, n / fade, (count - 1 - n) / fade)
        samples[n] = int(peak * envelope * math.sin(2 * math.pi * hz * n / sample_rate))
    return from_pcm16(samples.tobytes(), sample_rate, fmt)


def from_wav(wav: bytes, fmt: dict[str, Any]) -> bytes:
    """A mono or stereo WAV (any rate, 8/16-bit) converted into `fmt`."""
    with wave.open(io.BytesIO(wav)) as reader:
        width, channels, source_rate = reader.getsampwidth(), reader.getnchannels(), reader.getframerate()
        frames = reader.readframes(reader.getnframes())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        if width == 1:
            frames = audioop.bias(frames, 1, -128)  # WAV stores 8-bit samples unsigned
        if width != 2:
            frames = audioop.lin2lin(frames, width, 2)
        if channels == 2:
            frames = audioop.tomono(frames, 2, 0.5, 0.5)
    return from_pcm16(frames, source_rate, fmt)


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


async def speak(text: str, fmt: dict[str, Any]) -> bytes | None:
    """The words rendered by espeak-ng in `fmt`, or None (not installed, failed)."""
    binary = shutil.which("espeak-ng")
    if binary is None or not text.strip():
        return None
    try:
        process = await asyncio.create_subprocess_exec(
            binary, "--stdout", "-v", "en", text, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
    except OSError as exc:
        log.info("espeak-ng did not start (%s); answering with a tone", exc)
        return None
    try:
        async with asyncio.timeout(ESPEAK_TIMEOUT_S):
            wav, _ = await process.communicate()
        return from_wav(wav, fmt) if process.returncode == 0 else None
    except (TimeoutError, wave.Error, EOFError) as exc:
        log.info("espeak-ng failed (%s); answering with a tone", exc)
        return None
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
