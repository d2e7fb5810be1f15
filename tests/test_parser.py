"""The parser over the real source text."""

from __future__ import annotations

import re

import pytest

from server.config import Settings
from server.corpus.parser import ARTEFACTS, parse_file, parse_text, split_numbered

RAW = next(Settings().raw_dir.glob("*.txt"))


@pytest.fixture(scope="module")
def entries():
    return parse_file(RAW)


def by_text(entries, fragment):
    found = [e for e in entries if fragment in e.text]
    assert len(found) == 1, f"{fragment!r} matched {len(found)} entries"
    return found[0]


def test_entry_count_matches_an_independent_count(entries):
    # Every card has exactly one line ending in a company list 「…」: its full form or its only line.
    # Short forms repeat the company list on a line of its own; those lines are not cards.
    lines = [ln.strip() for ln in RAW.read_text(encoding="utf-8").splitlines()]
    ending = [ln for ln in lines if ln.endswith("」")]
    alone = [ln for ln in ending if re.fullmatch(r"(原题)*「[^」]*」", ln)]
    assert len(ending) - len(alone) == 191
    assert len(entries) == 191


def test_no_page_artefact_left(entries):
    for e in entries:
        for text in [e.text, *e.subquestions, e.note or ""]:
            for artefact in ARTEFACTS:
                assert artefact not in text, (artefact, text)


def test_short_and_full_forms_are_one_entry(entries):
    dqn = by_text(entries, "写一下DQN的伪代码")
    assert dqn.topic == "DQN"
    assert dqn.subquestions == ["写一下DQN的伪代码。", "强化学习中的Q值是怎么学习的，讲解TD loss。"]
    # The short form's title line never becomes an entry of its own.
    assert not any(e.text.startswith("DQN相关问题：") and e.topic is None for e in entries)
    assert sum("写一下DQN的伪代码" in e.text for e in entries) == 1


def test_numbered_subquestions_are_split(entries):
    experience = by_text(entries, "做到什么程度可以进行RL")
    assert len(experience.subquestions) == 9
    assert experience.subquestions[0] == "做到什么程度可以进行RL？"
    assert experience.subquestions[-1] == "做RL时同组内样本差别不大怎么处理？"
    grpo = by_text(entries, "在训练GRPO时是否应该更新rollout的mllm")
    assert len(grpo.subquestions) == 13


def test_unnumbered_short_form_lines_become_subquestions(entries):
    mdp = by_text(entries, "介绍贝尔曼方程")
    assert mdp.subquestions == [
        "介绍贝尔曼方程；",
        "介绍马尔可夫决策过程；理解马尔可夫过程概念；",
        "计算马尔可夫决策过程的折扣因子γ阈值。",
    ]
    # Lines the page broke after a comma are joined back into one sub-question.
    dpo = by_text(entries, "如何选择不同的reward或其他层面的偏好对齐依据")
    assert "为什么选择DPO而非PPO，为什么选择Qwen而非其他模型？" in dpo.subquestions


def test_editors_notes_are_kept_on_the_right_entry(entries):
    assert (
        by_text(entries, "介绍贝尔曼方程").note
        == "缺少状态转移、奖励与策略比较条件，无法计算阈值。"
    )
    # A note after a one-line card belongs to that card.
    assert "闭环" in by_text(entries, "闭环条件是什么").note
    assert "同简称方法" in by_text(entries, "ATPO算法的核心特性").note
    # A note before a multi-line card belongs to the card it precedes.
    assert by_text(entries, "介绍tag level与DAPO的区别").note.startswith("tag 未说明")
    assert by_text(entries, "和联网搜索相比有什么优点").note.startswith("来源未说明")
    assert "Openrlhf" not in (by_text(entries, "on-policy蒸馏、软蒸馏").note or "Openrlhf")
    # 13 lines match the note words; one of them (DAPO完整实现) is a card, not a note.
    assert sum(e.note is not None for e in entries) == 12


def test_every_entry_has_companies_including_standalone_company_lines(entries):
    assert all(e.companies for e in entries)
    concepts = by_text(entries, "常用的有限状态机在决策中有何局限性")
    assert concepts.companies == ["百度文心", "腾讯", "阿里巴巴"]
    rlhf = by_text(entries, "RLHF整体流程与原理")
    assert len(rlhf.companies) == 10 and "拼多多" in rlhf.companies


def test_untagged_entries_have_no_topic(entries):
    untagged = [e for e in entries if e.topic is None]
    assert any(e.text == "为啥PPO叫PPO？" for e in untagged)
    assert len(untagged) == 21


def test_split_numbered_ignores_decimals():
    stem, parts = split_numbered("你做DPO时为什么搭配0.2权重的SFT loss，防止什么问题？")
    assert parts == []
    stem, parts = split_numbered("总述：1. 甲？2. 乙，系数0.95？ 3. 丙")
    assert stem == "总述：" and parts == ["甲？", "乙，系数0.95？", "丙"]


def test_placeholder_card_is_not_an_entry():
    assert parse_text("标题\n【A】问题一？ 「腾讯」\n原题暂无题目") == parse_text(
        "标题\n【A】问题一？ 「腾讯」"
    )
