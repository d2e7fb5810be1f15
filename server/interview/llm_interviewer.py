"""The LLM interviewer: words the engine's decisions (probe, transition, clarification) through
litellm, grounded in the candidate's own words and bounded by post-checks.

The model is told the question, the candidate's words and the gap to probe — never the reference
answer or the key points. Its reply is still checked: a line that repeats reference or key point
text (n-gram overlap beyond what the question, the probe and the candidate already said), grades
in prose, or runs long is discarded. Any failure (timeout, provider error, empty or malformed
reply, a failed check) gives the template line, within the same deadline, flagged."""

from __future__ import annotations

import logging
import re
import unicodedata

import server.offline  # noqa: F401  (LITELLM_LOCAL_MODEL_COST_MAP before litellm loads)
from server.config import Settings
from server.corpus.topic_names import TopicNames
from server.interview.phrasing import (
    ClarifyContext,
    Line,
    Phrasing,
    PhrasingInfo,
    ProbeContext,
    TransitionContext,
)
from server.llm_calls import DeadlineLoop
from server.prompts import render

log = logging.getLogger(__name__)

LEAK_NGRAM = 5  # units (a latin word or a CJK character) in a row shared with a secret
_UNIT_RE = re.compile(r"[a-z0-9_]+|[\u3400-\u9fff]")
_TAG_RE = re.compile(r"<\s*/?\s*candidate_(?:answer|question)\s*>", re.IGNORECASE)
_GRADING_RE = re.compile(
    # (?<!\d) and possessive digits: a long run of digits is read once, not from every digit.
    r"(?<!\d)\d++(?:\.\d++)?\s*+/\s*+10\b|(?<!\d)\d++(?:\.\d++)?\s*+分(?!钟|布|类|组|母|子|量|段|支|开|别|析)|"
    r"得分|打分|"
    r"\bscore\b|\bgrade[ds]?\b|答对了|答错了|回答正确|回答错误|完全正确|"
    r"\b(?:correct|incorrect|wrong)\b",
    re.IGNORECASE,
)
RELATIONS = {
    "follow_up": ("它是刚才那题的自然延伸", "it goes one step further on the same topic"),
    "contrast": ("它和刚才那题形成对比", "it contrasts with the previous question"),
    "prerequisite": ("它是刚才那题的基础", "it is the groundwork the previous question builds on"),
    "retrieved": ("它和刚才那题讨论的内容相关", "it is closely related to what we just discussed"),
}


class PhrasingFailed(RuntimeError):
    def __init__(self, flag: str, detail: str) -> None:
        super().__init__(detail)
        self.flag = flag


def units(text: str) -> list[str]:
    """Latin words and single CJK characters, after NFKC and lower-casing."""
    return _UNIT_RE.findall(unicodedata.normalize("NFKC", text).lower())


def ngrams(text: str, n: int = LEAK_NGRAM) -> set[tuple[str, ...]]:
    u = units(text)
    return {tuple(u[i : i + n]) for i in range(len(u) - n + 1)}


def leaks(reply: str, secrets: list[str], allowed: list[str], n: int = LEAK_NGRAM) -> bool:
    """True when the reply shares an n-gram with a secret that the allowed text (the question, the
    probe, the candidate's own words) does not contain, or contains a whole short key point."""
    said = set().union(*(ngrams(a, n) for a in allowed)) if allowed else set()
    mine = ngrams(reply, n) - said
    if any(mine & ngrams(secret, n) for secret in secrets):
        return True
    reply_units = " ".join(units(reply))
    allowed_units = " ".join(units(" ".join(allowed)))
    for secret in secrets:
        s = units(secret)
        if 3 <= len(s) < n:  # a key point too short for an n-gram: its whole text counts
            joined = " ".join(s)
            if joined in reply_units and joined not in allowed_units:
                return True
    return False


# A block never runs over the next <think>: unclosed tags are each read once (linear), not to the end.
_THINK_RE = re.compile(r"<think>(?:(?!<think>).)*?</think>", re.DOTALL | re.IGNORECASE)


def clean_line(text: str) -> str:
    """One plain line: no reasoning block (Qwen3, DeepSeek-R1 served raw), code fences, quotes or
    markdown emphasis around it."""
    text = _THINK_RE.sub("", text)
    if "<think>" in text.lower():  # reasoning cut off by max_tokens: no line came out
        return ""
    text = text.strip().strip("`").strip()
    text = re.sub(r"^(?:interviewer|面试官)\s*[:：]\s*", "", text, flags=re.IGNORECASE)
    text = re.sub(r"\*\*|__", "", text)
    if len(text) >= 2 and text[0] in "\"“「'" and text[-1] in "\"”」'":
        text = text[1:-1].strip()
    return " ".join(text.split())


class LlmInterviewer(Phrasing):
    def __init__(self, settings: Settings, topic_names: TopicNames | None = None) -> None:
        super().__init__(settings.prompts_dir, topic_names)
        self._settings = settings
        self._io = DeadlineLoop()
        self.name = f"llm:{settings.llm_model}"

    # ---------- the three lines an LLM words ----------

    def probe(self, ctx: ProbeContext) -> Line:
        user = render(
            self._settings.prompts_dir,
            "interviewer_probe.md",
            question=ctx.question,
            answer=_TAG_RE.sub("[tag removed]", ctx.answer),
            probe=ctx.probe,
        )
        allowed = [ctx.question, ctx.probe, ctx.answer]
        return self._phrase(
            ctx.language, user, allowed, ctx.secrets, lambda: super(LlmInterviewer, self).probe(ctx)
        )

    def transition(self, ctx: TransitionContext) -> Line:
        zh, en = RELATIONS.get(ctx.relation, RELATIONS["retrieved"])
        next_question = str(ctx.values.get("text", ""))
        user = render(
            self._settings.prompts_dir,
            "interviewer_transition.md",
            previous_question=ctx.previous_question,
            answer=_TAG_RE.sub("[tag removed]", ctx.answer),
            relation=en if ctx.language == "en" else zh,
            next_question=next_question,
        )
        allowed = [ctx.previous_question, ctx.answer, next_question]
        fallback = super().transition(ctx)
        line = self._phrase(ctx.language, user, allowed, ctx.secrets, lambda: fallback)
        if line.phrasing.by != "llm":
            return line
        # The question itself is always shown verbatim, after the model's bridging sentence.
        topic = self.topic_name(ctx.values.get("topic", ""), ctx.language)
        label = f"({topic})" if ctx.language == "en" else f"（{topic}）"
        return Line(text=f"{line.text}\n{label} {next_question}", phrasing=line.phrasing)

    def clarify(self, ctx: ClarifyContext) -> Line:
        probe_line = ""
        if ctx.probe:
            probe_line = f"The follow-up probe the candidate is answering: {ctx.probe}\n"
        user = render(
            self._settings.prompts_dir,
            "interviewer_clarify.md",
            question=ctx.question,
            probe_line=probe_line,
            asked=_TAG_RE.sub("[tag removed]", ctx.asked),
        )
        allowed = [ctx.question, ctx.asked, ctx.probe or ""]
        return self._phrase(
            ctx.language,
            user,
            allowed,
            ctx.secrets,
            lambda: super(LlmInterviewer, self).clarify(ctx),
        )

    # ---------- the call and its checks ----------

    def _phrase(self, language, user, allowed, secrets, fallback) -> Line:  # type: ignore[no-untyped-def]
        try:
            text = self._check(self._complete(language, user), allowed, secrets)
        except PhrasingFailed as exc:
            log.warning("LLM interviewer fell back to the template (%s): %s", exc.flag, exc)
            line: Line = fallback()
            return Line(text=line.text, phrasing=PhrasingInfo(by="template", flags=[exc.flag]))
        return Line(text=text, phrasing=PhrasingInfo(by="llm"))

    def _check(self, reply: str, allowed: list[str], secrets: list[str]) -> str:
        text = clean_line(reply)
        if len(units(text)) < 3:
            raise PhrasingFailed("llm_malformed", f"reply too short: {reply[:80]!r}")
        if len(text) > self._settings.llm_interviewer_max_chars:
            raise PhrasingFailed("llm_malformed", f"reply of {len(text)} characters is too long")
        if leaks(text, secrets, allowed):
            raise PhrasingFailed("llm_leak", "reply repeats reference or key point text")
        if _GRADING_RE.search(text):
            raise PhrasingFailed("llm_grading", "reply grades the candidate in prose")
        return text

    def _complete(self, language: str, user: str) -> str:
        import litellm

        s = self._settings
        system = render(
            s.prompts_dir,
            "interviewer_system.md",
            language="English" if language == "en" else "Chinese (简体中文)",
        )
        try:
            response = self._io.run(
                litellm.acompletion(
                    model=s.llm_model,
                    messages=[
                        {"role": "system", "content": system},
                        {"role": "user", "content": user},
                    ],
                    temperature=0.3,
                    max_tokens=min(s.llm_max_tokens, 400),
                    api_base=s.llm_api_base or None,
                    api_key=s.llm_api_key or None,
                    timeout=s.llm_interviewer_timeout_seconds,
                    num_retries=0,
                ),
                s.llm_interviewer_timeout_seconds,
            )
            choice = response.choices[0]
            content = choice.message.content
            finish = getattr(choice, "finish_reason", None)
        except TimeoutError as exc:
            raise PhrasingFailed(
                "llm_timeout", f"no reply within {s.llm_interviewer_timeout_seconds} s"
            ) from exc
        except Exception as exc:  # litellm maps every provider failure to its own exceptions
            raise PhrasingFailed("llm_error", f"{type(exc).__name__}: {exc}") from exc
        if not isinstance(content, str) or not content.strip():
            raise PhrasingFailed("llm_malformed", "empty reply")
        if finish == "length":  # a line cut mid-sentence is not said
            raise PhrasingFailed("llm_malformed", "reply cut off at max_tokens")
        return content
