"""The LLM grader (litellm): analytic JSON per key point; the score is computed here, not by the model."""

from __future__ import annotations

import asyncio
import html
import json
import logging
import re
import threading
from collections import Counter
from collections.abc import Coroutine
from typing import Any

import server.offline  # noqa: F401  (LITELLM_LOCAL_MODEL_COST_MAP before litellm loads)
from server.config import Settings
from server.corpus.schema import KeyPoint, QuestionEntry
from server.grading.models import Grade, KeyPointResult, MisconceptionHit
from server.grading.scoring import analytic_score
from server.grading.segments import normalise
from server.grading.signals import is_injection
from server.prompts import render

log = logging.getLogger(__name__)
_TAG_RE = re.compile(r"<\s*/?\s*candidate_answer\s*>", re.IGNORECASE)

# Evidence rules: a quote must be a real span of a few words that is about the point.
MIN_QUOTE_UNITS = 3.0  # latin words count 1, CJK characters 1/2: "baseline 取均值" = 3
MAX_POINTS_PER_QUOTE = 2  # one sentence may show two points; the same span for more is a dodge
_LATIN_RE = re.compile(r"[a-z0-9_]+(?:\([a-z0-9_]*\))?")
_CJK_RE = re.compile(r"[\u3400-\u9fff]+")
_STOP_WORDS = frozenset(
    "the a an of is are be to in on for and or it its by with as that this we use used from "
    "at not no so then than there which what how why when".split()
)
_STOP_BIGRAMS = frozenset(
    "这个 一个 我们 就是 可以 因为 所以 的是 是一 不是 问题 这样 那么 什么 如何 知道 觉得 然后".split()
)

# Feedback is plain text: no markup reaches the UI, and it has a size limit.
_TAG_LIKE_RE = re.compile(r"<\s*/?\s*[a-zA-Z!?][^<>]*>?")
_SCHEME_RE = re.compile(r"(?:j\s*a\s*v\s*a|v\s*b)\s*s\s*c\s*r\s*i\s*p\s*t\s*:|data\s*:", re.I)
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class LlmGradingError(RuntimeError):
    """The model could not produce a usable grade (provider error, timeout, malformed output)."""


def _quote_in_answer(quote: str, answer: str) -> bool:
    q = normalise(quote)
    return len(q) >= 2 and q in normalise(answer)


def _terms(text: str) -> set[str]:
    """Content terms: latin words (2+ chars, no stop words) and CJK character bigrams."""
    norm = normalise(text)
    terms = {w for w in _LATIN_RE.findall(norm) if len(w) >= 2 and w not in _STOP_WORDS}
    for run in _CJK_RE.findall(norm):
        terms.update(run[i : i + 2] for i in range(len(run) - 1))
    return terms - _STOP_BIGRAMS


def quote_units(quote: str) -> float:
    norm = normalise(quote)
    return len(_LATIN_RE.findall(norm)) + 0.5 * sum(len(r) for r in _CJK_RE.findall(norm))


def supports(quote: str, kp: KeyPoint) -> bool:
    """A quote supports a key point when it uses the point's own terms or one of its aliases.

    Why: an LLM can be talked into "quoting" any span that occurs in the answer; a span that
    shares nothing with the point is not evidence of it."""
    squashed = normalise(quote).replace(" ", "")
    if any(len(a) >= 2 and normalise(a).replace(" ", "") in squashed for a in kp.aliases):
        return True
    about = " ".join([kp.text, kp.text_en, *kp.aliases])
    return bool(_terms(quote) & _terms(about))


def clean_feedback(text: str, limit: int) -> str:
    """Model feedback as plain text: entities decoded then every tag and script URL removed,
    control characters dropped, cut to `limit` characters."""
    text = html.unescape(html.unescape(str(text)))
    previous = None
    while previous != text:  # nested or split tags: strip until nothing changes
        previous = text
        text = _TAG_LIKE_RE.sub("", text)
    text = _SCHEME_RE.sub("", text)
    text = _CONTROL_RE.sub("", text).replace("<", "‹").replace(">", "›").strip()
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


class _DeadlineLoop:
    """One event loop on a daemon thread for this grader's LLM calls.

    Why: the provider timeout is per read, so a server that trickles a byte every few seconds
    never trips it. Here each call runs as a task with one overall deadline and is cancelled
    (its connection closed) when the deadline passes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None

    def _get(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="llm-io", daemon=True).start()
                self._loop = loop
            return self._loop

    def run(self, coro: Coroutine[Any, Any, Any], deadline: float) -> Any:
        future = asyncio.run_coroutine_threadsafe(
            asyncio.wait_for(coro, timeout=deadline), self._get()
        )
        try:
            return future.result(timeout=deadline + 5)
        except TimeoutError:
            future.cancel()
            raise


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
        self._io = _DeadlineLoop()

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
            response = self._io.run(
                litellm.acompletion(
                    model=s.llm_model,
                    messages=messages,
                    temperature=0,
                    max_tokens=s.llm_max_tokens,
                    api_base=s.llm_api_base or None,
                    api_key=s.llm_api_key or None,
                    timeout=s.llm_timeout_seconds,
                    num_retries=0,
                ),
                s.llm_timeout_seconds,
            )
            content = response.choices[0].message.content or ""
        except TimeoutError as exc:
            raise LlmGradingError(f"no complete reply within {s.llm_timeout_seconds} s") from exc
        except Exception as exc:  # litellm maps every provider failure to its own exceptions
            raise LlmGradingError(f"provider error: {type(exc).__name__}: {exc}") from exc
        if len(content) > s.llm_max_reply_chars:
            raise LlmGradingError(f"reply of {len(content)} characters is over the limit")
        return content

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

    @staticmethod
    def _evidence(
        entry: QuestionEntry, answer: str, data: dict
    ) -> tuple[dict[str, str], list[str]]:
        """Key point id -> the quote that earns it credit, after every evidence rule; and a flag
        for each rule that removed a claim (see MIN_QUOTE_UNITS and MAX_POINTS_PER_QUOTE)."""
        rubric = entry.rubric
        assert rubric is not None
        by_id = {str(item.get("id")): item for item in data["key_points"] if isinstance(item, dict)}
        claimed = {
            kp.id: str(by_id[kp.id].get("evidence") or "")
            for kp in rubric.key_points
            if kp.id in by_id and by_id[kp.id].get("covered") is True
        }
        # The same span claimed for many points is a dodge (e.g. answer[:12] for every point):
        # counted over all claims, so the one point it happens to fit is not credited either.
        uses = Counter(normalise(q) for q in claimed.values())
        claims: dict[str, str] = {}
        rejected: list[str] = []
        for kp in rubric.key_points:
            if kp.id not in claimed:
                continue
            quote = claimed[kp.id]
            if not _quote_in_answer(quote, answer):
                rejected.append("unverified_evidence")  # not in the answer at all
            elif uses[normalise(quote)] > MAX_POINTS_PER_QUOTE:
                rejected.append("reused_evidence")
            elif quote_units(quote) < MIN_QUOTE_UNITS:
                rejected.append("short_evidence")
            elif not supports(quote, kp):
                rejected.append("unsupported_evidence")
            else:
                claims[kp.id] = quote
        return claims, list(dict.fromkeys(rejected))

    def _to_grade(self, entry: QuestionEntry, answer: str, data: dict) -> Grade:
        rubric = entry.rubric
        assert rubric is not None
        flags: list[str] = []
        injected = is_injection(answer)
        # An answer that tries to instruct the grader earns no LLM credit, whatever the model
        # says: a model that obeyed the injection is exactly the case to guard against.
        claims, rejected = ({}, []) if injected else self._evidence(entry, answer, data)
        flags.extend(rejected)
        results = []
        for kp in rubric.key_points:
            quote = claims.get(kp.id)
            covered = quote is not None
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
        if injected:
            flags.append("injection")
            feedback = ""  # the model's words about an answer that addressed the model
        else:
            feedback = clean_feedback(
                data.get("feedback") or "", self._settings.llm_feedback_max_chars
            )
        return Grade(
            score=0.0 if injected else analytic_score(results, len(hits), flags),
            grader=self.name,
            key_points=results,
            misconceptions=hits,
            feedback=feedback,
            flags=flags,
            reference_answer=rubric.reference_answer,
        )
