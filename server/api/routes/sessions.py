"""Interview sessions: start, answer, follow-up, hint, skip, state, report; and progress."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, Field

from server.api.auth import current_user
from server.api.errors import ApiError
from server.api.routes.grading import check_answer_size, run_queued
from server.corpus.topic_names import TopicNames, load_topic_names
from server.interview.engine import InterviewError
from server.interview.phrasing import Line
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


class ClarifyRequest(BaseModel):
    question: str = Field(min_length=1, max_length=1000)


@router.post("/sessions/{session_id}/clarify", response_model=Line)
async def clarify(request: Request, session_id: str, body: ClarifyRequest, user: User) -> Line:
    """A question about the question (scope, notation): answered without giving the answer away,
    not graded; the clock keeps running. With an LLM configured it words the reply."""
    return await run_queued(
        request,
        user,
        lambda: _run(
            request, lambda svc, db: svc.engine.clarify(db, user, session_id, body.question)
        ),
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


def _names(request: Request) -> TopicNames:
    return load_topic_names(_svc(request).settings.corpus_dir)


@router.get("/sessions/{session_id}/report", response_model=Report)
def get_report(
    request: Request,
    session_id: str,
    user: User,
    format: str = "json",  # noqa: A002
    lang: str = "en",
):
    if format not in ("json", "md"):
        raise ApiError(422, "invalid_request", "format must be 'json' or 'md'")
    if lang not in ("zh", "en"):
        raise ApiError(422, "invalid_request", "lang must be 'zh' or 'en'")
    names = _names(request)

    def action(svc: Services, db) -> Report:
        session = svc.engine.load(db, user, session_id)
        svc.engine.close_if_time_up(db, session)
        return build_report(svc.bank, session, names)

    report = _run(request, action)
    if format == "md":
        return PlainTextResponse(
            report_markdown(report, names, lang), media_type="text/markdown; charset=utf-8"
        )
    return report


@router.get("/progress", response_model=Progress)
def progress(request: Request, user: User) -> Progress:
    def action(svc: Services, db) -> Progress:
        svc.engine.close_expired(db, user)  # a timed-out interview counts from its deadline
        return user_progress(db, svc.bank, user)

    return _run(request, action)


class TopicCount(BaseModel):
    topic: str
    name_en: str
    area: str
    count: int


class AreaCount(BaseModel):
    area: str
    name_zh: str
    name_en: str
    count: int


class CompanyCount(BaseModel):
    company: str
    count: int


class FilterOptions(BaseModel):
    """What the bank holds for the chosen companies (all companies when none is chosen)."""

    companies: list[CompanyCount]
    areas: list[AreaCount]
    topics: list[TopicCount]
    total: int


@router.get("/topics", response_model=FilterOptions)
def filter_options(
    request: Request, user: User, company: Annotated[list[str] | None, Query()] = None
) -> FilterOptions:
    svc, names = _svc(request), _names(request)
    chosen = set(company or [])
    entries = [
        e
        for e in svc.bank
        if e.rubric is not None
        and (not chosen or any(c in ec for c in chosen for ec in e.companies))
    ]
    companies: dict[str, int] = {}
    for e in svc.bank:
        for c in e.companies:
            companies[c] = companies.get(c, 0) + 1
    topics: dict[str, TopicCount] = {}
    areas: dict[str, int] = {}
    for e in entries:
        areas[e.area.value] = areas.get(e.area.value, 0) + 1
        row = topics.setdefault(
            e.topic,
            TopicCount(
                topic=e.topic, name_en=names.topic(e.topic, "en"), area=e.area.value, count=0
            ),
        )
        row.count += 1
    return FilterOptions(
        companies=[
            CompanyCount(company=c, count=n)
            for c, n in sorted(companies.items(), key=lambda kv: -kv[1])
        ],
        areas=[
            AreaCount(area=a, name_zh=names.area(a, "zh"), name_en=names.area(a, "en"), count=n)
            for a, n in sorted(areas.items(), key=lambda kv: -kv[1])
        ],
        topics=sorted(topics.values(), key=lambda t: (-t.count, t.topic)),
        total=len(entries),
    )
