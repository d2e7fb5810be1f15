"""Alias hygiene: which rubric aliases may evidence a key point on their own.

An alias names a point; it does not state it. One that the question itself uses, one that also
appears inside a wrong statement of the same entry, or a generic word of the field says nothing about
whether the candidate knows the point, so it can support evidence but never cover a point alone.
The grader and `sparring corpus validate` share these rules."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from server.corpus.schema import KeyPoint, QuestionEntry

# Words every answer in this field uses: naming them shows nothing.
GENERIC_TERMS = frozenset(
    t.lower()
    for t in (
        "模型 训练 策略 奖励 损失 方法 问题 算法 数据 效果 优化 梯度 参数 任务 样本 采样 目标 函数 "
        "强化学习 大模型 语言模型 rl llm ppo grpo dpo dapo gspo rlhf sft policy reward model loss "
        "training train data method algorithm gradient objective sample sampling token 训练稳定 "
        "稳定 稳定性 stability stable 提升 improve 性能 performance 简单 simple 重要 important"
    ).split()
)
# Words that name a whole topic or a bare relation rather than a point: "ratio" is in every PPO
# answer, "上界" in any bound, "MoE" in any scaling remark, "不一定" in any hedge.
OVERBROAD_TERMS = frozenset(
    t.lower() for t in "sigmoid ratio 成对 上界 前提 不一定 两处 moe 局部 全局".split()
)
# A bare number (0.2, 1e-6, 4096, 0.28) is a value, not the statement of what it is the value of.
BARE_NUMBER = re.compile(r"^[<>≈~≤≥=]?[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?%?$")
MIN_STRONG_ALIASES = 2


def fold(text: str) -> str:
    """NFKC, lower case, no white space: the form aliases are compared in."""
    return "".join(unicodedata.normalize("NFKC", text).lower().split())


@dataclass(frozen=True)
class AliasVerdict:
    alias: str
    weak: bool
    reason: str | None = (
        None  # in-question | in-misconception | generic | too-short | bare-number | overbroad
    )


def _question_text(entry: QuestionEntry) -> str:
    return fold(" ".join([entry.text, entry.text_en, *(s.text for s in entry.subquestions)]))


def _misconception_text(entry: QuestionEntry) -> str:
    if entry.rubric is None:
        return ""
    parts = []
    for m in entry.rubric.misconceptions:
        parts += [m.text, m.text_en, *m.aliases]
    return fold(" ".join(parts))


def judge_alias(alias: str, question: str, wrong: str) -> AliasVerdict:
    key = fold(alias)
    if len(key) < 2 or (key.isascii() and len(key) < 3 and not any(c in key for c in "()/|=")):
        return AliasVerdict(alias, True, "too-short")
    if key in GENERIC_TERMS:
        return AliasVerdict(alias, True, "generic")
    if BARE_NUMBER.match(key):
        return AliasVerdict(alias, True, "bare-number")
    if key in OVERBROAD_TERMS:
        return AliasVerdict(alias, True, "overbroad")
    if key in question:
        return AliasVerdict(alias, True, "in-question")
    if key in wrong:
        return AliasVerdict(alias, True, "in-misconception")
    return AliasVerdict(alias, False)


@lru_cache(maxsize=4096)
def _weak_aliases_cached(entry_id: str, question: str, wrong: str, aliases: tuple[str, ...]):
    return frozenset(a for a in aliases if judge_alias(a, question, wrong).weak)


def weak_aliases(entry: QuestionEntry, point: KeyPoint) -> frozenset[str]:
    """The point's aliases that cannot cover it on their own."""
    return _weak_aliases_cached(
        entry.id, _question_text(entry), _misconception_text(entry), tuple(point.aliases)
    )


def hygiene_problems(entry: QuestionEntry) -> list[str]:
    """Rubric problems the validator rejects: points that no alias can evidence on its own, and
    aliases that would evidence a right and a wrong statement at once."""
    if entry.rubric is None:
        return []
    problems = []
    question, wrong = _question_text(entry), _misconception_text(entry)
    wrong_aliases = {fold(a) for m in entry.rubric.misconceptions for a in m.aliases}
    for kp in entry.rubric.key_points:
        verdicts = [judge_alias(a, question, wrong) for a in kp.aliases]
        strong = [v for v in verdicts if not v.weak]
        if len(strong) < MIN_STRONG_ALIASES:
            weak = ", ".join(f"{v.alias} ({v.reason})" for v in verdicts if v.weak)
            problems.append(
                f"{entry.id}/{kp.id}: fewer than {MIN_STRONG_ALIASES} aliases that can evidence "
                f"the point alone (weak: {weak})"
            )
        shared = sorted({a for a in kp.aliases if fold(a) in wrong_aliases})
        if shared:
            problems.append(
                f"{entry.id}/{kp.id}: aliases also listed for a misconception: {shared}"
            )
        own = {fold(a) for a in kp.aliases}
        same = [c for c in kp.contradictions if fold(c) in own]
        if same:
            problems.append(f"{entry.id}/{kp.id}: contradictions equal to an alias: {same}")
        # A contradiction is a statement, not a term: a bare word would fire on honest answers.
        bare = [c for c in kp.contradictions if len(fold(c)) < 4 or fold(c) in GENERIC_TERMS]
        if bare:
            problems.append(
                f"{entry.id}/{kp.id}: contradictions too short to be statements: {bare}"
            )
    problems += _contradictions_in_reference(entry)
    return problems


def _contradictions_in_reference(entry: QuestionEntry) -> list[str]:
    """A contradiction that the entry's own reference answer or key points assert would fail every
    excellent answer: it is not a contradiction as written."""
    from server.grading.claims import asserted, find_phrases
    from server.grading.normalize import normal_form
    from server.grading.segments import split_segments

    assert entry.rubric is not None
    rubric = entry.rubric
    texts = [rubric.reference_answer, *(k.text for k in rubric.key_points)]
    texts += [k.text_en for k in rubric.key_points]
    sentences = [normal_form(s.text) for t in texts for s in split_segments(t)]
    problems = []
    for kp in rubric.key_points:
        if not kp.contradictions:
            continue
        hits = {
            m.phrase for s in sentences for m in asserted(find_phrases(s, kp.contradictions, True))
        }
        if hits:
            problems.append(
                f"{entry.id}/{kp.id}: contradictions asserted by the entry's own reference answer "
                f"or key points: {sorted(hits)}"
            )
    return problems
