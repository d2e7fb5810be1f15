"""What a sentence claims: whether a phrase in it is asserted, denied, reported, hedged or asked.

The grader credits a key point only for what the answer asserts. "不是组内奖励的均值" denies it,
"很多人以为 X，其实 Y" reports X and asserts Y, "可能是 A 也可能是 B" hedges, "…为什么？" asks, and
"以下说法全部是错误的" denies everything after it. All functions take text in `normal_form`."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from server.grading.normalize import normal_form


class Stance(StrEnum):
    asserted = "asserted"
    denied = "denied"
    reported = "reported"  # someone else's (usually wrong) belief, refuted around it
    hedged = "hedged"
    asked = "asked"


_NEGATION = re.compile(
    r"不是|并非|并不|并没有|不会|不能|不再|不用|不需要|无需|无须|没有|不要|不该|不应|未必|不一定|"
    r"不等于|不等同|而非|不对|不可能|无法|别把|算不上|谈不上|"
    # An adverb before 不 makes it a denial ("也不负责 KL 惩罚", "都不更新"), and so do the verbs a
    # denied role is said with ("不存在 exposure bias", "不受示范数据限制"). Bare 不 is not a cue
    # (不同, 不断, 不仅, 不稳定 name things), nor are verbs true statements use before a second
    # claim: "baseline 不改变期望只降方差", "RLOO 用不包含自己的均值"; nor 完全不 ("完全不减基线就是纯
    # REINFORCE" states a condition, then a fact) and 决不 (inside 解决不了).
    r"也不|都不|从不|从来不|绝不|毫不|根本不|并未|从未|未曾|"
    r"不存在|不缺|不受|不负责|不参与|不冻结|不更新|不做|不充当|不具备|不具有|"
    r"\bnot\b|n't\b|\bnever\b|\bno\b|\bwithout\b|\bcannot\b|\bneither\b|\bnor\b|\bisnt\b"
)
# A contrast starts a new scope: "不是 A，而是 B" asserts B; "很多人以为 A，其实 B" asserts B.
_CONTRAST = re.compile(
    r"而是|其实|实际上|事实上|但是|但|然而|可是|反而|相反|恰恰|正确的是|应该是|"
    r"\bbut\b|\bhowever\b|\bactually\b|\binstead\b|\brather\b|\bin fact\b|\bin reality\b"
)
# An arrow states a consequence, a new clause: "丢掉一些峰不受罚→mode-seeking".
_CLAUSE_BREAK = re.compile(r"[,;:，；：、→⇒]")
_REPORT = re.compile(
    r"很多人(以为|认为|觉得|会说|误以为)|有人(以为|认为|说)|常见(的)?(误解|错误|说法|误区)|"
    r"一种(误解|错误说法|常见说法)|误以为|容易误解为|经常被(误)?说成|网上(常|有人)说|"
    r"误区|误解|错误(的)?(说法|观点|理解)|(一|另一|还有一)种说法|有人(觉得|会说)|(大家|常)(经常)?说|"
    r"(我)?(一开始|原来|以前)以为|常见(的)?反应|"
    r"\bmyth\b|\bmisconception\b|one might think|it is tempting to (think|say)|i used to think|"
    r"(people|many|some)( people)? (often |usually |commonly )?(think|believe|assume|say|claim)|"
    r"(a|one|the) (common )?(misconception|myth|mistake) (is|that)|it is often said|"
    r"contrary to (popular belief|what)"
)
_HEDGE = re.compile(
    r"也可能|也许|或许|说不准|不太确定|不确定|不清楚|记不清|可能是.{0,30}也可能|要么.{0,30}要么|"
    r"\bmaybe\b|\bperhaps\b|\bnot sure\b|\bmight be\b|\beither\b.{0,40}\bor\b|\bi guess\b"
)
_QUESTION_END = re.compile(r"[?？]\s*$")
_DENY_FOLLOWING = re.compile(
    r"(以下|下面|接下来)(的)?(说法|内容|观点|几点|回答)?(全部|全都|都|均|统统)?(是|为)?(错误|错|不对|不成立|假)|"
    r"(all|each|every one) of the following (statements )?(is|are) (false|wrong|incorrect)|"
    r"none of the following is (true|correct)|everything (below|that follows) is (false|wrong)"
)
_DENY_PRECEDING = re.compile(
    r"(以上|上面|上述)(的)?(说法|内容|观点|几点)?(全部|全都|都|均|统统)?(是|为)?(错误|错|不对|不成立|假)|"
    r"(all|each) of the above (is|are) (false|wrong|incorrect)|none of the above is (true|correct)|"
    r"everything above is (false|wrong)"
)
NEGATION_REACH_CJK = 14  # characters between a negation cue and what it denies
NEGATION_REACH_LATIN = 40


@dataclass(frozen=True)
class Match:
    phrase: str
    start: int
    end: int
    stance: Stance


def has_negation(text: str) -> bool:
    return bool(_NEGATION.search(text))


def denies_following(text: str) -> bool:
    return bool(_DENY_FOLLOWING.search(text))


def denies_preceding(text: str) -> bool:
    return bool(_DENY_PRECEDING.search(text))


def is_question(text: str) -> bool:
    return bool(_QUESTION_END.search(text))


@lru_cache(maxsize=16384)
def phrase_pattern(phrase: str, loose: bool) -> re.Pattern[str] | None:
    """A phrase's words in order. Strict: only spacing may differ. Loose: a few other characters
    (not a sentence end) may stand between its words, so "π_old 当成 π_ref" matches "把 π_old 错当成了 π_ref"."""
    from server.retrieval.tokenize import words_in_order

    norm = normal_form(phrase)
    if not norm:
        return None
    words = [w for w in words_in_order(norm) if w.strip()] if loose else [norm.replace(" ", "")]
    if not words:
        return None
    # A loose gap stays inside one clause: "k1 可以为负，k3 恒非负" does not assert "k1 恒非负", and
    # "比 MC 方差小、比 TD 偏差小" does not assert "MC 方差比 TD 小". Punctuation alone may stand
    # between two words ("A<0 时，上界生效").
    # No negation may hide in a gap either: "奖励不直接反传" does not assert "奖励直接反传".
    gap = r"(?:[\s,，:：]{0,3}|[^。！？!?\n,，;；、:：不没非无未别勿]{0,8}?)" if loose else r"\s*"
    # Next to a one-character word ("不", "比", "小") the gap is short: "critic 还不准时就更新"
    # does not say "critic 不更新".
    short_gap = r"(?:[\s,，:：]{0,3}|[^。！？!?\n,，;；、:：不没非无未别勿]{0,2}?)"
    pattern = ""
    for i, word in enumerate(words):
        body = r"\s*".join(re.escape(c) for c in word)
        if re.match(r"[a-z0-9]", word[0]):
            body = r"(?<![a-z0-9])" + body
        if re.match(r"[a-z0-9]", word[-1]):
            body = body + r"(?![a-z0-9]|\.\d)"  # "λ=0" is not "λ=0.95"
        if i:
            single = len(word) == 1 or len(words[i - 1]) == 1
            pattern += short_gap if loose and single else gap
        pattern += body
    return re.compile(pattern)


def _clause_start(text: str, position: int) -> int:
    start = 0
    for m in _CLAUSE_BREAK.finditer(text, 0, position):
        start = m.end()
    return start


def _negated_at(text: str, start: int) -> bool:
    """A negation cue before `start` in the same clause, close enough, with no contrast after it."""
    clause_start = _clause_start(text, start)
    window = text[clause_start:start]
    cues = list(_NEGATION.finditer(window))
    if not cues:
        return False
    cue = cues[-1]
    between = window[cue.end() :]
    if _CONTRAST.search(between):
        return False
    reach = NEGATION_REACH_LATIN if between.isascii() else NEGATION_REACH_CJK
    return len(between) <= reach


def _reported_at(text: str, start: int) -> bool:
    """Inside "很多人以为 …" up to the contrast that refutes it."""
    for m in _REPORT.finditer(text, 0, start):
        contrast = _CONTRAST.search(text, m.end(), start)
        if contrast is None:
            return True
    return False


def stance_at(text: str, start: int, phrase_negates_itself: bool = False) -> Stance:
    if _reported_at(text, start):
        return Stance.reported
    if is_question(text):
        return Stance.asked
    if not phrase_negates_itself and _negated_at(text, start):
        return Stance.denied
    clause_start = _clause_start(text, start)
    clause_end = _CLAUSE_BREAK.search(text, start)
    clause = text[clause_start : clause_end.start() if clause_end else len(text)]
    if _HEDGE.search(clause):
        return Stance.hedged
    return Stance.asserted


# Words too common to tell what a claim is about.
_NOT_A_SUBJECT = frozenset(
    "模型 训练 方法 问题 数据 效果 结果 东西 时候 情况 就是 只是 一样 可以 需要 会 能 "
    "model models training method methods problem data result thing same just only".split()
)


@lru_cache(maxsize=16384)
def phrase_words(phrase: str) -> tuple[str, ...]:
    from server.retrieval.tokenize import STOPWORDS, words_in_order

    return tuple(
        w
        for w in words_in_order(normal_form(phrase))
        if w.strip() and w not in STOPWORDS and any(c.isalnum() for c in w)
    )


@lru_cache(maxsize=16384)
def needs_subject(phrase: str) -> bool:
    """A phrase too short to name what it is about ("提高温度", "裁剪梯度", "不需要奖励"): fewer than
    two content words, or no Latin term and under five content characters."""
    words = phrase_words(phrase)
    if len(words) < 2:
        return True
    has_term = any(w.isascii() for w in words)
    return not has_term and sum(len(w) for w in words) < 5


@lru_cache(maxsize=8192)
def subject_words(owner_texts: tuple[str, ...]) -> frozenset[str]:
    """What a wrong claim is about: the content words of the misconception (or key point) it
    belongs to. A short phrase fires only in a sentence that names one of them."""
    from server.retrieval.tokenize import tokenize

    words: set[str] = set()
    for t in owner_texts:
        words |= {w for w in tokenize(normal_form(t)) if len(w) >= 2 and w not in _NOT_A_SUBJECT}
    return frozenset(words)


@lru_cache(maxsize=16384)
def _sentence_words(text: str) -> frozenset[str]:
    from server.retrieval.tokenize import tokenize

    return frozenset(tokenize(text))


def names_subject(text: str, phrase: str, subject: frozenset[str]) -> bool:
    """The sentence names the claim's subject outside the phrase itself."""
    own = set(phrase_words(phrase))
    return bool((_sentence_words(text) & subject) - own)


def find_phrases(
    text: str,
    phrases: list[str] | tuple[str, ...],
    loose: bool,
    subject: frozenset[str] | None = None,
) -> list[Match]:
    """Every phrase found in `text` (normal form), with the stance of its first occurrence that is
    asserted (else of its first occurrence). With `subject`, a phrase that does not name its own
    subject (`needs_subject`) counts only where the sentence names it."""
    found: list[Match] = []
    for phrase in phrases:
        pattern = phrase_pattern(phrase, loose)
        if pattern is None:
            continue
        if not pattern.search(text):
            continue
        if (
            subject is not None
            and needs_subject(phrase)
            and not names_subject(text, phrase, subject)
        ):
            continue
        negates_itself = has_negation(normal_form(phrase))
        first: Match | None = None
        for m in pattern.finditer(text):
            stance = stance_at(text, m.start(), negates_itself)
            if (
                stance is Stance.asserted
                and loose
                and not negates_itself
                and _NEGATION.search(text, m.start(), m.end())
            ):
                stance = Stance.denied  # "X 不需要 Y" does not assert "X 需要 Y"
            match = Match(phrase, m.start(), m.end(), stance)
            if first is None:
                first = match
            if match.stance is Stance.asserted:
                first = match
                break
        if first is not None:
            found.append(first)
    return found


def asserted(matches: list[Match]) -> list[Match]:
    return [m for m in matches if m.stance is Stance.asserted]
