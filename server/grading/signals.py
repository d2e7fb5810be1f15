"""Cheap lexical signals the rubric grader combines: aliases, negation, injections, keyword lists."""

from __future__ import annotations

import re
from functools import lru_cache

from server.grading.segments import normalise

_ALNUM = re.compile(r"[a-z0-9]")

# Instructions aimed at the grader. They are content of the answer, never commands: flagged, no credit.
INJECTION_PATTERNS = [
    r"忽略.{0,12}(评分|规则|标准|指令|提示|rubric|要求)",
    r"(给|打|判).{0,6}满分",
    r"(给|打)\s*10\s*分",
    r"所有(要点|关键点|得分点).{0,8}(覆盖|满足|通过)",
    r"ignore\s+(all\s+|any\s+|the\s+|previous\s+|prior\s+|above\s+)*(instructions|rubric|rules|grading)",
    r"system\s*(override|prompt|message)",
    r"(full|maximum|max|perfect)\s+(marks|score|points)",
    r"(score|grade|rate)\s+(this|the answer|me)\s+(a\s+)?(10|ten|100)",
    r"mark\s+(every|all)\s+(key\s*)?points?\s+as\s+covered",
    r"you\s+are\s+(now\s+)?(a|the)\s+(grader|assistant|system)",
    r"</?\s*(answer|system|instructions?|rubric|candidate_answer|assistant|user)\s*>",
    r"\[/?(inst|system)\]",
    r"评分(系统|模型|器)?\s*(请|须|必须|应该)",
    r"as\s+an?\s+(ai|language model|grader)",
]
_INJECTION_RE = re.compile("|".join(f"(?:{p})" for p in INJECTION_PATTERNS), re.IGNORECASE)

_NEGATION_RE = re.compile(
    r"不是|并非|并不|不等于|不等同|不同于|而不是|不能说|不应|不要|误区|误解|错误地|错误的说法|常见错误|"
    r"不对|并没有|\bnot\b|n't\b|\bnever\b|rather than|instead of|misconception|wrong to"
)

# Glue that turns terms into a statement: particles, verbs of relation, English function words.
_GLUE_ZH = re.compile(
    r"[的了是在把被用对就会让使和与及为而则即等将从到里中时后前能要来去给比]|如果|因为|所以"
)
_GLUE_EN = re.compile(
    r"\b(is|are|was|be|because|so|uses?|by|to|of|which|that|means|then|if|when|the|a|an|"
    r"prevents?|avoids?|makes?|gives?|keeps?|becomes?|into|with|for|than|on|in)\b"
)
_LIST_SPLIT = re.compile(r"[\s,，、/|;；]+")


@lru_cache(maxsize=8192)
def alias_pattern(alias: str) -> re.Pattern[str] | None:
    """A regex that finds the alias in normalised text, tolerant of spacing, whole Latin words."""
    chars = [c for c in normalise(alias) if not c.isspace()]
    if not chars:
        return None
    body = r"\s*".join(re.escape(c) for c in chars)
    if _ALNUM.match(chars[0]):
        body = r"(?<![a-z0-9])" + body
    if _ALNUM.match(chars[-1]):
        body = body + r"(?![a-z0-9])"
    return re.compile(body)


def find_aliases(text: str, aliases: list[str]) -> list[str]:
    norm = normalise(text)
    found = []
    for alias in aliases:
        pattern = alias_pattern(alias)
        if pattern is not None and pattern.search(norm):
            found.append(alias)
    return found


def is_injection(text: str) -> bool:
    return bool(_INJECTION_RE.search(normalise(text)))


def is_negated(text: str) -> bool:
    return bool(_NEGATION_RE.search(normalise(text)))


def is_keyword_list(text: str) -> bool:
    """A segment that strings terms together without saying anything about them."""
    norm = normalise(text)
    items = [i for i in _LIST_SPLIT.split(norm) if i]
    if len(items) < 4:
        return False
    glue = len(_GLUE_ZH.findall(norm)) + len(_GLUE_EN.findall(norm))
    return glue <= len(items) / 8
