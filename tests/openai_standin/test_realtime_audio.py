"""The Realtime stand-in's audio pieces in-process: formats, the answer tone, WAV
conversion (what the offline demo does with espeak-ng's output) and the VAD."""

import array
import io
import math
import wave

from delegate.openai_standin.realtime import audio
from delegate.openai_standin.realtime.answers import GREETING, greeting
from delegate.openai_standin.realtime.vad import Vad
from tests.support.standin import PCM24, ULAW, speech_audio


def _wav(rate: int, seconds: float, *, width: int = 2, channels: int = 1) -> bytes:
    count = int(rate * seconds)
    peak = 8000 if width == 2 else 60
    samples = [int(peak * math.sin(2 * math.pi * 220 * n / rate)) for n in range(count) for _ in range(channels)]
    data = array.array("h", samples).tobytes() if width == 2 else bytes((s + 128) for s in samples)
    out = io.BytesIO()
    with wave.open(out, "wb") as writer:
        writer.setnchannels(channels)
        writer.setsampwidth(width)
        writer.setframerate(rate)
        writer.writeframes(data)
    return out.getvalue()


def test_tone_is_deterministic_and_sized_for_the_format() -> None:
    ulaw = audio.tone(1000, ULAW)
    pcm = audio.tone(1000, PCM24)
    assert len(ulaw) == 8000
    assert len(pcm) == 48000
    assert audio.tone(1000, ULAW) == ulaw
    assert audio.duration_ms(pcm, PCM24) == 1000
    # -12 dBFS sine: RMS about 0.25 × 0.707 of full scale.
    assert 5000 < audio.rms(audio.to_pcm16(ulaw, ULAW)) < 6500
    assert 5000 < audio.rms(pcm) < 6500


def test_wav_is_resampled_and_encoded_into_the_output_format() -> None:
    espeak_like = _wav(22050, 1.0)
    as_ulaw = audio.from_wav(espeak_like, ULAW)
    as_pcm = audio.from_wav(espeak_like, PCM24)
    assert abs(audio.duration_ms(as_ulaw, ULAW) - 1000) < 5
    assert abs(audio.duration_ms(as_pcm, PCM24) - 1000) < 5
    assert audio.rms(audio.to_pcm16(as_ulaw, ULAW)) > 4000
    stereo_8bit = audio.from_wav(_wav(16000, 0.5, width=1, channels=2), ULAW)
    assert abs(audio.duration_ms(stereo_8bit, ULAW) - 500) < 5


def test_vad_threshold_maps_to_rms_levels() -> None:
    quiet = array.array("h", [400, -400] * 80).tobytes()  # RMS 400
    loud = array.array("h", [600, -600] * 80).tobytes()  # RMS 600
    default = Vad({"type": "server_vad", "threshold": 0.5})
    assert default.step(quiet, 0) is None
    started = default.step(loud, 20)
    assert started is not None and started.kind == "started" and started.ms == 0  # prefix reaches back to 0
    strict = Vad({"type": "server_vad", "threshold": 0.9})
    assert strict.step(loud, 0) is None


def test_vad_stops_after_the_silence_duration() -> None:
    vad = Vad({"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 100, "silence_duration_ms": 200})
    pcm = audio.to_pcm16(speech_audio(200, 400, lead_ms=400), ULAW)
    frame = 320  # 20 ms of 16-bit samples at 8 kHz
    found = [e for n in range(len(pcm) // frame) if (e := vad.step(pcm[n * frame : (n + 1) * frame], n * 20))]
    assert [(e.kind, e.ms) for e in found] == [("started", 300), ("stopped", 800)]
    assert found[1].speech_ms == 200


def test_greeting_comes_from_the_instructions() -> None:
    assert greeting("Greet the caller warmly: “Hi, it's Delegate.”") == "Hi, it's Delegate."
    assert greeting("Say exactly: Good evening.") == "Good evening."
    assert greeting("Be warm and brief.") == GREETING
