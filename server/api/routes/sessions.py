"""Interview sessions: start, answer, follow-up, hint, skip, state, report; and progress."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import PlainTextResponse

from server.api.auth import current_user
from server.api.errors import ApiError
from server.api.routes.grading import check_answer_size, run_queued
from server.interview.engine import InterviewError
from server.interview.progress import user_progress
from server.interview.report import build_report, report_markdown
from server.interview.schemas import (
    AnswerRequest,
    AnswerResponse,
    HintResponse,
    NextStep,
    Progress,
    Report,
    SessionCreated,
    SessionRequest,
    SessionState,
)
from server.services import Services

router = APIRouter(prefix="/api", tags=["sessions"])
User = Annotated[str, Depends(current_user)]


def _svc(request: Request) -> Services:
    return request.app.state.services


def _run(request: Request, action):
    """Run an engine action in one transaction: committed before the response is sent."""
    svc = _svc(request)
    try:
        with svc.database.session() as db:
            return action(svc, db)
    except InterviewError as exc:
        raise ApiError(exc.status, exc.code, exc.message) from exc


@router.post("/sessions", response_model=SessionCreated, status_code=201)
def create_session(request: Request, body: SessionRequest, user: User) -> SessionCreated:
    return _run(request, lambda svc, db: svc.engine.start(db, user, body))


@router.post("/sessions/{session_id}/answers", response_model=AnswerResponse)
async def answer(
    request: Request, session_id: str, body: AnswerRequest, user: User
) -> AnswerResponse:
    check_answer_size(body.answer, _svc(request).settings.max_answer_chars)
    # Grading (and the turn's transaction) runs in the bounded grading pool.
    return await run_queued(
        request,
        user,
        lambda: _run(request, lambda svc, db: svc.engine.answer(db, user, session_id, body.answer)),
    )


@router.post("/sessions/{session_id}/followup", response_model=NextStep)
def followup(request: Request, session_id: str, user: User) -> NextStep:
    return _run(request, lambda svc, db: svc.engine.followup(db, user, session_id))


@router.post("/sessions/{session_id}/hint", response_model=HintResponse)
def hint(request: Request, session_id: str, user: User) -> HintResponse:
    return _run(request, lambda svc, db: svc.engine.hint(db, user, session_id))


@router.post("/sessions/{session_id}/skip", response_model=AnswerResponse)
def skip(request: Request, session_id: str, user: User) -> AnswerResponse:
    return _run(request, lambda svc, db: svc.engine.skip(db, user, session_id))


@router.post("/sessions/{session_id}/end", response_model=SessionState)
def end(request: Request, session_id: str, user: User) -> SessionState:
    def action(svc: Services, db) -> SessionState:
        svc.engine.end(db, user, session_id)
        return svc.engine.state(db, user, session_id)

    return _run(request, action)


@router.get("/sessions/{session_id}", response_model=SessionState)
def get_session(request: Request, session_id: str, user: User) -> SessionState:
    return _run(request, lambda svc, db: svc.engine.state(db, user, session_id))


@router.get("/sessions/{session_id}/report", response_model=Report)
def get_report(request: Request, session_id: str, user: User, format: str = "json"):  # noqa: A002
    if format not in ("json", "md"):
        raise ApiError(422, "invalid_request", "format must be 'json' or 'md'")

    def action(svc: Services, db) -> Report:
        session = svc.engine.load(db, user, session_id)
        svc.engine.close_if_time_up(db, session)
        return build_report(svc.bank, session)

    report = _run(request, action)
    if format == "md":
        return PlainTextResponse(report_markdown(report), media_type="text/markdown; charset=utf-8")
    return report


@router.get("/progress", response_model=Progress)
def progress(request: Request, user: User) -> Progress:
    return _run(request, lambda svc, db: user_progress(db, svc.bank, user))
