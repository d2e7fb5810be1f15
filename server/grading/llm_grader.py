"""The LLM grader (litellm): analytic JSON per key point; the score is computed here, not by the model."""

from __future__ import annotations

import asyncio
import html
import json
import logging
import re
import time
from collections import Counter
from dataclasses import dataclass

import server.offline  # noqa: F401  (LITELLM_LOCAL_MODEL_COST_MAP before litellm loads)
from server.config import Settings
from server.corpus.hygiene import GENERIC_TERMS, weak_aliases
from server.corpus.schema import KeyPoint, QuestionEntry
from server.grading.evidence import AnswerReading
from server.grading.feedback import write_feedback
from server.grading.llm_protocol import (
    QUOTE_MAX_CHARS,
    ContextTooSmall,
    MalformedReply,
    ParsedReply,
    PromptPlan,
    answer_language,
    parse_reply,
    plan_prompt,
    quote_pieces,
    repair_message,
)
from server.grading.models import Grade, KeyPointResult, MisconceptionHit
from server.grading.rubric_grader import RubricGrader
from server.grading.scoring import COVERED_AT, analytic_score
from server.grading.segments import normalise, split_segments
from server.grading.signals import is_injection
from server.llm_calls import DeadlineLoop

log = logging.getLogger(__name__)
DEFAULT_CONTEXT_TOKENS = 8192  # a model litellm does not know (e.g. openai/<local name>)

# Evidence rules: a quote must be a real span of a few words that is about the point.
MIN_QUOTE_UNITS = 3.0  # latin words count 1, CJK characters 1/2: "baseline 取均值" = 3
MAX_POINTS_PER_QUOTE = 2  # one sentence may show two points; the same span for more is a dodge
MIN_SHARED_TERMS = 2  # specific content terms a quote shares with the point it is claimed for
_LATIN_RE = re.compile(r"[a-z0-9_]+(?:\([a-z0-9_]*\))?")
_CJK_RE = re.compile(r"[\u3400-\u9fff]+")
_STOP_WORDS = frozenset(
    "the a an of is are be to in on for and or it its by with as that this we use used from "
    "at not no so then than there which what how why when".split()
)
_STOP_BIGRAMS = frozenset(
    "这个 一个 我们 就是 可以 因为 所以 的是 是一 不是 问题 这样 那么 什么 如何 知道 觉得 然后".split()
)

_GENERIC_EXTRA = "methods learn learning can only per off keeps makes make using does done way"


def _generic_terms() -> frozenset[str]:
    words = " ".join([*GENERIC_TERMS, _GENERIC_EXTRA])
    return frozenset(_terms(words)) | frozenset(_GENERIC_EXTRA.split())


# Feedback is plain text: no markup reaches the UI, and it has a size limit.
_TAG_LIKE_RE = re.compile(r"<\s*/?\s*[a-zA-Z!?][^<>]*>?")
_SCHEME_RE = re.compile(r"(?:j\s*a\s*v\s*a|v\s*b)\s*s\s*c\s*r\s*i\s*p\s*t\s*:|data\s*:", re.I)
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


FALLBACK_REASONS = (
    "llm_timeout",  # no complete reply within the deadline
    "llm_malformed",  # the reply could not be read as a grade of this rubric, even after a repair
    "llm_provider_error",  # the provider refused or failed (HTTP error, connection)
    "llm_context_overflow",  # the prompt cannot fit the model's context
    "llm_reply_too_long",  # over SPARRING_LLM_MAX_REPLY_CHARS
)


class LlmGradingError(RuntimeError):
    """The model could not produce a usable grade; `reason` is one of FALLBACK_REASONS."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


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


def supports(quote: str, kp: KeyPoint, entry: QuestionEntry | None = None) -> bool:
    """A quote supports a key point when it holds one of the point's specific aliases, or at
    least MIN_SHARED_TERMS of the point's own content terms that are neither generic ("policy",
    "reward", 方法) nor words of the question itself.

    Why: an LLM can be talked into "quoting" any span that occurs in the answer, and a model
    that marks every point covered quotes sentences that share one topic word with each point;
    neither is evidence of the point."""
    squashed = normalise(quote).replace(" ", "")
    weak = weak_aliases(entry, kp) if entry is not None else frozenset()
    if any(
        len(a) >= 2 and a not in weak and normalise(a).replace(" ", "") in squashed
        for a in kp.aliases
    ):
        return True
    about = " ".join([kp.text, kp.text_en, *kp.aliases])
    common = _GENERIC_TERMS | (_question_terms(entry) if entry is not None else frozenset())
    return len((_terms(quote) & _terms(about)) - common) >= MIN_SHARED_TERMS


_GENERIC_TERMS = _generic_terms()


def _question_terms(entry: QuestionEntry) -> frozenset[str]:
    return frozenset(_terms(f"{entry.text} {entry.text_en}"))


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


@dataclass(frozen=True)
class Completion:
    text: str
    finish_reason: str  # "length" = cut at max_tokens


_TRANSIENT = (
    "InternalServerError",
    "ServiceUnavailableError",
    "APIConnectionError",
    "RateLimitError",
    "BadGatewayError",
)
# Prose a comment may not carry next to a grade that says otherwise.
_PRAISE_RE = re.compile(
    r"correct|accurate|excellent|great|good|well|complete|thorough|solid|perfect|"
    r"正确|准确|完整|全面|很好|不错|优秀|满分|清晰|到位",
    re.IGNORECASE,
)
_BLAME_RE = re.compile(
    r"wrong|incorrect|miss|lack|fail|错误|不正确|遗漏|缺少|没有提到|未提及|不对", re.IGNORECASE
)
COMMENT_MAX_CHARS = 600
LOW_SCORE = 5.0
HIGH_SCORE = 8.0


def comment_fits(comment: str, language: str, grade: Grade) -> bool:
    """Keep the model's short comment only when it is in the answer's language and does not
    contradict the computed grade (praise above a low score, blame above a clean high one)."""
    if not comment or answer_language(comment, language) != language:
        return False
    if grade.score < LOW_SCORE and _PRAISE_RE.search(comment):
        return False
    clean = not grade.misconceptions and all(kp.covered for kp in grade.key_points)
    return not (grade.score >= HIGH_SCORE and clean and _BLAME_RE.search(comment))


class LlmGrader:
    def __init__(self, settings: Settings, rubric: RubricGrader | None = None) -> None:
        self._settings = settings
        self.name = f"llm:{settings.llm_model}"
        self._io = DeadlineLoop()
        # The offline reading of the same answer: which sentences are wrong claims (a quote from
        # one earns nothing) and the points a trimmed prompt left out.
        self._rubric = rubric or RubricGrader()
        self._context: int | None = None
        if settings.llm_log_level:
            show_log(settings.llm_log_level)

    # -- what the provider can take ----------------------------------------------------------------
    def context_tokens(self) -> int:
        s = self._settings
        if s.llm_context_tokens:
            return s.llm_context_tokens
        if self._context is None:
            import litellm

            try:
                info = litellm.get_model_info(s.llm_model)
                self._context = int(info.get("max_input_tokens") or DEFAULT_CONTEXT_TOKENS)
            except Exception:  # an unmapped model (openai/<local name>): litellm knows nothing
                self._context = DEFAULT_CONTEXT_TOKENS
        return self._context

    def _response_format(self, plan: PromptPlan) -> dict | None:
        mode = self._settings.llm_response_format
        if mode == "auto":
            import litellm

            try:
                mode = (
                    "json_schema"
                    if litellm.supports_response_schema(self._settings.llm_model)
                    else "none"
                )
            except Exception:
                mode = "none"
        if mode == "json_schema":
            return {
                "type": "json_schema",
                "json_schema": {"name": "grade", "schema": plan.response_schema(), "strict": False},
            }
        if mode == "json_object":
            return {"type": "json_object"}
        return None

    def plan(self, entry: QuestionEntry, answer: str, language: str) -> PromptPlan:
        s = self._settings
        try:
            return plan_prompt(
                entry, answer, language, s.prompts_dir, self.context_tokens(), s.llm_max_tokens
            )
        except ContextTooSmall as exc:
            raise LlmGradingError("llm_context_overflow", str(exc)) from exc

    # -- one call ------------------------------------------------------------------------------
    def _complete(
        self, messages: list[dict], max_tokens: int, response_format: dict | None, deadline: float
    ) -> Completion:
        import litellm

        # litellm prints a "Give Feedback / Get Help" banner to stdout on every provider error;
        # the failure is logged here instead.
        litellm.suppress_debug_info = True
        s = self._settings
        extra = {"response_format": response_format} if response_format else {}
        log.debug(
            "LLM grade request: model=%s max_tokens=%d format=%s deadline=%.1fs prompt=%s",
            s.llm_model,
            max_tokens,
            (response_format or {}).get("type", "none"),
            deadline,
            json.dumps(messages, ensure_ascii=False)[:20_000],
        )
        request = dict(
            model=s.llm_model,
            messages=messages,
            temperature=0,
            max_tokens=max_tokens,
            api_base=s.llm_api_base or None,
            api_key=s.llm_api_key or None,
            timeout=deadline,
            num_retries=0,
            **extra,
        )
        call = _streamed(request, s.llm_max_reply_chars) if s.llm_stream else _whole(request)
        try:
            # The call runs as a task with one overall deadline: when it passes, the task is
            # cancelled and its HTTP connection closed, so the provider stops generating.
            reply = self._io.run(call, deadline)
        except TimeoutError as exc:
            raise LlmGradingError(
                "llm_timeout", f"no complete reply within {deadline:.0f} s"
            ) from exc
        except LlmGradingError:
            raise
        except litellm.ContextWindowExceededError as exc:
            raise LlmGradingError("llm_context_overflow", f"the provider said: {exc}") from exc
        except litellm.Timeout as exc:
            raise LlmGradingError("llm_timeout", f"the provider timed out: {exc}") from exc
        except Exception as exc:  # litellm maps every provider failure to its own exceptions
            raise _ProviderFailure(exc) from exc
        log.debug("LLM grade reply (%s): %s", reply.finish_reason, reply.text[:4000])
        if len(reply.text) > s.llm_max_reply_chars:
            raise LlmGradingError(
                "llm_reply_too_long", f"reply of {len(reply.text)} characters is over the limit"
            )
        return reply

    # -- a grade -------------------------------------------------------------------------------
    def grade(self, entry: QuestionEntry, answer: str, language: str = "zh") -> Grade:
        s = self._settings
        language = answer_language(answer, language)
        plan = self.plan(entry, answer, language)
        response_format = self._response_format(plan)
        messages = plan.messages
        ends = time.monotonic() + s.llm_grade_deadline_seconds
        failure = LlmGradingError("llm_malformed", "no attempt was made")
        for attempt in range(1 + s.llm_max_retries):
            remaining = ends - time.monotonic()
            if remaining < 0.5:
                raise LlmGradingError(
                    "llm_timeout", f"the {s.llm_grade_deadline_seconds:.0f} s grade deadline passed"
                )
            try:
                reply = self._complete(
                    messages,
                    plan.max_tokens,
                    response_format,
                    min(s.llm_timeout_seconds, remaining),
                )
            except _ProviderFailure as exc:
                failure = LlmGradingError("llm_provider_error", exc.describe())
                if response_format is not None and exc.kind == "BadRequestError":
                    # Retrying helps only if the request changes: drop the schema this
                    # provider refused and ask for JSON by instruction alone.
                    log.warning("provider refused response_format for %s: %s", entry.id, exc)
                    response_format = None
                    continue
                if exc.kind in _TRANSIENT:
                    continue
                raise failure from exc
            try:
                parsed = parse_reply(reply.text, plan, truncated=reply.finish_reason == "length")
            except MalformedReply as exc:
                log.warning(
                    "malformed LLM grade for %s (attempt %d): %s", entry.id, attempt + 1, exc
                )
                log.debug("raw LLM reply for %s: %r", entry.id, reply.text[:8000])
                failure = LlmGradingError("llm_malformed", str(exc))
                # Not the same request again (temperature 0 repeats itself): say what was wrong.
                messages = with_repair(plan.messages, str(exc), plan)
                continue
            return self._to_grade(entry, answer, plan, parsed)
        raise failure

    def _evidence(
        self,
        entry: QuestionEntry,
        answer: str,
        plan: PromptPlan,
        parsed: ParsedReply,
        reading: AnswerReading,
    ) -> tuple[dict[str, str], list[str]]:
        """Key point id -> the quote that earns it credit, after every evidence rule; and a flag
        for each rule that removed a claim (see MIN_QUOTE_UNITS and MAX_POINTS_PER_QUOTE)."""
        points = {kp.id: kp for kp in plan.points}
        claimed = {
            pid: verified_quote(quote, answer, points[pid], entry)
            for pid, quote in parsed.covered.items()
        }
        # The same span claimed for many points is a dodge (e.g. answer[:12] for every point):
        # counted over all claims, so the one point it happens to fit is not credited either.
        uses = Counter(normalise(q) for q in claimed.values() if q)
        wrong = wrong_sentences(reading)
        claims: dict[str, str] = {}
        rejected: list[str] = []
        for kp in plan.points:
            if kp.id not in claimed:
                continue
            quote = claimed[kp.id]
            if not quote:
                rejected.append("unverified_evidence")  # not in the answer at all
            elif uses[normalise(quote)] > MAX_POINTS_PER_QUOTE:
                rejected.append("reused_evidence")
            elif quote_units(quote) < MIN_QUOTE_UNITS:
                rejected.append("short_evidence")
            elif not supports(quote, kp, entry):
                rejected.append("unsupported_evidence")
            elif in_wrong_sentence(quote, wrong):
                rejected.append("contradicted_evidence")
            else:
                claims[kp.id] = quote
        return claims, list(dict.fromkeys(rejected))

    def _to_grade(
        self, entry: QuestionEntry, answer: str, plan: PromptPlan, parsed: ParsedReply
    ) -> Grade:
        rubric = entry.rubric
        assert rubric is not None
        flags: list[str] = []
        reading = self._rubric.read(entry, answer)
        injected = is_injection(answer)
        # An answer that tries to instruct the grader earns no LLM credit, whatever the model
        # says: a model that obeyed the injection is exactly the case to guard against.
        claims, rejected = (
            ({}, []) if injected else self._evidence(entry, answer, plan, parsed, reading)
        )
        flags.extend(rejected)
        sent = {kp.id for kp in plan.points}
        offline = {p.point.id: p for p in reading.points}
        results = []
        for kp in rubric.key_points:
            if kp.id in sent or injected:
                quote = claims.get(kp.id)
                covered, confidence = quote is not None, 1.0 if quote is not None else 0.0
            else:  # left out of a trimmed prompt: the offline reading judges it
                p = offline[kp.id]
                covered = p.credit >= COVERED_AT
                quote, confidence = (p.evidence if covered else None), round(p.credit, 3)
            results.append(
                KeyPointResult(
                    id=kp.id,
                    text=kp.text,
                    text_en=kp.text_en,
                    weight=kp.weight,
                    covered=covered,
                    evidence=quote if covered else None,
                    confidence=confidence,
                )
            )
        known = {m.id: m for m in rubric.misconceptions}
        hits = []
        for mid, raw in parsed.misconceptions.items():
            m = known[mid]
            quote = next((q for q in quote_pieces(raw) if _quote_in_answer(q, answer)), "")
            if quote:
                hits.append(
                    MisconceptionHit(
                        id=m.id,
                        text=m.text,
                        correction=m.correction,
                        evidence=quote,
                        text_en=m.text_en,
                        correction_en=m.correction_en or "",
                    )
                )
        if parsed.repaired:
            flags.append("llm_ids_repaired")
        if "points_dropped" in plan.trimmed:
            flags.append("llm_rubric_trimmed")
        if plan.answer_cut:
            flags.append("llm_answer_cut")
        if injected:
            flags.append("injection")
        grade = Grade(
            score=0.0 if injected else analytic_score(results, len(hits), flags),
            grader=self.name,
            key_points=results,
            misconceptions=hits,
            feedback="",
            flags=flags,
            reference_answer=rubric.reference_answer,
        )
        language = plan.language
        structured = write_feedback(entry, results, hits, flags, language)
        comment = clean_feedback(
            parsed.comment, min(COMMENT_MAX_CHARS, self._settings.llm_feedback_max_chars)
        )
        # The model's words about an answer that addressed the model are not passed on; nor a
        # comment in another language or one that contradicts the computed grade.
        keep = not injected and comment_fits(comment, language, grade)
        grade.feedback = f"{comment}\n\n{structured}".strip() if keep else structured
        return grade


def show_log(level: str) -> None:
    """Send this module's log records at `level` and above to stderr (once per process): what
    SPARRING_LLM_LOG_LEVEL=DEBUG shows, since litellm's own debug log never has our replies."""
    log.setLevel(level.upper())
    if not any(getattr(h, "sparring_llm", False) for h in log.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        handler.sparring_llm = True  # type: ignore[attr-defined]
        log.addHandler(handler)


async def _whole(request: dict) -> Completion:
    import litellm

    response = await litellm.acompletion(**request)
    choice = response.choices[0]
    return Completion(choice.message.content or "", str(choice.finish_reason or ""))


async def _streamed(request: dict, max_chars: int) -> Completion:
    """The reply streamed: a local server (llama.cpp) notices a closed connection at its next
    chunk and frees its slot, where a non-streamed request may run on to max_tokens."""
    import litellm

    response = await litellm.acompletion(stream=True, **request)
    parts: list[str] = []
    size, finish = 0, ""
    try:
        async for chunk in response:
            if not chunk.choices:
                continue
            choice = chunk.choices[0]
            text = getattr(choice.delta, "content", None) or ""
            parts.append(text)
            size += len(text)
            finish = str(choice.finish_reason or finish or "")
            if size > max_chars:
                raise LlmGradingError(
                    "llm_reply_too_long", f"reply of over {max_chars} characters is over the limit"
                )
    finally:
        # On the deadline (cancellation) or an early stop, close the stream's connection now
        # rather than when it is garbage-collected.
        stream = getattr(response, "completion_stream", None)
        closer = getattr(stream, "close", None) or getattr(stream, "aclose", None)
        if closer is not None:
            result = closer()
            if asyncio.iscoroutine(result):
                await result
    return Completion("".join(parts), finish)


class _ProviderFailure(Exception):
    def __init__(self, exc: Exception) -> None:
        super().__init__(str(exc))
        self.kind = type(exc).__name__
        self.status = getattr(exc, "status_code", None)

    def describe(self) -> str:
        status = f" (HTTP {self.status})" if self.status else ""
        return f"{self.kind}{status}: {str(self)[:300]}"


def with_repair(messages: list[dict], problem: str, plan: PromptPlan) -> list[dict]:
    """The prompt again with the repair note appended to the user turn (a second user turn in a
    row breaks some local chat templates)."""
    repaired = [dict(m) for m in messages]
    repaired[-1]["content"] += "\n\n" + repair_message(problem, plan)["content"]
    return repaired


def verified_quote(raw: str, answer: str, kp: KeyPoint, entry: QuestionEntry) -> str:
    """The claimed quote as a verbatim span of the answer, or "" when it is not one.

    Wrapper text was stripped by the parser; an ellipsised quote counts by its longest real piece;
    a quote longer than a span is narrowed to its first sentence that is about the point."""
    for piece in quote_pieces(raw):
        if not _quote_in_answer(piece, answer):
            continue
        if len(piece) <= 2 * QUOTE_MAX_CHARS:
            return piece
        for segment in split_segments(piece):
            if supports(segment.text, kp, entry):
                return segment.text
        return piece
    return ""


def wrong_sentences(reading: AnswerReading) -> list[str]:
    """Sentences the offline reader found to assert a wrong claim, to be framed as wrong, or to
    instruct the grader: no quote from them evidences a point."""
    found = [normalise(w.evidence) for w in reading.wrong]
    found += [normalise(s.segment.text) for s in reading.sentences if s.framed_wrong or s.injection]
    return [f for f in found if f]


def in_wrong_sentence(quote: str, wrong: list[str]) -> bool:
    q = normalise(quote)
    return any(q in w or w in q for w in wrong)
