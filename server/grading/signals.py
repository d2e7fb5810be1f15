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
    r"grader\s*[:：]",
    r"score\s*[=:：]\s*10\b",
    r"(developer|system|assistant)\s+(message|note|instruction)",
    r"rubric\s+(is\s+)?(disabled|does\s+not\s+apply|doesn't\s+apply|off)",
    r"(return|output|print|respond\s+with)\s+(the\s+number\s+|a\s+score\s+of\s+)?10\b",
    r"new\s+(task|instructions?)\s*[:：]",
    r"作为(评分|打分|判分)(者|员|模型|器|老师)",
    r"(必须|务必|一定要)(输出|给出?|打)\s*(10|十|满)",
    r"(输出|返回)\s*10\s*分?",
    r"评分(失败|无效)",
    r"<!--",
    r"(以上|上述)(指令|规则)(无效|作废)",
    r"(new|previous|updated|old)\s+rubric|rubric\s+is\s+(outdated|obsolete|replaced)",
    r"\bgets?\s+(a\s+)?(score\s+of\s+)?10\b",
    r"\b10\s*/\s*10\b",
    r"(^|\s)(assistant|user|system|human)\s*[:：]",
    r"(新的|原来的|之前的)评分(标准|规则)",
]
_INJECTION_RE = re.compile("|".join(f"(?:{p})" for p in INJECTION_PATTERNS), re.IGNORECASE)

_NEGATION_RE = re.compile(
    r"不是|并非|并不|不等于|不等同|不同于|而不是|不能说|不应|不要|误区|误解|错误地|错误的说法|常见错误|"
    r"不对|并没有|不需要|无需|不用|不能|不可能|无法|"
    r"\bnot\b|n't\b|\bcannot\b|\bnever\b|\bno\b|without|rather than|instead of|misconception|wrong to"
)

# Words that, standing alone between terms, make a statement rather than a list.
_GLUE_WORDS = frozenset(
    "的 了 是 在 把 被 用 对 就 会 让 使 和 与 及 为 而 则 即 将 从 到 来 去 给 比 做 靠 按 "
    "如果 因为 所以 但是 但 然后 并且 或者 通过 用于 等于 导致 避免 "
    "is are was be because so use uses by to of which that means then if when the a an "
    "prevents avoids makes gives keeps becomes into with for than on in it as".split()
)
_CHUNK_SPLIT = re.compile(r"[\s,，、/|]+")
_SENTENCE_PUNCT = re.compile(r"[。；;？?！!，]")


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


# Loose matching lets a few characters (but no clause break) stand between an alias's words.
_LOOSE_GAP = r"[^，,。；;！？!?\n]{0,6}?"


@lru_cache(maxsize=8192)
def loose_alias_pattern(alias: str) -> re.Pattern[str] | None:
    """The alias's words in order within one clause: "把 reward model 当 critic" also finds
    "把训练好的 reward model 同时当作 critic". For wrong statements, which candidates paraphrase."""
    from server.retrieval.tokenize import words_in_order

    words = words_in_order(normalise(alias))
    if len(words) < 2:
        return alias_pattern(alias)
    parts = []
    for word in words:
        body = re.escape(word)
        if _ALNUM.match(word[0]):
            body = r"(?<![a-z0-9])" + body
        if _ALNUM.match(word[-1]):
            body = body + r"(?![a-z0-9])"
        parts.append(body)
    return re.compile(_LOOSE_GAP.join(parts))


def find_aliases(text: str, aliases: list[str]) -> list[str]:
    norm = normalise(text)
    found = []
    for alias in aliases:
        pattern = alias_pattern(alias)
        if pattern is not None and pattern.search(norm):
            found.append(alias)
    return found


def affirmed_aliases(text: str, aliases: list[str]) -> list[str]:
    """Aliases of a wrong statement that the text asserts: found loosely, in a clause that does not
    deny them ("它把 RM 当作 critic" asserts it; "不是把 RM 当 critic" denies it). An alias that carries
    its own negation ("不能用 RM") is asserted wherever it is found."""
    norm = normalise(text)
    found = []
    for alias in aliases:
        pattern = loose_alias_pattern(alias)
        if pattern is None:
            continue
        denied_by_itself = is_negated(alias)
        for m in pattern.finditer(norm):
            if denied_by_itself or not is_negated(_clause_around(norm, m.start(), m.end())):
                found.append(alias)
                break
    return found


def _clause_around(text: str, start: int, end: int) -> str:
    breaks = [b.end() for b in _CLAUSE.finditer(text, 0, start)]
    after = _CLAUSE.search(text, end)
    return text[breaks[-1] if breaks else 0 : after.start() if after else len(text)]


def is_injection(text: str) -> bool:
    return bool(_INJECTION_RE.search(normalise(text)))


def is_negated(text: str) -> bool:
    return bool(_NEGATION_RE.search(normalise(text)))


def is_keyword_list(text: str) -> bool:
    """A segment that strings terms together without saying anything about them.

    Signs: five or more short chunks separated by spaces, no sentence punctuation inside, and
    (almost) no function word standing on its own between them."""
    norm = normalise(text)
    chunks = [c for c in _CHUNK_SPLIT.split(norm) if c]
    if len(chunks) < 5 or max(len(c) for c in chunks) > 14:
        return False
    if _SENTENCE_PUNCT.search(norm):
        return False
    glue = sum(c in _GLUE_WORDS or (len(c) > 1 and c[-1] in "的了") for c in chunks)
    return glue <= len(chunks) / 10


# Phrases that lengthen an answer without adding content; evidence of padding, never scored on their own.
_FILLER_RE = re.compile(
    r"非常重要|非常关键|非常核心|非常本质|十分重要|至关重要|再强调|再说一遍|重复一下|总之就是|总而言之|"
    r"值得说清楚|认真回答|仔细说一下|从头到尾|众所周知|毫无疑问|这一点非常|这个问题非常|我想强调|"
    r"it is very important|to reiterate|as i said|needless to say|let me repeat|once again|"
    r"it cannot be overstated|very crucial|extremely important"
)


def count_filler_phrases(text: str) -> int:
    return len(_FILLER_RE.findall(normalise(text)))


_CLAUSE = re.compile(r"[，,。！？!?；;：:\n]+")


def repeated_clauses(text: str) -> int:
    """Clauses said again word for word ("没有 KL，没有 KL"): padding inside sentences, which the
    sentence-level checks cannot see. Short clauses (under four characters) are ignored."""
    seen: set[str] = set()
    repeats = 0
    for clause in _CLAUSE.split(normalise(text)):
        key = clause.strip()
        if len(key.replace(" ", "")) < 4:
            continue
        if key in seen:
            repeats += 1
        seen.add(key)
    return repeats


def token_overlap(a: str, b: str) -> float:
    """Share of the shorter text's content words that the other text also uses."""
    from server.retrieval.tokenize import tokenize

    ta, tb = set(tokenize(a)), set(tokenize(b))
    if not ta or not tb:
        return 0.0
    return len(ta & tb) / min(len(ta), len(tb))
