"""Grader v3 (issue 22): local credit, wrong claims found by meaning, relevance, terse writing."""

from __future__ import annotations

import httpx
import pytest

from server.config import Settings
from server.corpus.bank import load_bank
from server.grading.rubric_grader import RubricGrader
from server.grading.scoring import bounded_score

# The answer a newcomer typed in the browser: one wrong clause ("整个 batch 里所有样本") inside
# an otherwise right answer. Grader v2 gave 2.0 with every point ✗.
WITH_WRONG_CLAUSE = (
    "GRPO 对同一个 prompt 采样一组 G 条回答。我记得 baseline 是整个 batch 里所有样本奖励的平均值，"
    "然后再除以标准差做归一化，这样就不需要 critic 了，序列级优势广播到每个 token。"
)
WITHOUT = WITH_WRONG_CLAUSE.replace(
    "我记得 baseline 是整个 batch 里所有样本奖励的平均值", "baseline 是组内奖励的平均值"
)


@pytest.fixture(scope="module")
def bank():
    return load_bank(Settings().questions_dir)


@pytest.fixture(scope="module")
def grader(bank):
    return RubricGrader(bank)


def covered(grade) -> set[str]:
    return {k.id for k in grade.key_points if k.covered}


def test_a_wrong_clause_costs_its_own_point_and_a_bounded_penalty(grader, bank):
    entry = bank.get("grpo-advantage-baseline")
    right = grader.grade(entry, WITHOUT)
    wrong = grader.grade(entry, WITH_WRONG_CLAUSE)
    # the wrong claim is found (said in other words than any alias) and listed with a correction
    assert [m.id for m in wrong.misconceptions] == ["global-batch-mean"]
    assert wrong.misconceptions[0].correction
    # it costs the point it contradicts, and nothing the answer states elsewhere
    assert "group-mean" in covered(right) and "group-mean" not in covered(wrong)
    assert covered(right) - covered(wrong) == {"group-mean"}
    assert {"group-sampling", "std-normalization", "token-broadcast"} <= covered(wrong)
    # and a bounded, non-zero amount
    assert 0.5 <= right.score - wrong.score <= 3.0
    # the probe a candidate meets next never asks for a point the answer covered
    assert all(k.evidence for k in wrong.key_points if k.covered)


def test_bounded_score():
    assert bounded_score(2.0, 8.0, 1) == 5.5  # at most 2.5 for one wrong sentence
    assert bounded_score(7.9, 8.0, 1) == 7.5  # and at least 0.5
    assert bounded_score(1.0, 8.0, 2) == 3.5  # 2.5 + 2 for two
    assert bounded_score(6.0, 8.0, 0) == 6.0


def test_swapped_roles_are_wrong_without_an_enumerated_phrase(grader, bank):
    entry = bank.get("value-based-vs-policy-based")
    reader = grader.reader(entry)
    swapped = reader.read(
        "Value-based 方法直接参数化策略、输出动作分布，policy-based 方法先学 Q 值再取 argmax。"
    )
    honest = reader.read(
        "Value-based 方法先学 Q 值再取 argmax，policy-based 方法直接参数化策略、输出动作分布。"
    )
    assert not [w for w in honest.wrong if w.id.startswith("swapped")]
    assert swapped.signals["coverage"] <= honest.signals["coverage"]


def test_a_refuted_belief_is_not_a_wrong_claim(grader, bank):
    entry = bank.get("grpo-advantage-baseline")
    refuting = (
        "误区：baseline 是整个 batch 里所有样本奖励的平均值。其实 GRPO 的 baseline 是同一个 prompt 的"
        "组内奖励均值，再除以组内标准差。"
    )
    assert grader.grade(entry, refuting).misconceptions == []


@pytest.mark.parametrize(
    ("answered", "graded_as"),
    [
        ("gae-intro", "grpo-advantage-baseline"),
        ("dpo-principle", "grpo-advantage-baseline"),
        ("kl-role-in-rlhf", "ppo-clip-trust-region"),
    ],
)
def test_an_answer_to_a_neighbouring_question_scores_low(grader, bank, answered, graded_as):
    """An excellent answer to one question shares terms with its neighbour, not the answer."""
    answer = bank.get(answered).rubric.reference_answer
    assert grader.grade(bank.get(answered), answer).score >= 6.0
    graded = grader.grade(bank.get(graded_as), answer)
    assert graded.score <= 3.0
    assert "other_question" in graded.flags


def test_terse_statements_are_not_keyword_lists(grader, bank):
    entry = bank.get("grpo-advantage-baseline")
    terse = "- 采样：同一 prompt 采 G 条回答\n- baseline = 组内均值\n- 再除以组内 std\n- 优势广播到所有 token"
    graded = grader.grade(entry, terse)
    assert "keyword_list" not in graded.flags
    assert {"group-sampling", "std-normalization"} <= covered(graded)
    one_line = "GRPO 对同一个 prompt 采样一组 G 条回答，用组内奖励均值作 baseline。"
    assert "keyword_list" not in grader.grade(entry, one_line).flags


def test_the_browser_case_through_the_api(base_url):
    headers = {"Authorization": "Bearer tok-alice-0123456789abcdef"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=120) as client:
        body = {"question_id": "grpo-advantage-baseline", "answer": WITH_WRONG_CLAUSE}
        r = client.post("/api/grade", json={**body, "grader": "rubric"})
    assert r.status_code == 200, r.text
    grade = r.json()
    assert grade["misconceptions"] and grade["score"] >= 4.0
    assert sum(k["covered"] for k in grade["key_points"]) >= 3


@pytest.mark.parametrize(
    ("entry_id", "answer", "wrong_id"),
    [
        # said almost as the bank writes it, with no alias phrase in it
        (
            "td3-three-tricks",
            "另外我记得 TD3 把 DDPG 的确定性策略换成了随机策略。",
            "td3-stochastic-actor",
        ),
        ("reward-model-role", "奖励模型在 PPO 训练中和策略一起更新。", "rm-updated-in-rl"),
        ("decoupled-ppo", "DecoupledPPO 指 actor 和 critic 不共享参数。", "decoupled-actor-critic"),
        ("credit-assignment", "Credit assignment is only a problem in multi-agent RL.", None),
    ],
)
def test_a_misconception_restated_in_its_own_words_is_caught(
    grader, bank, entry_id, answer, wrong_id
):
    entry = bank.get(entry_id)
    if wrong_id is None:  # the English text of the entry's misconception about multi-agent
        wrong_id = next(m.id for m in entry.rubric.misconceptions if "multi" in m.text_en.lower())
    grade = grader.grade(entry, answer)
    assert wrong_id in {m.id for m in grade.misconceptions}, grade.misconceptions


@pytest.mark.parametrize(
    ("entry_id", "answer"),
    [
        # the true statement, in nearly the same words as the misconception
        ("plasticity-remedies", "单纯调大学习率通常解决不了可塑性丧失。"),
        (
            "forward-vs-reverse-kl",
            "RLHF 里对参考模型的约束 KL(π_θ||π_ref) 用的是反向 KL，输出更稳定。",
        ),
        ("td3-three-tricks", "TD3 没有把 DDPG 的确定性策略换成随机策略，那是 SAC 做的。"),
        ("muzero-learned-model", "MuZero 学了一个模型，不是 model-free 方法。"),
    ],
)
def test_a_true_statement_in_the_misconceptions_words_is_not_a_wrong_claim(
    grader, bank, entry_id, answer
):
    grade = grader.grade(bank.get(entry_id), answer)
    assert grade.misconceptions == [], grade.misconceptions


def test_a_point_denied_with_an_adverb_or_a_role_verb_is_not_credited(grader, bank):
    entry = bank.get("grpo-model-roles")
    stated = grader.grade(entry, "reference model 冻结不更新，只负责 KL 惩罚，防止偏离初始模型。")
    denied = grader.grade(
        entry, "reference model 并不冻结，也不负责 KL 惩罚，也不防止偏离初始模型。"
    )
    assert "reference-kl" in covered(stated)
    assert "reference-kl" not in covered(denied)
    assert denied.score < stated.score
    entry = bank.get("dpo-limitations-offline")
    denied = grader.grade(
        entry, "SFT 也不缺负信号，不存在 exposure bias，上限也不受示范数据质量限制。"
    )
    assert "sft-limits" not in covered(denied)


def test_words_that_only_contain_a_negation_do_not_deny(grader, bank):
    # 解决不了 holds 决不; an arrow starts the consequence, which the answer asserts
    from server.grading.claims import Stance, stance_at
    from server.grading.normalize import normal_form

    text = normal_form("PPO 换 GRPO 解决不了奖励解析失败")
    assert stance_at(text, text.index("奖励解析")) == Stance.asserted
    text = normal_form("丢掉一些峰不受罚→mode-seeking")
    assert stance_at(text, text.index("mode")) == Stance.asserted
    text = normal_form("reference model 也不负责 KL 惩罚")
    assert stance_at(text, text.index("kl")) == Stance.denied


@pytest.mark.parametrize(
    ("entry_id", "statement"),
    [
        # A direction word in a clause that compares two other things (MC vs TD): not the
        # entry's "lower variance" turned round.
        (
            "grpo-principles-overview",
            "Monte Carlo returns are unbiased but have higher variance than one-step TD targets.",
        ),
        (
            "sac-max-entropy",
            "Monte Carlo returns are unbiased but have higher variance than one-step TD targets.",
        ),
        # The entry says nothing of PPO: it cannot tell what belongs to PPO.
        ("gspo-vs-grpo", "PPO-RLHF 把 KL 惩罚放进每个 token 的奖励里，GRPO 则把 KL 加在 loss 里。"),
        # About another method than the misconception's (GRPO's group is not a batch).
        (
            "grpo-awareness",
            "REINFORCE++ normalises advantages over the whole global batch rather than within "
            "each prompt's group.",
        ),
    ],
)
def test_true_statements_near_a_swap_or_a_paraphrase_are_not_wrong_claims(
    grader, bank, entry_id, statement
):
    graded = grader.grade(bank.get(entry_id), statement)
    assert not graded.misconceptions, [m.id for m in graded.misconceptions]


def test_a_swapped_claim_is_charged_to_the_same_point_whatever_the_hash_seed():
    """The words a swapped clause carries were a set: which key point it was charged to (and so
    the grade) changed with PYTHONHASHSEED, i.e. between two starts of the server."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    # A long wrong answer of the labelled set whose clauses carry several swapped words.
    script = (
        "import json; from pathlib import Path; from server.config import Settings; "
        "from server.corpus.bank import load_bank; "
        "from server.evaluation.grading import load_datasets; "
        "from server.grading.rubric_grader import RubricGrader; "
        "b = load_bank(Settings().questions_dir); g = RubricGrader(b); "
        "c = next(c for c in load_datasets([Path('tests/eval/grading.jsonl'), "
        "Path('tests/eval/grading_v2')], b) if c.kind == 'longwrong' "
        "and c.entry.id == 'dpo-chosen-likelihood-decrease'); r = g.grade(c.entry, c.answer); "
        "print(json.dumps([r.score, [m.id for m in r.misconceptions]]))"
    )
    seen = set()
    for seed in ("1", "2", "3", "4"):
        out = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONHASHSEED": seed},
            cwd=Path(__file__).resolve().parents[1],
        )
        assert out.returncode == 0, out.stderr[-2000:]
        seen.add(out.stdout.strip().splitlines()[-1])
    assert len(seen) == 1, seen
    assert any(m.startswith("swapped:") for m in json.loads(seen.pop())[1])
