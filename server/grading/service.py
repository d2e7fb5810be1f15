"""Choose a grader for a request and fall back to the rubric grader when the LLM fails."""

from __future__ import annotations

import logging

from server.config import Settings
from server.corpus.bank import QuestionBank
from server.corpus.coding import CodingContract
from server.corpus.schema import QuestionEntry
from server.grading.code_extract import explanation_text
from server.grading.code_grader import CodeGrader
from server.grading.feedback import FLAG_TEXT, write_feedback
from server.grading.llm_grader import LlmGrader, LlmGradingError
from server.grading.llm_protocol import answer_language
from server.grading.models import Grade, GraderChoice
from server.grading.rate_limit import GradeRateLimiter
from server.grading.rubric_grader import RubricGrader

log = logging.getLogger(__name__)
FALLBACK_GRADER = "rubric-fallback"
# Why the LLM did not grade, said plainly above the fallback grade's feedback.
FALLBACK_TEXT = {
    "zh": {
        "llm_timeout": "原因：模型在时限内没有给出完整回复。",
        "llm_malformed": "原因：模型的回复无法解析为评分（修正重试后仍然不行）。",
        "llm_provider_error": "原因：模型服务返回了错误或无法连接。",
        "llm_context_overflow": "原因：题目评分标准和回答放不进模型的上下文长度。",
        "llm_reply_too_long": "原因：模型的回复超出长度上限。",
    },
    "en": {
        "llm_timeout": "Reason: the model gave no complete reply within the deadline.",
        "llm_malformed": "Reason: the model's reply could not be read as a grade, even after a repair.",
        "llm_provider_error": "Reason: the model service returned an error or could not be reached.",
        "llm_context_overflow": "Reason: the rubric and the answer do not fit the model's context.",
        "llm_reply_too_long": "Reason: the model's reply was over the length limit.",
    },
}


class GraderUnavailable(ValueError):
    """The requested grader cannot run with this configuration."""


class GradingService:
    def __init__(
        self,
        settings: Settings,
        code: CodeGrader | None = None,
        bank: QuestionBank | None = None,
    ) -> None:
        # The rubric grader is lexical and reads the whole answer: no embedder, no search index.
        # With the bank it also tells an answer to a neighbouring question (`affinity.py`).
        self.rubric = RubricGrader(bank)
        self.llm = LlmGrader(settings, self.rubric) if settings.llm_configured else None
        self.code = code
        self.rate = GradeRateLimiter(
            settings.grade_rate_per_question, settings.grade_rate_window_seconds
        )

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
        # When hidden tests judge the code, the lexical grader reads the explanation only (prose,
        # comments, docstrings): identifiers of failing code must not evidence a key point. The
        # LLM grader reads the whole answer; it can tell what code does.
        attempt = self.code.read(entry, answer) if self.code is not None else None
        decided = self.code is not None and self.code.tests_decide(attempt)
        explanation = explanation_text(answer) if decided else answer
        grade = self._grade_prose(entry, answer, explanation, choice, language)
        if self.code is not None:
            grade = self.code.apply(entry, answer, grade, language, attempt=attempt)
        return grade

    def _grade_prose(
        self,
        entry: QuestionEntry,
        answer: str,
        explanation: str,
        choice: GraderChoice,
        language: str,
    ) -> Grade:
        if self.llm is None or choice == GraderChoice.rubric:
            return self._rubric(entry, explanation, language)
        try:
            return self.llm.grade(entry, answer, language)
        except LlmGradingError as exc:
            log.warning("LLM grading failed for %s, using the rubric grader: %s", entry.id, exc)
            return self._fallback(entry, explanation, answer_language(answer, language), exc)

    def _rubric(self, entry: QuestionEntry, explanation: str, language: str) -> Grade:
        if explanation.strip():
            return self.rubric.grade(entry, explanation, language)
        # Code and nothing else: the explanation earns nothing, the tests decide the rest.
        return self.rubric.zero(entry, ["code_only"], language)

    def _fallback(
        self, entry: QuestionEntry, explanation: str, language: str, exc: LlmGradingError
    ) -> Grade:
        """The rubric grader's grade, marked so that API, UI and eval can tell it apart."""
        grade = self._rubric(entry, explanation, language)
        grade.grader = FALLBACK_GRADER
        grade.fallback_reason = exc.reason
        grade.fallback_detail = exc.detail
        grade.flags += ["llm_fallback", exc.reason]
        texts = FLAG_TEXT["en" if language == "en" else "zh"]
        why = FALLBACK_TEXT["en" if language == "en" else "zh"].get(exc.reason, "")
        structured = write_feedback(
            entry, grade.key_points, grade.misconceptions, grade.flags, language
        )
        line = texts["llm_fallback"]
        grade.feedback = structured.replace(line, f"{line}{why}", 1)
        return grade
