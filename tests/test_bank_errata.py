"""Issue #13 errata: the validator rules that catch each class of error mechanically, each shown to
fail on a bad fixture and to pass on the committed bank, and the grader catching the wrong claims
the errata added as contradictions or misconceptions."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from server.corpus.bank import QuestionBank, load_bank
from server.corpus.content_rules import content_problems
from server.corpus.hygiene import hygiene_problems, judge_alias
from server.corpus.schema import QuestionEntry
from server.corpus.validate import validate_files
from server.grading.rubric_grader import RubricGrader

QUESTIONS = Path(__file__).resolve().parents[1] / "corpus" / "questions"


@pytest.fixture(scope="module")
def bank() -> QuestionBank:
    return load_bank(QUESTIONS)


@pytest.fixture(scope="module")
def grader() -> RubricGrader:
    return RubricGrader()


def _entry_data(entry_id: str) -> dict:
    return yaml.safe_load((QUESTIONS / f"{entry_id}.yaml").read_text())


def _write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / f"{data['id']}.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True, sort_keys=False))
    return path


def _point(data: dict, point_id: str) -> dict:
    return next(k for k in data["rubric"]["key_points"] if k["id"] == point_id)


# --- k3: "unbiased" only with the sampling caveat, and the forward-KL gradient said somewhere ---


def test_the_committed_bank_passes_the_content_rules(bank):
    assert [p for e in bank for p in content_problems(e)] == []


def test_k3_called_unbiased_without_the_sampling_caveat_is_rejected(tmp_path):
    data = _entry_data("kl-role-in-rlhf")
    point = _point(data, "reward-vs-loss-estimators")
    point["text"] = "GRPO 把 KL 作为 loss，用 k3 = r - 1 - log r，它无偏、非负、方差低"
    problems = validate_files([_write(tmp_path, data)])
    assert any("reward-vs-loss-estimators.text" in p and "k3 unbiased" in p for p in problems)
    # the same claim in English, and by formula instead of by name
    point["text"] = "GRPO 把 KL 作为 loss（k3），样本来自 π_θ 时无偏"
    point["text_en"] = "GRPO's x - log x - 1 KL term is unbiased and non-negative"
    flagged = [p for p in validate_files([_write(tmp_path, data)]) if "k3 unbiased" in p]
    assert len(flagged) == 1 and "reward-vs-loss-estimators.text_en" in flagged[0]


def test_an_entry_calling_k3_unbiased_must_state_the_forward_kl_gradient():
    data = _entry_data("grpo-formula")
    data["rubric"]["reference_answer"] = (
        "GRPO 的 KL 用 k3 估计 D_KL = π_ref/π_θ - log(π_ref/π_θ) - 1，样本来自 π_θ 时对 KL 值无偏，恒非负。"
    )
    data["rubric"]["reference_answer_en"] = (
        "GRPO estimates the KL with k3, unbiased for the KL value when samples are drawn from π_θ."
    )
    problems = content_problems(QuestionEntry.model_validate(data))
    assert any("forward KL" in p for p in problems)
    data["rubric"]["reference_answer"] += "作为 loss 求导时梯度对应正向 KL(π_ref||π_θ)。"
    assert content_problems(QuestionEntry.model_validate(data)) == []


def test_a_misconception_may_state_the_k3_error_it_corrects():
    # the wrong statement is the misconception's text; only its correction is held to the rule
    data = _entry_data("grpo-loss-tensor-shapes")
    wrong = next(m for m in data["rubric"]["misconceptions"] if m["id"] == "k3-correct-gradient")
    assert "无偏" in wrong["text"] and "π_θ" not in wrong["text"]
    assert content_problems(QuestionEntry.model_validate(data)) == []
    wrong["correction"] = "k3 虽然无偏，但梯度不对。"
    assert content_problems(QuestionEntry.model_validate(data))


# --- aliases: a bare number or an over-broad word never covers a point alone ---


@pytest.mark.parametrize("alias", ["0.2", "0.28", "1e-6", "4096", "-1.0", "3e-4", "10%"])
def test_a_bare_number_alias_is_weak(alias):
    verdict = judge_alias(alias, question="", wrong="")
    assert verdict.weak and verdict.reason == "bare-number"


@pytest.mark.parametrize(
    "alias", ["sigmoid", "ratio", "成对", "上界", "前提", "不一定", "两处", "MoE", "局部", "全局"]
)
def test_an_over_broad_alias_is_weak(alias):
    verdict = judge_alias(alias, question="", wrong="")
    assert verdict.weak and verdict.reason == "overbroad"


@pytest.mark.parametrize(
    "alias", ["ε=0.2", "ε_high=0.28", "importance ratio", "MoE 路由", "局部步长"]
)
def test_a_phrase_that_states_the_value_or_the_relation_stays_strong(alias):
    assert not judge_alias(alias, question="", wrong="").weak


def test_a_point_evidenced_only_by_numbers_and_broad_words_is_rejected():
    data = _entry_data("ppo-clip-epsilon-value")
    _point(data, "concrete-value")["aliases"] = ["0.2", "0.1~0.2", "ratio", "上界", "ε=0.2"]
    problems = hygiene_problems(QuestionEntry.model_validate(data))
    assert any("concrete-value" in p and "0.2 (bare-number)" in p for p in problems)
    _point(data, "concrete-value")["aliases"].append("clip 0.2")
    assert hygiene_problems(QuestionEntry.model_validate(data)) == []


def test_no_bank_point_keeps_the_over_broad_words_the_review_named(bank):
    named = {"sigmoid", "ratio", "成对", "上界", "前提", "不一定", "两处", "moe", "局部", "全局"}
    left = [
        (e.id, kp.id, a)
        for e in bank
        for kp in e.rubric.key_points
        for a in kp.aliases
        if a.strip().lower() in named
    ]
    assert left == []


# --- the corrected content is what the grader now rewards and flags ---


def test_claiming_k3s_gradient_is_the_reverse_kl_gradient_is_a_wrong_claim(grader, bank):
    grade = grader.grade(
        bank.get("kl-role-in-rlhf"),
        "GRPO 把 KL 直接放进 loss，用 k3 估计。k3 的梯度也是无偏的，求导得到的就是反向 KL 的梯度。",
    )
    assert "k3-loss-reverse-gradient" in [m.id for m in grade.misconceptions]


def test_claiming_a_one_sample_importance_weight_is_biased_is_a_wrong_claim(grader, bank):
    grade = grader.grade(
        bank.get("gspo-vs-grpo"),
        "GRPO 的 token 级 ratio 每个位置只有一个样本，单样本的重要性权重是有偏的，所以 GSPO 改成序列级。",
    )
    assert "one-sample-is-biased" in [m.id for m in grade.misconceptions]


def test_dropping_gamma_t_claimed_unbiased_is_a_wrong_claim(grader, bank):
    grade = grader.grade(
        bank.get("policy-gradient-formula"),
        "∇J = E[Σ_t ∇log π_θ(a_t|s_t) G_t]，因果性让我们只用 reward-to-go。去掉 γ^t 仍然是无偏的。",
    )
    hits = [m.id for m in grade.misconceptions]
    assert any(h.startswith("contradicts:") and "reward-to-go" in h for h in hits), hits


# --- retired claims: the review's errata may not come back in what an entry asserts ---


@pytest.mark.parametrize(
    ("entry_id", "point_id", "text"),
    [
        ("gspo-vs-grpo", "token-is-ill-posed", "token 级比每个位置只有一个样本，起不到纠偏作用"),
        ("dpo-limitations-offline", "engineering-bottlenecks", "policy+ref 双模型，显存翻倍"),
        ("reward-model-design-training", "model-size", "通常 RM 不小于策略"),
    ],
)
def test_a_retired_claim_in_a_key_point_is_rejected(entry_id, point_id, text):
    data = _entry_data(entry_id)
    _point(data, point_id)["text"] = text
    problems = content_problems(QuestionEntry.model_validate(data))
    assert any(f"{point_id}.text" in p and "retired claim" in p for p in problems)


def test_a_misconception_may_state_a_retired_claim():
    data = _entry_data("dpo-limitations-offline")
    wrong = next(m for m in data["rubric"]["misconceptions"] if m["id"] == "dpo-memory-doubles")
    wrong["text"] = "DPO 两个模型，显存翻倍"
    assert content_problems(QuestionEntry.model_validate(data)) == []
