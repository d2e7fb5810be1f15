"""The UI sends a microphone recording as 16 kHz mono WAV (ui/audio.py): the same speech, a third of
the bytes of the browser's 48 kHz recording, so longer spoken answers fit the request size limit."""

from __future__ import annotations

import io

import numpy as np
from scipy.io import wavfile

from ui.audio import prepared_recording, speech_wav


def wav_bytes(rate: int, samples: np.ndarray) -> bytes:
    out = io.BytesIO()
    wavfile.write(out, rate, samples)
    return out.getvalue()


def read(raw: bytes) -> tuple[int, np.ndarray]:
    return wavfile.read(io.BytesIO(raw))


def test_a_48_khz_stereo_recording_becomes_16_khz_mono_with_the_same_sound():
    t = np.arange(48_000 * 2) / 48_000  # two seconds
    tone = 0.5 * np.sin(2 * np.pi * 440 * t)
    stereo = (np.stack([tone, tone], axis=1) * 32767).astype(np.int16)
    raw = wav_bytes(48_000, stereo)
    rate, samples = read(speech_wav(raw))
    assert rate == 16_000 and samples.ndim == 1 and samples.dtype == np.int16
    assert len(samples) == 32_000  # still two seconds
    assert len(speech_wav(raw)) < len(raw) / 5
    # Still the 440 Hz tone at the same loudness (not noise, not silence, no aliasing).
    spectrum = np.abs(np.fft.rfft(samples.astype(np.float64)))
    assert abs(np.argmax(spectrum) * 16_000 / len(samples) - 440) < 2
    assert 0.45 < np.abs(samples).max() / 32767 < 0.55


def test_speech_rate_wav_and_other_formats_go_as_they_are(tmp_path):
    small = wav_bytes(16_000, np.zeros(1600, dtype=np.int16))
    assert speech_wav(small) == small
    assert speech_wav(b"not a wav at all") == b"not a wav at all"
    clip = tmp_path / "answer.webm"
    clip.write_bytes(b"\x1aE\xdf\xa3webm")
    assert prepared_recording(str(clip)) == ("answer.webm", b"\x1aE\xdf\xa3webm", "audio/webm")
    float_wav = tmp_path / "audio.wav"
    float_wav.write_bytes(wav_bytes(44_100, np.full(4410, 0.25, dtype=np.float32)))
    name, raw, kind = prepared_recording(str(float_wav))
    rate, samples = read(raw)
    assert (name, kind, rate, len(samples)) == ("audio.wav", "audio/wav", 16_000, 1600)
    assert abs(int(samples[800]) - 8192) < 100  # 0.25 full scale, as 16-bit
