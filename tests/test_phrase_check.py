"""Wrong-claim phrases never fire on true statements (grader v3, issue 22 item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.corpus.bank import load_bank
from server.corpus.phrase_check import SentenceIndex, phrase_problems, true_sentences
from server.grading.claims import Stance, find_phrases, needs_subject, subject_words
from server.grading.normalize import normal_form

QUESTIONS = Path(__file__).resolve().parents[1] / "corpus" / "questions"


@pytest.fixture(scope="module")
def bank():
    return list(load_bank(QUESTIONS))


def fires(text: str, phrase: str, subject: frozenset[str] | None = None) -> bool:
    return any(
        m.stance in (Stance.asserted, Stance.hedged)
        for m in find_phrases(normal_form(text), [phrase], True, subject)
    )


def test_the_whole_bank_passes_the_cross_check(bank):
    assert phrase_problems(bank) == []


@pytest.mark.parametrize(
    ("true_text", "phrase"),
    [
        ("k1 可以为负，k3 恒非负", "k1 恒非负"),  # the gap crosses a clause
        ("GAE 比 MC 方差小、比 TD 偏差小", "MC 方差比 TD 小"),
        ("奖励不直接反传梯度，而是通过策略梯度", "奖励直接反传"),  # a negation in the gap
        ("critic 还不准时就更新 actor 会朝错误方向走", "critic 不 更新"),  # one-character word
    ],
)
def test_loose_matching_stays_inside_one_claim(true_text, phrase):
    assert not fires(true_text, phrase)


def test_loose_matching_still_finds_the_wrong_claim():
    assert fires("我觉得 k1 恒非负", "k1 恒非负")
    assert fires("把 π_old 错当成了 π_ref", "π_old 当成 π_ref")
    assert fires("A<0 时，上界生效", "A<0 时 上界 生效")


def test_a_phrase_without_a_subject_fires_only_where_the_subject_is_named():
    subject = subject_words(
        ("动态采样就是提高采样温度", "Dynamic sampling just raises the temperature")
    )
    assert needs_subject("提高温度")
    assert not fires("全错的组可以增大 G、适当提高温度", "提高温度", subject)
    assert fires("动态采样其实就是提高温度", "提高温度", subject)


def test_a_phrase_firing_on_a_true_sentence_is_reported(bank):
    entry = next(e for e in bank if e.id == "grpo-mean-computation")
    bad = entry.model_copy(deep=True)
    bad.rubric.misconceptions[0].aliases.append("先对每条回答求平均")
    problems = phrase_problems(
        [bad], extra_true=["原始 GRPO 先对每条回答求平均，再对组内回答求平均。"], whitelist={}
    )
    assert any("先对每条回答求平均" in p and "fires on a true statement" in p for p in problems)
    # ... unless the whitelist names it with a reason; a reason is required
    allowed = {(bad.id, "先对每条回答求平均"): "reviewed: never true in this question's context"}
    assert not any(
        "先对每条回答求平均" in p
        for p in phrase_problems(
            [bad],
            extra_true=["原始 GRPO 先对每条回答求平均，再对组内回答求平均。"],
            whitelist=allowed,
        )
    )
    no_reason = {(bad.id, "先对每条回答求平均"): ""}
    assert any("no reason" in p for p in phrase_problems([bad], extra_true=[], whitelist=no_reason))


def test_true_statements_cover_the_reported_phrases(bank):
    """The statements reviewers found flagged (issue 22) are in the curated set and now pass."""
    index = SentenceIndex(true_sentences(bank))
    texts = [s.text for s in index.sentences if s.where.startswith("true_statements")]
    for needle in ("token 级归一化", "每一步都能打分", "ratio 恒为 1", "KL(π_ref‖π_θ)", "提高温度"):
        assert any(needle in t for t in texts), needle
