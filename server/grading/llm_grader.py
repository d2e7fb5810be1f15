"""The LLM grader (litellm): analytic JSON per key point; the score is computed here, not by the model."""

from __future__ import annotations

import json
import logging
import re

import server.offline  # noqa: F401  (LITELLM_LOCAL_MODEL_COST_MAP before litellm loads)
from server.config import Settings
from server.corpus.schema import QuestionEntry
from server.grading.models import Grade, KeyPointResult, MisconceptionHit
from server.grading.scoring import score_from
from server.grading.segments import normalise
from server.grading.signals import is_injection
from server.prompts import render

log = logging.getLogger(__name__)
_TAG_RE = re.compile(r"<\s*/?\s*candidate_answer\s*>", re.IGNORECASE)


class LlmGradingError(RuntimeError):
    """The model could not produce a usable grade (provider error, timeout, malformed output)."""


def _quote_in_answer(quote: str, answer: str) -> bool:
    q = normalise(quote)
    return len(q) >= 2 and q in normalise(answer)


def _extract_json(text: str) -> dict:
    text = text.strip()
    fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.DOTALL)
    if fenced:
        text = fenced.group(1)
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("no JSON object in the reply")
    data = json.loads(text[start : end + 1])
    if not isinstance(data, dict) or not isinstance(data.get("key_points"), list):
        raise ValueError("reply lacks a key_points list")
    return data


class LlmGrader:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self.name = f"llm:{settings.llm_model}"

    def _messages(self, entry: QuestionEntry, answer: str, language: str) -> list[dict]:
        rubric = entry.rubric
        assert rubric is not None
        points = "\n".join(f"- {kp.id}: {kp.text} / {kp.text_en}" for kp in rubric.key_points)
        wrong = "\n".join(f"- {m.id}: {m.text}" for m in rubric.misconceptions)
        prompts = self._settings.prompts_dir
        return [
            {
                "role": "system",
                "content": render(
                    prompts,
                    "grade_system.md",
                    language="English" if language == "en" else "Chinese",
                ),
            },
            {
                "role": "user",
                "content": render(
                    prompts,
                    "grade_user.md",
                    question_id=entry.id,
                    question=entry.text,
                    key_points=points,
                    misconceptions=wrong or "- (none)",
                    reference_answer=rubric.reference_answer,
                    answer=_TAG_RE.sub("[candidate_answer tag removed]", answer),
                ),
            },
        ]

    def _complete(self, messages: list[dict]) -> str:
        import litellm

        s = self._settings
        try:
            response = litellm.completion(
                model=s.llm_model,
                messages=messages,
                temperature=0,
                api_base=s.llm_api_base or None,
                api_key=s.llm_api_key or None,
                timeout=s.llm_timeout_seconds,
                num_retries=0,
            )
            return response.choices[0].message.content or ""
        except Exception as exc:  # litellm maps every provider failure to its own exceptions
            raise LlmGradingError(f"provider error: {type(exc).__name__}: {exc}") from exc

    def grade(self, entry: QuestionEntry, answer: str, language: str = "zh") -> Grade:
        messages = self._messages(entry, answer, language)
        last_error: Exception | None = None
        for attempt in range(1 + self._settings.llm_max_retries):
            reply = self._complete(messages)
            try:
                return self._to_grade(entry, answer, _extract_json(reply))
            except (ValueError, TypeError, KeyError) as exc:
                last_error = exc
                log.warning("malformed LLM grade (attempt %d): %s", attempt + 1, exc)
        raise LlmGradingError(f"malformed output: {last_error}")

    def _to_grade(self, entry: QuestionEntry, answer: str, data: dict) -> Grade:
        rubric = entry.rubric
        assert rubric is not None
        flags: list[str] = []
        by_id = {str(item.get("id")): item for item in data["key_points"] if isinstance(item, dict)}
        results = []
        for kp in rubric.key_points:
            item = by_id.get(kp.id, {})
            quote = str(item.get("evidence") or "")
            covered = bool(item.get("covered")) and _quote_in_answer(quote, answer)
            if item.get("covered") and not covered and "unverified_evidence" not in flags:
                flags.append("unverified_evidence")  # a claimed quote that is not in the answer
            results.append(
                KeyPointResult(
                    id=kp.id,
                    text=kp.text,
                    text_en=kp.text_en,
                    weight=kp.weight,
                    covered=covered,
                    evidence=quote if covered else None,
                    confidence=1.0 if covered else 0.0,
                )
            )
        known = {m.id: m for m in rubric.misconceptions}
        hits = []
        for item in data.get("misconceptions") or []:
            if not isinstance(item, dict):
                continue
            m = known.get(str(item.get("id")))
            quote = str(item.get("evidence") or "")
            if m and _quote_in_answer(quote, answer) and all(h.id != m.id for h in hits):
                hits.append(
                    MisconceptionHit(id=m.id, text=m.text, correction=m.correction, evidence=quote)
                )
        if is_injection(answer):
            flags.append("injection")
        return Grade(
            score=score_from(results, len(hits), flags),
            grader=self.name,
            key_points=results,
            misconceptions=hits,
            feedback=str(data.get("feedback") or "").strip(),
            flags=flags,
            reference_answer=rubric.reference_answer,
        )
