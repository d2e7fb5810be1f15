"""POST /api/grade: grade one answer to one question."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal, TypeVar

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from server.api.auth import current_user
from server.api.errors import ApiError, busy, not_found
from server.api.routes.questions import withheld_by
from server.grading.models import Grade, GraderChoice
from server.grading.service import GraderUnavailable
from server.services import Services
from server.work_queue import WorkQueue

T = TypeVar("T")
router = APIRouter(prefix="/api", tags=["grading"])
User = Annotated[str, Depends(current_user)]


class GradeRequest(BaseModel):
    question_id: str = Field(min_length=1, max_length=200)
    answer: str
    grader: GraderChoice = GraderChoice.auto
    language: Literal["zh", "en"] = "zh"


def check_answer_size(answer: str, limit: int) -> None:
    if len(answer) > limit:
        raise ApiError(
            413, "answer_too_long", f"the answer has {len(answer)} characters; the limit is {limit}"
        )


async def run_queued(request: Request, user: str, fn: Callable[[], T]) -> T:
    """Run CPU-bound grading (and code runs) in the bounded grading pool, never in the
    request thread pool, so health, search and question lookups stay responsive."""
    work: WorkQueue = request.app.state.work
    return await work.run(fn, user if request.app.state.per_user_limits else None)


@router.post("/grade", response_model=Grade)
async def grade_answer(request: Request, body: GradeRequest, user: User) -> Grade:
    svc: Services = request.app.state.services
    check_answer_size(body.answer, svc.settings.max_answer_chars)
    entry = svc.bank.get(body.question_id)
    if entry is None:
        raise not_found("question", body.question_id)
    # A grade carries the reference answer (and its code): for a current or planned question of
    # the user's running interview it is left out, as the session itself does while a probe is
    # pending (docs/security.md, issue #24). The grading stays available.
    withheld = await run_in_threadpool(withheld_by, svc, user, entry.id)

    retry = svc.grading.rate.admit(user, entry.id)
    if retry is not None:
        raise busy(
            429,
            "grade_rate_limited",
            f"question {entry.id!r} was graded {svc.grading.rate.limit} times for you in the last "
            f"{svc.grading.rate.window:g} s; try again in {max(1, round(retry))} s",
            retry,
        )

    def job() -> Grade:
        try:
            return svc.grading.grade(entry, body.answer, body.grader, body.language)
        except GraderUnavailable as exc:
            raise ApiError(422, "grader_unavailable", str(exc)) from exc

    grade = await run_queued(request, user, job)
    if withheld is not None:
        grade = grade.model_copy(
            update={"reference_answer": "", "flags": [*grade.flags, "reference_withheld"]}
        )
    return grade
