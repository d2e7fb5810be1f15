"""Choose a grader for a request and fall back to the rubric grader when the LLM fails."""

from __future__ import annotations

import logging

from server.config import Settings
from server.corpus.coding import CodingContract
from server.corpus.schema import QuestionEntry
from server.grading.code_grader import CodeGrader
from server.grading.feedback import write_feedback
from server.grading.llm_grader import LlmGrader, LlmGradingError
from server.grading.models import Grade, GraderChoice
from server.grading.rubric_grader import RubricGrader

log = logging.getLogger(__name__)


class GraderUnavailable(ValueError):
    """The requested grader cannot run with this configuration."""


class GradingService:
    def __init__(
        self,
        settings: Settings,
        code: CodeGrader | None = None,
    ) -> None:
        # The rubric grader is lexical and reads the whole answer: no embedder, no search index.
        self.rubric = RubricGrader()
        self.llm = LlmGrader(settings) if settings.llm_configured else None
        self.code = code

    def coding_contract(self, entry_id: str) -> CodingContract | None:
        """The function a coding question's answer should define, when its code is run by tests."""
        return self.code.tasks.contract_for(entry_id) if self.code is not None else None

    @property
    def llm_configured(self) -> bool:
        return self.llm is not None

    def zero(self, entry: QuestionEntry, flag: str, language: str = "zh") -> Grade:
        return self.rubric.zero(entry, [flag], language)

    def grade(
        self,
        entry: QuestionEntry,
        answer: str,
        choice: GraderChoice = GraderChoice.auto,
        language: str = "zh",
    ) -> Grade:
        if entry.rubric is None:
            raise GraderUnavailable(f"question {entry.id!r} has no rubric yet")
        if choice == GraderChoice.llm and self.llm is None:
            raise GraderUnavailable(
                "no LLM is configured (set SPARRING_LLM_MODEL); use grader=rubric"
            )
        if not answer.strip():
            return self.rubric.zero(entry, ["empty"], language)
        grade = self._grade_prose(entry, answer, choice, language)
        if self.code is not None:
            grade = self.code.apply(entry, answer, grade, language)
        return grade

    def _grade_prose(
        self, entry: QuestionEntry, answer: str, choice: GraderChoice, language: str
    ) -> Grade:
        if self.llm is None or choice == GraderChoice.rubric:
            return self.rubric.grade(entry, answer, language)
        try:
            grade = self.llm.grade(entry, answer, language)
        except LlmGradingError as exc:
            log.warning("LLM grading failed for %s, using the rubric grader: %s", entry.id, exc)
            grade = self.rubric.grade(entry, answer, language)
            grade.flags.append("llm_fallback")
            grade.feedback = write_feedback(
                entry, grade.key_points, grade.misconceptions, grade.flags, language
            )
            return grade
        structured = write_feedback(
            entry, grade.key_points, grade.misconceptions, grade.flags, language
        )
        grade.feedback = f"{grade.feedback}\n\n{structured}".strip()
        return grade
