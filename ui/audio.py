"""A recording made ready to send as a spoken answer.

Why: the browser's microphone recording is 16-bit WAV at the device rate (44.1 or 48 kHz), about
96 KB a second, against the server's audio upload limit (SPARRING_MAX_AUDIO_BYTES, 12 MB by
default). Speech recognisers (whisper, SenseVoice) work at 16 kHz mono, so WAV is resampled to that
before it is sent: a third of the upload, three times as long an answer within the limit. Other
formats (mp3, m4a, ogg, webm, flac) are already compressed and go as they are."""

from __future__ import annotations

import io
from math import gcd
from pathlib import Path

import numpy as np
from scipy.io import wavfile
from scipy.signal import resample_poly

SPEECH_RATE = 16_000

# What a recording's file name says it holds, as the audio answer route expects it.
CONTENT_TYPES = {
    ".wav": "audio/wav",
    ".mp3": "audio/mpeg",
    ".ogg": "audio/ogg",
    ".webm": "audio/webm",
    ".m4a": "audio/mp4",
    ".flac": "audio/flac",
}


def speech_wav(raw: bytes) -> bytes:
    """WAV bytes as 16 kHz mono 16-bit PCM; the input unchanged if it is that already or unreadable
    (the server then says what is wrong with it)."""
    try:
        rate, samples = wavfile.read(io.BytesIO(raw))
    except (ValueError, OSError):
        return raw
    mono = samples.ndim == 1
    if rate <= SPEECH_RATE and mono and samples.dtype == np.int16:
        return raw
    signal = samples.astype(np.float64)
    if samples.dtype.kind in "iu":  # integer PCM: scale to [-1, 1]
        info = np.iinfo(samples.dtype)
        signal = (signal - (info.max + info.min + 1) / 2) / (2 ** (info.bits - 1))
    if not mono:
        signal = signal.mean(axis=1)
    if rate > SPEECH_RATE:
        step = gcd(rate, SPEECH_RATE)
        signal = resample_poly(signal, SPEECH_RATE // step, rate // step)
        rate = SPEECH_RATE
    out = io.BytesIO()
    wavfile.write(out, rate, (np.clip(signal, -1.0, 1.0) * 32767).astype(np.int16))
    return out.getvalue()


def prepared_recording(path: str) -> tuple[str, bytes, str]:
    """(file name, bytes, content type) of a recording or uploaded audio file, ready to send."""
    file = Path(path)
    kind = CONTENT_TYPES.get(file.suffix.lower(), "application/octet-stream")
    raw = file.read_bytes()
    if kind == "audio/wav":
        raw = speech_wav(raw)
    return file.name, raw, kind
