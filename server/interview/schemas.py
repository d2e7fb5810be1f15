"""Request and response models of the interview API."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

from server.corpus.coding import CodingContract
from server.corpus.schema import QuestionType
from server.grading.models import Grade, GraderChoice
from server.interview.phrasing import PhrasingInfo


class Mode(StrEnum):
    interview = "interview"  # timed
    practice = "practice"  # untimed
    review = "review"  # weak topics and due review cards


class SessionRequest(BaseModel):
    mode: Mode = Mode.interview
    duration_minutes: int = Field(default=30, ge=1, le=240)
    # Overrides duration_minutes when set: short timed sessions for demos and tests.
    duration_seconds: int | None = Field(default=None, ge=1, le=240 * 60)
    num_questions: int = Field(default=5, ge=1, le=50)
    companies: list[str] = Field(default_factory=list, max_length=20)
    topics: list[str] = Field(default_factory=list, max_length=50)
    difficulty: list[int] = Field(default_factory=list, max_length=3)
    types: list[QuestionType] = Field(default_factory=list)
    language: Literal["zh", "en"] = "zh"
    grader: GraderChoice = GraderChoice.auto
    seed: int | None = Field(default=None, description="Fix the question order (tests, demos)")


class AnswerRequest(BaseModel):
    answer: str


class AskedOut(BaseModel):
    number: int
    entry_id: str
    kind: str  # question | followup
    text: str
    text_en: str
    topic: str
    area: str
    difficulty: int
    type: str
    asked_at: datetime
    budget_seconds: int | None
    prompt: str  # what the interviewer says
    coding: CodingContract | None = None  # the function to write, when hidden tests grade the code


class NextStep(BaseModel):
    kind: Literal["probe", "followup", "question", "end"]
    question: AskedOut | None = None
    prompt: str
    key_point_id: str | None = None
    # How the prompt was worded (template or LLM) and, after an LLM failure, why the template.
    phrasing: PhrasingInfo = Field(default_factory=PhrasingInfo)


class SessionCreated(BaseModel):
    id: str
    mode: Mode
    deadline: datetime | None
    question: AskedOut


class AnswerResponse(BaseModel):
    grade: Grade  # its reference_answer stays empty while a probe on the question is pending
    next: NextStep
    late: bool = False
    question_number: int | None = None  # the question this grade belongs to
    labels: dict[str, str] = Field(default_factory=dict)  # that question's label, zh and en


class HintResponse(BaseModel):
    hint: str
    key_point_id: str | None
    score_cap: float


class TurnOut(BaseModel):
    seq: int
    role: str
    kind: str
    text: str
    question_number: int | None
    late: bool
    created_at: datetime
    score: float | None = None
    label: str = ""  # e.g. "第 2 题 · 追问 1", in the session language
    labels: dict[str, str] = Field(default_factory=dict)  # the label in zh and en


class SessionState(BaseModel):
    id: str
    mode: Mode
    status: Literal["active", "ended"]
    end_reason: str | None
    language: str
    grader: str
    created_at: datetime
    deadline: datetime | None
    remaining_seconds: float | None
    num_questions: int
    current: AskedOut | None
    turns: list[TurnOut]


class ReportQuestion(BaseModel):
    number: int
    entry_id: str
    kind: str
    text: str
    topic: str
    area: str
    status: str
    score: float
    grader: str | None
    covered: list[dict[str, Any]]
    missed: list[dict[str, Any]]
    misconceptions: list[dict[str, Any]]
    reference_answer: str
    reference_answer_en: str | None = None  # the bank's English reference, where it has one
    text_en: str = ""
    topic_en: str = ""
    # The follow-up questions the interviewer asked on this question, in order (zh and en).
    probes_asked: list[dict[str, str]] = Field(default_factory=list)
    tests: list[dict[str, Any]] = Field(default_factory=list)  # hidden tests run on the code
    time_used_seconds: float | None
    hints: int
    probes: int
    flags: list[str]


class Report(BaseModel):
    session_id: str
    mode: Mode
    status: str
    end_reason: str | None
    created_at: datetime
    ended_at: datetime | None
    overall_score: float
    questions: list[ReportQuestion]
    per_topic: dict[str, float]
    language: str = "zh"


class Mastery(BaseModel):
    area: str
    mastery: float
    answered: int
    history: list[dict[str, Any]]


class ReviewItem(BaseModel):
    entry_id: str
    text: str
    text_en: str = ""
    area: str
    due: datetime
    is_due: bool
    last_score: float
    reviews: int


class Progress(BaseModel):
    user: str
    sessions: list[dict[str, Any]]
    mastery: list[Mastery]
    review_queue: list[ReviewItem]
