"""What a grade looks like, whichever grader produced it."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field


class GraderChoice(StrEnum):
    auto = "auto"
    rubric = "rubric"
    llm = "llm"


class KeyPointResult(BaseModel):
    id: str
    text: str
    text_en: str = ""
    weight: float = 1.0
    covered: bool
    evidence: str | None = Field(default=None, description="A verbatim span of the answer")
    confidence: float = Field(default=0.0, ge=0, le=1)


class MisconceptionHit(BaseModel):
    id: str
    text: str
    correction: str
    evidence: str
    text_en: str = ""
    correction_en: str = ""


class TestResult(BaseModel):
    """One hidden test of a coding question, run against the candidate's function in the sandbox."""

    name: str
    passed: bool
    explain: str = Field(description="What the test checks")
    message: str = Field(default="", description="Why it failed, or 'ok'")
    kind: str = Field(
        default="ok",
        description="ok, values, shape, nonfinite, count, error (the function raised) or run "
        "(the code did not run: syntax error, CPU or wall-clock limit…)",
    )
    seed: int | None = Field(
        default=None, description="The submission's seed: the case's numbers were drawn from it"
    )
    inputs: dict[str, str] | None = Field(
        default=None,
        description="The first failing case of each kind: its arguments, shapes and values "
        "shortened",
    )
    expected: str | None = Field(default=None, description="What the reference returned")
    returned: str | None = Field(default=None, description="What the answer's function returned")
    index: list[int] | None = Field(
        default=None, description="The first index where returned and expected differ"
    )


class Grade(BaseModel):
    score: float = Field(ge=0, le=10)
    max_score: int = 10
    grader: str
    key_points: list[KeyPointResult]
    misconceptions: list[MisconceptionHit]
    feedback: str
    flags: list[str] = Field(default_factory=list)
    reference_answer: str = ""
    tests: list[TestResult] = Field(
        default_factory=list, description="Hidden tests run on the answer's code (coding questions)"
    )
    fallback_reason: str | None = Field(
        default=None,
        description="Set when the LLM grader failed and the rubric grader answered instead "
        "(grader 'rubric-fallback'): llm_timeout, llm_malformed, llm_provider_error, "
        "llm_context_overflow or llm_reply_too_long",
    )
    fallback_detail: str | None = Field(
        default=None, description="What went wrong with the LLM call, in a sentence"
    )
