"""Spoken answers: audio to text through litellm's transcription call, on any OpenAI-compatible
speech endpoint named by settings (OpenAI whisper-1, a self-hosted faster-whisper or SenseVoice
server). Off when SPARRING_SPEECH_MODEL is empty."""

from __future__ import annotations

import logging

import server.offline  # noqa: F401  (LITELLM_LOCAL_MODEL_COST_MAP before litellm loads)
from server.config import Settings
from server.llm_calls import DeadlineLoop

log = logging.getLogger(__name__)

AUDIO_TYPES = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/webm": "webm",
    "audio/ogg": "ogg",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
    "audio/mp4": "m4a",
    "audio/x-m4a": "m4a",
    "audio/flac": "flac",
    "video/webm": "webm",  # what some browsers label a microphone recording
}


class SpeechError(Exception):
    """The audio could not be turned into text; nothing was recorded."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class Transcriber:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._io = DeadlineLoop()

    @property
    def enabled(self) -> bool:
        return self._settings.speech_configured

    def transcribe(self, audio: bytes, content_type: str, language: str) -> str:
        if not self.enabled:
            raise SpeechError(404, "speech_disabled", "no speech service is configured")
        kind = AUDIO_TYPES.get(content_type.split(";")[0].strip().lower())
        if kind is None:
            raise SpeechError(
                415,
                "unsupported_audio",
                f"audio type {content_type!r} is not supported; send one of "
                + ", ".join(sorted(set(AUDIO_TYPES))),
            )
        if not audio:
            raise SpeechError(422, "empty_audio", "the audio file is empty")
        import litellm

        s = self._settings
        try:
            response = self._io.run(
                litellm.atranscription(
                    model=s.speech_model,
                    file=(f"answer.{kind}", audio, content_type),
                    language=language,
                    api_base=s.speech_api_base or None,
                    api_key=s.speech_api_key or None,
                    timeout=s.speech_timeout_seconds,
                    max_retries=0,
                ),
                s.speech_timeout_seconds,
            )
        except TimeoutError as exc:
            raise SpeechError(
                504, "transcription_timeout", f"no transcript within {s.speech_timeout_seconds} s"
            ) from exc
        except Exception as exc:  # litellm maps every provider failure to its own exceptions
            log.warning("transcription failed: %s: %s", type(exc).__name__, exc)
            raise SpeechError(
                502, "transcription_failed", f"the speech service failed: {type(exc).__name__}"
            ) from exc
        text = str(getattr(response, "text", "") or "").strip()
        if not text:
            raise SpeechError(422, "empty_transcript", "no speech was recognised in the audio")
        return text
