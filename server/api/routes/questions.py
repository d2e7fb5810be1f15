"""Question bank routes: list, search, fetch one."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from pydantic import BaseModel, Field

from server.api.auth import current_user
from server.api.errors import ApiError, not_found
from server.corpus.schema import QuestionEntry, QuestionType
from server.interview.withheld import WITHHELD_MESSAGE, withholding_session
from server.retrieval.ranker import Match
from server.retrieval.search import SearchFilters
from server.services import Services

router = APIRouter(
    prefix="/api/questions", tags=["questions"], dependencies=[Depends(current_user)]
)


class QuestionList(BaseModel):
    results: list[dict[str, Any]]
    total: int


class SearchResult(BaseModel):
    id: str
    text: str
    text_en: str
    topic: str
    area: str
    companies: list[str]
    score: float = Field(description="rank-fusion value of BM25 and dense ranks (not calibrated)")
    relevance: float = Field(
        ge=0.0, le=1.0, description="calibrated probability that this entry is the question asked"
    )
    subquestion: dict[str, str] | None = None
    source: str = Field(
        default="seed",
        description="seed: from the interview notes the bank was built from; supplementary: "
        "written for the modern post-training field (its papers are in the entry's references)",
    )


class SearchResponse(BaseModel):
    results: list[SearchResult]
    match: Match = Field(
        description="strong: the top result is very likely the question; weak: maybe; "
        "none: the bank has no close match (see nearest_topics)"
    )
    nearest_topics: list[str] = Field(
        description="topics of the closest entries, for a 'no close match' message"
    )


def services(request: Request) -> Services:
    return request.app.state.services


def withheld_by(svc: Services, user: str, entry_id: str) -> str | None:
    """The running session of `user` whose current or planned question `entry_id` is, if any
    (server/interview/withheld.py). Blocking I/O: call it off the event loop."""
    with svc.database.session() as db:
        return withholding_session(db, user, entry_id)


def check_not_withheld(svc: Services, user: str, entry_id: str) -> None:
    """403 when `entry_id` is the current or a planned question of `user`'s running interview:
    its rubric would give the answer away."""
    session_id = withheld_by(svc, user, entry_id)
    if session_id is not None:
        raise ApiError(
            403, "rubric_withheld", WITHHELD_MESSAGE.format(id=entry_id, session=session_id)
        )


def public_entry(entry: QuestionEntry, with_rubric: bool = False) -> dict[str, Any]:
    return entry.model_dump(mode="json", exclude=None if with_rubric else {"rubric"})


@router.get("", response_model=QuestionList)
def list_questions(
    request: Request,
    topic: str | None = None,
    company: str | None = None,
    type: QuestionType | None = None,  # noqa: A002 (the API's field name)
    area: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> QuestionList:
    filters = SearchFilters(topic=topic, company=company, type=type and type.value, area=area)
    matching = [e for e in services(request).bank if filters.accepts(e)]
    page = matching[offset : offset + limit]
    return QuestionList(results=[public_entry(e) for e in page], total=len(matching))


@router.get("/search", response_model=SearchResponse)
def search_questions(
    request: Request,
    q: Annotated[str, Query(max_length=500)],
    k: Annotated[int, Query(ge=1, le=50)] = 5,
    topic: str | None = None,
    company: str | None = None,
    type: QuestionType | None = None,  # noqa: A002
    area: str | None = None,
) -> SearchResponse:
    if not q.strip():
        raise ApiError(422, "invalid_request", "q: the search text must not be empty")
    svc = services(request)
    filters = SearchFilters(topic=topic, company=company, type=type and type.value, area=area)
    outcome = svc.searcher.find(q.strip(), k=k, filters=filters)
    results = []
    for hit in outcome.hits:
        e = hit.entry
        sub = next((s for s in e.subquestions if s.id == hit.subquestion_id), None)
        results.append(
            SearchResult(
                id=e.id,
                text=e.text,
                text_en=e.text_en,
                topic=e.topic,
                area=e.area.value,
                source=e.source.value,
                companies=e.companies,
                score=hit.score,
                relevance=hit.relevance or 0.0,
                subquestion=sub.model_dump() if sub else None,
            )
        )
    return SearchResponse(
        results=results, match=outcome.match, nearest_topics=outcome.nearest_topics
    )


@router.get("/{question_id}")
def get_question(
    request: Request,
    question_id: str,
    user: Annotated[str, Depends(current_user)],
    rubric: bool = False,
) -> dict[str, Any]:
    svc = services(request)
    entry = svc.bank.get(question_id)
    if entry is None:
        raise not_found("question", question_id)
    if rubric:
        check_not_withheld(svc, user, entry.id)
    contract = svc.grading.coding_contract(entry.id)
    # `coding`: the function a code answer should define (its hidden tests are never exposed).
    return {
        **public_entry(entry, with_rubric=rubric),
        "coding": contract.model_dump() if contract else None,
    }
