"""Spoken answers: POST /api/sessions/{id}/answers/audio (multipart, field `file`).

The audio is transcribed (server/speech.py) and the transcript is answered exactly as a typed
answer would be. Without a configured speech service the route answers 404 `speech_disabled` and
/api/info says `speech_enabled: false`, so clients hide the microphone."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, File, Request, UploadFile

from server.api.auth import current_user
from server.api.errors import ApiError
from server.api.routes.grading import check_answer_size, run_queued
from server.interview.engine import InterviewError
from server.interview.schemas import AnswerResponse
from server.services import Services
from server.speech import SpeechError, Transcriber

router = APIRouter(prefix="/api", tags=["speech"])
User = Annotated[str, Depends(current_user)]


class SpokenAnswerResponse(AnswerResponse):
    transcript: str  # what was recognised, recorded as the candidate's answer


@router.post("/sessions/{session_id}/answers/audio", response_model=SpokenAnswerResponse)
async def spoken_answer(
    request: Request, session_id: str, user: User, file: Annotated[UploadFile, File()]
) -> SpokenAnswerResponse:
    svc: Services = request.app.state.services
    transcriber: Transcriber = request.app.state.transcriber
    if not transcriber.enabled:
        raise ApiError(404, "speech_disabled", "no speech service is configured on this server")
    audio = await file.read()
    content_type = file.content_type or "application/octet-stream"

    def job() -> SpokenAnswerResponse:
        with svc.database.session() as db:
            # The session must be open before the speech service is paid for.
            session = svc.engine.load(db, user, session_id)
            if session.status == "ended":
                raise InterviewError(
                    409, "session_ended", "this interview has ended; fetch its report"
                )
            language = session.language
        text = transcriber.transcribe(audio, content_type, language)
        check_answer_size(text, svc.settings.max_answer_chars)
        with svc.database.session() as db:
            result = svc.engine.answer(db, user, session_id, text)
        return SpokenAnswerResponse(**result.model_dump(), transcript=text)

    try:
        return await run_queued(request, user, job)
    except SpeechError as exc:
        raise ApiError(exc.status, exc.code, exc.message) from exc
    except InterviewError as exc:
        raise ApiError(exc.status, exc.code, exc.message) from exc
