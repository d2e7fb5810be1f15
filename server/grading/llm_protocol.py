"""The compact grading protocol between the LLM grader and a model.

The prompt names rubric points by short ids (P1..Pn, M1..Mm) in the answer's language, is sized to
the model's context (the reference answer, then misconceptions, then the lowest-weight points are
trimmed before the answer is ever cut), and asks for one JSON object whose size is budgeted per
point. The reply parser matches ids by id, by position ("1", "2") or by point text when that is
unambiguous; anything else is a `MalformedReply` naming what was wrong, so a retry can say so."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from server.corpus.schema import KeyPoint, Misconception, QuestionEntry
from server.grading.segments import normalise
from server.prompts import render

QUOTE_MAX_CHARS = 80  # a span that shows the point, not the answer
# Output budget in tokens. A point is {"id":"P3","evidence":"<≤80 chars>","covered":true}: about
# 15 tokens of JSON and up to ~55 of a CJK quote; a misconception is a little shorter.
TOKENS_BASE = 40
TOKENS_PER_POINT = 72
TOKENS_PER_MISCONCEPTION = 60
TOKENS_COMMENT = 100
CONTEXT_MARGIN = 64  # chat template and role tokens the estimate does not see
REFERENCE_SHORT_CHARS = 300
MIN_ANSWER_CHARS = 200  # below this, cutting the answer would grade something else
ANSWER_CUT_MARK = "\n[… answer cut to fit the model's context …]"

_TAG_RE = re.compile(r"<\s*/?\s*candidate_answer\s*>", re.IGNORECASE)
_CJK_CHAR_RE = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]")
_LATIN_WORD_RE = re.compile(r"[A-Za-z]{2,}")
# Possessive blanks (and no start inside a blank run): `\s*#?\s*` gave blanks back and forth.
_POSITION_RE = re.compile(
    r"(?<!\s)(?:key\s*+point|point|kp|item|misconception|no\.?)?\s*+#?\s*+(\d{1,2})[.)]?", re.I
)
# (?<!\s): a match starts where the blanks start, not at every blank of a long run (linear).
_ELLIPSIS_RE = re.compile(r"(?<!\s)\s*(?:\.{3,}|…+)\s*")
_QUOTE_MARKS = "\"'“”‘’「」『』`"
_TRUE = {"true", "yes", "y", "1", "covered", "是", "对"}
_FALSE = {"false", "no", "n", "0", "not covered", "", "否", "none", "null"}


class MalformedReply(ValueError):
    """The reply cannot be read as a grade of this rubric; the message says what was wrong."""


class ContextTooSmall(ValueError):
    """Even the smallest prompt (one point, a cut answer) does not fit the model's context."""


def estimate_tokens(text: str) -> int:
    """A conservative token count without a tokenizer: each CJK character one token, other text
    one token per 3 characters (BPE tokenizers such as Qwen's use ~1.4 CJK characters and ~4
    latin characters per token, so this overestimates, which is the safe side)."""
    cjk = len(_CJK_CHAR_RE.findall(text))
    return cjk + math.ceil((len(text) - cjk) / 3)


def answer_language(text: str, default: str = "zh") -> str:
    """zh when the answer is mostly Chinese, en when mostly English words, else the default."""
    cjk = len(_CJK_CHAR_RE.findall(text))
    words = len(_LATIN_WORD_RE.findall(text))
    if cjk == 0 and words == 0:
        return default
    return "zh" if cjk >= words else "en"


def output_budget(points: int, misconceptions: int) -> int:
    return (
        TOKENS_BASE
        + TOKENS_PER_POINT * points
        + TOKENS_PER_MISCONCEPTION * misconceptions
        + (TOKENS_COMMENT)
    )


@dataclass
class PromptPlan:
    """What is sent for one grade, and what was left out to make it fit."""

    messages: list[dict]
    points: list[KeyPoint]  # sent as P1..Pn, in this order
    misconceptions: list[Misconception]  # sent as M1..Mm
    max_tokens: int
    prompt_tokens: int  # the estimate
    language: str
    trimmed: list[str] = field(default_factory=list)
    answer_cut: bool = False

    @property
    def point_ids(self) -> list[str]:
        return [f"P{i}" for i in range(1, len(self.points) + 1)]

    @property
    def misconception_ids(self) -> list[str]:
        return [f"M{i}" for i in range(1, len(self.misconceptions) + 1)]

    def response_schema(self) -> dict:
        """The reply's JSON schema: ids as enums, one verdict per point, quotes bounded.
        Evidence comes before `covered` so a constrained model finds the quote before deciding."""
        point = {
            "type": "object",
            "properties": {
                "id": {"type": "string", "enum": self.point_ids},
                "evidence": {"type": "string", "maxLength": QUOTE_MAX_CHARS},
                "covered": {"type": "boolean"},
            },
            "required": ["id", "evidence", "covered"],
            "additionalProperties": False,
        }
        wrong = {
            "type": "object",
            "properties": {
                "id": {"type": "string", "enum": self.misconception_ids or ["M0"]},
                "evidence": {"type": "string", "maxLength": QUOTE_MAX_CHARS},
            },
            "required": ["id", "evidence"],
            "additionalProperties": False,
        }
        n = len(self.points)
        return {
            "type": "object",
            "properties": {
                "key_points": {"type": "array", "items": point, "minItems": n, "maxItems": n},
                "misconceptions": {
                    "type": "array",
                    "items": wrong,
                    "maxItems": len(self.misconceptions),
                },
                "feedback": {"type": "string", "maxLength": 300},
            },
            "required": ["key_points", "misconceptions", "feedback"],
            "additionalProperties": False,
        }


def _point_text(kp: KeyPoint | Misconception, language: str) -> str:
    return kp.text_en if language == "en" else kp.text


def _render(
    prompts_dir: Path,
    entry: QuestionEntry,
    answer: str,
    language: str,
    points: list[KeyPoint],
    misconceptions: list[Misconception],
    reference: str,
) -> list[dict]:
    point_lines = "\n".join(
        f"- P{i}: {_point_text(kp, language)}" for i, kp in enumerate(points, start=1)
    )
    wrong_lines = "\n".join(
        f"- M{i}: {_point_text(m, language)}" for i, m in enumerate(misconceptions, start=1)
    )
    ids = f"P1..P{len(points)}" if len(points) > 1 else "P1"
    return [
        {
            "role": "system",
            "content": render(
                prompts_dir,
                "grade_system.md",
                language="English" if language == "en" else "Chinese (简体中文)",
                quote_chars=QUOTE_MAX_CHARS,
            ),
        },
        {
            "role": "user",
            "content": render(
                prompts_dir,
                "grade_user.md",
                question=entry.text_en if language == "en" else entry.text,
                key_points=point_lines,
                misconceptions=wrong_lines or "- (none)",
                reference_answer=reference or "(left out to fit the context)",
                answer=answer,
                point_ids=ids,
                point_count=len(points),
            ),
        },
    ]


def _tokens(messages: list[dict]) -> int:
    return sum(estimate_tokens(m["content"]) for m in messages) + CONTEXT_MARGIN


def plan_prompt(
    entry: QuestionEntry,
    answer: str,
    language: str,
    prompts_dir: Path,
    context_tokens: int,
    max_tokens_cap: int,
) -> PromptPlan:
    """The largest prompt that fits `context_tokens` with its output budget.

    Trimming order: reference shortened, reference dropped, misconceptions (last first), key
    points (lowest weight first, at least one kept; the grader judges the rest offline), and only
    then the answer is cut (flagged)."""
    rubric = entry.rubric
    assert rubric is not None
    answer = _TAG_RE.sub("[candidate_answer tag removed]", answer)
    reference = (
        rubric.reference_answer_en if language == "en" and rubric.reference_answer_en else None
    ) or rubric.reference_answer
    points = list(rubric.key_points)
    wrong = list(rubric.misconceptions)
    trimmed: list[str] = []

    def build(ans: str, ref: str) -> tuple[list[dict], int, int]:
        messages = _render(prompts_dir, entry, ans, language, points, wrong, ref)
        budget = min(max_tokens_cap, output_budget(len(points), len(wrong)))
        return messages, _tokens(messages), budget

    def fits(ans: str, ref: str) -> tuple[list[dict], int, int] | None:
        messages, prompt, budget = build(ans, ref)
        return (messages, prompt, budget) if prompt + budget <= context_tokens else None

    result = fits(answer, reference)
    if result is None and len(reference) > REFERENCE_SHORT_CHARS:
        reference = reference[:REFERENCE_SHORT_CHARS].rstrip() + "…"
        trimmed.append("reference_shortened")
        result = fits(answer, reference)
    if result is None:
        reference = ""
        trimmed.append("reference_dropped")
        result = fits(answer, reference)
    while result is None and wrong:
        wrong.pop()
        if "misconceptions_dropped" not in trimmed:
            trimmed.append("misconceptions_dropped")
        result = fits(answer, reference)
    while result is None and len(points) > 1:
        # lowest weight first; among equals the later point (points are listed by importance)
        drop = min(range(len(points)), key=lambda i: (points[i].weight, -i))
        points.pop(drop)
        if "points_dropped" not in trimmed:
            trimmed.append("points_dropped")
        result = fits(answer, reference)
    cut = False
    if result is None:
        _, prompt, budget = build("", reference)
        room = context_tokens - prompt - budget - estimate_tokens(ANSWER_CUT_MARK)
        keep = _chars_within(answer, room)
        if keep < MIN_ANSWER_CHARS:
            raise ContextTooSmall(
                f"a {context_tokens}-token context cannot hold the rubric, {MIN_ANSWER_CHARS} "
                f"characters of the answer and a {budget}-token reply"
            )
        cut = True
        trimmed.append("answer_cut")
        result = build(answer[:keep] + ANSWER_CUT_MARK, reference)
    messages, prompt_tokens, max_tokens = result
    return PromptPlan(
        messages=messages,
        points=points,
        misconceptions=wrong,
        max_tokens=max_tokens,
        prompt_tokens=prompt_tokens,
        language=language,
        trimmed=trimmed,
        answer_cut=cut,
    )


def _chars_within(text: str, tokens: int) -> int:
    """How many leading characters of `text` fit in `tokens` by the estimate."""
    if tokens <= 0:
        return 0
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) <= tokens:
            lo = mid
        else:
            hi = mid - 1
    return lo


# ------------------------------------------------------------------------------------- parsing


@dataclass
class ParsedReply:
    covered: dict[str, str]  # rubric point id -> the quote claimed for it
    misconceptions: dict[str, str]  # rubric misconception id -> quote
    comment: str
    repaired: bool  # some ids were matched by position or text, not by id


def clean_quote(quote: object) -> str:
    """A quote without prompt wrapper text or quotation marks around it."""
    text = _TAG_RE.sub(" ", str(quote or ""))
    text = text.replace("[candidate_answer tag removed]", " ").replace(ANSWER_CUT_MARK.strip(), " ")
    return text.strip().strip(_QUOTE_MARKS).strip()


def quote_pieces(quote: str) -> list[str]:
    """An ellipsised quote ("A … B") as its pieces, longest first."""
    return sorted((p for p in _ELLIPSIS_RE.split(quote) if p.strip()), key=len, reverse=True)


def _extract_json(text: str) -> dict:
    text = text.strip()
    fenced = re.search(r"```(?:json)?\s*(\{.*\})\s*```", text, re.DOTALL)
    if fenced:
        text = fenced.group(1)
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise MalformedReply("the reply holds no JSON object")
    try:
        data = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise MalformedReply(f"the reply is not valid JSON ({exc.msg})") from exc
    if not isinstance(data, dict):
        raise MalformedReply("the reply is not a JSON object")
    return data


def _as_bool(value: object) -> bool | None:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if value is not None else ""
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None


def _items(value: object) -> list[tuple[object, dict]] | None:
    """A list of {"id": ...} objects, or an {"P1": {...}} / {"P1": true} mapping, as (id, item)."""
    if isinstance(value, list):
        return [(x.get("id"), x) if isinstance(x, dict) else (None, {"value": x}) for x in value]
    if isinstance(value, dict):
        return [
            (k, v if isinstance(v, dict) else {"covered": v, "evidence": ""})
            for k, v in value.items()
        ]
    return None


class _Matcher:
    """Maps the ids a model wrote to rubric entries sent as <prefix>1..<prefix>n."""

    def __init__(self, prefix: str, entries: list[KeyPoint] | list[Misconception]) -> None:
        self.prefix = prefix
        self.entries = entries
        self.short = {f"{prefix}{i}".lower(): e.id for i, e in enumerate(entries, start=1)}
        self.real = {e.id.lower(): e.id for e in entries}
        self.texts = [(e.id, normalise(e.text), normalise(e.text_en)) for e in entries]

    def match(self, raw: object, position: int, count: int) -> tuple[str | None, bool]:
        """(rubric id or None, whether it took a repair)."""
        if raw is None or (isinstance(raw, str) and not raw.strip()):
            # no id at all: by list position, only when the list has one item per entry
            if count == len(self.entries):
                return self.entries[position].id, True
            return None, False
        key = str(raw).strip().lower()
        if key in self.short:
            return self.short[key], False
        if key in self.real:
            return self.real[key], False
        number = _POSITION_RE.fullmatch(key)
        if number:
            k = int(number.group(1))
            if 1 <= k <= len(self.entries):
                return self.entries[k - 1].id, True
            return None, False
        text = normalise(str(raw))
        if len(text) >= 6:
            found = {
                eid
                for eid, zh, en in self.texts
                if text in (zh, en) or (len(text) >= 8 and (text in zh or text in en))
            }
            if len(found) == 1:
                return found.pop(), True
        return None, False


def parse_reply(text: str, plan: PromptPlan, truncated: bool = False) -> ParsedReply:
    if truncated:
        raise MalformedReply(
            f"the reply was cut off at the {plan.max_tokens}-token limit before the JSON closed"
        )
    data = _extract_json(text)
    raw_points = _items(data.get("key_points", data.get("points")))
    if raw_points is None:
        raise MalformedReply('the reply has no "key_points" list')
    problems: list[str] = []
    repaired = False
    points = _Matcher("P", plan.points)
    verdicts: dict[str, tuple[bool, str]] = {}
    unknown: list[str] = []
    for position, (raw_id, item) in enumerate(raw_points):
        pid, took_repair = points.match(raw_id, position, len(raw_points))
        if pid is None:
            unknown.append(repr(raw_id))
            continue
        repaired |= took_repair
        covered = _as_bool(item.get("covered", item.get("value")))
        if covered is None:
            problems.append(f"'covered' of {raw_id!r} is not true or false")
            continue
        quote = clean_quote(item.get("evidence", item.get("quote", "")))
        if pid in verdicts and verdicts[pid] != (covered, quote):
            problems.append(f"{raw_id!r} is judged twice, differently")
            continue
        verdicts[pid] = (covered, quote)
    if unknown:
        problems.append(f"ids {', '.join(unknown)} are not in the rubric")
    short_of = {e.id: f"P{i}" for i, e in enumerate(plan.points, start=1)}
    missing = [short_of[kp.id] for kp in plan.points if kp.id not in verdicts]
    if missing:
        problems.append(f"no verdict for {', '.join(missing)}")

    wrong = _Matcher("M", plan.misconceptions)
    found: dict[str, str] = {}
    raw_wrong = _items(data.get("misconceptions") or [])
    for position, (raw_id, item) in enumerate(raw_wrong or []):
        if _as_bool(item.get("present", item.get("stated", True))) is False:
            continue
        mid, took_repair = wrong.match(raw_id, position, -1)
        if mid is None:
            problems.append(f"misconception id {raw_id!r} is not in the rubric")
            continue
        repaired |= took_repair
        found.setdefault(mid, clean_quote(item.get("evidence", item.get("quote", ""))))
    if problems:
        raise MalformedReply("; ".join(problems))
    comment = data.get("feedback", data.get("comment", ""))
    return ParsedReply(
        covered={pid: q for pid, (c, q) in verdicts.items() if c},
        misconceptions=found,
        comment=comment if isinstance(comment, str) else "",
        repaired=repaired,
    )


def repair_message(problem: str, plan: PromptPlan) -> dict:
    """The follow-up user turn after a malformed reply: what was wrong, and the ids to use."""
    ids = ", ".join(plan.point_ids)
    return {
        "role": "user",
        "content": (
            f"Your reply could not be used: {problem}. Reply again with one JSON object only: "
            f'"key_points" with exactly one entry for each of {ids} (use these ids), '
            f"each evidence a verbatim span of at most {QUOTE_MAX_CHARS} characters or empty; "
            f'"misconceptions" using only ids M1..M{len(plan.misconceptions)}; '
            'a short "feedback".'
        ),
    }
