"""Code graded fairly (issue #13): another function name or argument order is matched to the
contract, a mismatch never outweighs the prose, the contract is visible before answering, the
rubric and the tests accept the same conventions, and prose probe answers keep the code's verdict.
Everything goes through the real app over HTTP with the real sandbox."""

from __future__ import annotations

import pytest

from server.grading.code_extract import match_signature
from tests.support.gae import GAE_BODY, GAE_PARAMS, gae_answer
from tests.support.grading import grade


def failed(g: dict) -> set[str]:
    return {t["name"] for t in g["tests"] if not t["passed"]}


# ---------- matching a definition to the contract (parsing only, nothing runs) ----------


@pytest.mark.parametrize(
    ("code", "function", "order", "by_name"),
    [
        (
            "def gae_advantages(rewards, values, dones, gamma, lam): ...",
            "gae_advantages",
            (0, 1, 2, 3, 4),
            True,
        ),
        # another order, told apart by the argument names
        ("def gae(values, rewards, dones, gamma, lam): ...", "gae", (1, 0, 2, 3, 4), True),
        # synonyms: rews/vals/done/lmbda/discount, and a trailing default
        ("def f(rews, vals, done, lmbda, discount=0.99): ...", "f", (0, 1, 2, 4, 3), True),
        # names that say nothing: placed by position, and the run is not fully trusted
        ("def gae(a, b, c, d, e): ...", "gae", (0, 1, 2, 3, 4), False),
        # a helper with another arity is not a candidate
        (
            "def td(r, v, v2): ...\ndef my_gae(r, v, d, g, l): return td(r, v, v)",
            "my_gae",
            (0, 1, 2, 3, 4),
            False,
        ),
        # the contract's name in the contract's order is trusted whatever the arguments are called
        ("def compute_gae(r, v, d, g, l): ...", "compute_gae", (0, 1, 2, 3, 4), True),
    ],
)
def test_a_definition_is_matched_to_the_contract(code, function, order, by_name):
    m = match_signature(code, "compute_gae", GAE_PARAMS, task_words={"gae"})
    assert (m.function, m.order, m.by_name) == (function, order, by_name)
    assert m.exact == (function == "compute_gae")


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("def compute_gae(rewards, values, gamma, lam): ...", "cannot be called as"),
        ("def a(p, q, r, s, t): ...\ndef b(p, q, r, s, t): ...", "several functions"),
        ("def td(r, v, v_next, gamma): ...", "no function takes the 5 arguments"),
    ],
)
def test_an_ambiguous_or_impossible_definition_is_not_matched(code, reason):
    m = match_signature(code, "compute_gae", GAE_PARAMS, task_words={"gae"})
    assert not m.matched and reason in m.reason


def test_log_prob_spellings_and_dpo_arguments_are_told_apart():
    params = [
        "policy_chosen_logps",
        "policy_rejected_logps",
        "ref_chosen_logps",
        "ref_rejected_logps",
        "beta",
    ]
    code = "def dpo(beta, ref_rejected_logps, ref_chosen_logps, pi_rejected_logprobs, chosen_log_probs): ..."
    m = match_signature(code, "dpo_loss", params, task_words={"dpo"})
    assert m.by_name and [params[i] for i in m.order] == [
        "beta",
        "ref_rejected_logps",
        "ref_chosen_logps",
        "policy_rejected_logps",
        "policy_chosen_logps",
    ]


# ---------- graded on its merits, through the real grading service ----------


def test_correct_code_under_another_name_scores_like_the_contract_name(alice):
    """The issue's example: gae_advantages scored 4.2, compute_gae 7.8. Now they score alike."""
    named = grade(alice, "gae-intro", gae_answer("compute_gae(rewards, values, dones, gamma, lam)"))
    other = grade(
        alice, "gae-intro", gae_answer("gae_advantages(rewards, values, dones, gamma, lam)")
    )
    assert named["tests"] and not failed(named)
    assert other["tests"] and not failed(other)
    assert other["score"] == named["score"]
    assert {kp["id"] for kp in other["key_points"] if kp["covered"]} == {
        kp["id"] for kp in named["key_points"] if kp["covered"]
    }
    assert "signature_mismatch" in other["flags"] and "signature_mismatch" not in named["flags"]
    assert "compute_gae(rewards, values, dones, gamma, lam)" in other["feedback"]
    assert "gae_advantages" in other["feedback"]


def test_another_argument_order_is_called_by_name(alice):
    swapped = gae_answer("gae(values, rewards, dones, gamma, lam)")
    g = grade(alice, "gae-intro", swapped, language="en")
    assert g["tests"] and not failed(g)
    assert "gae(values, rewards, dones, gamma, lam)" in g["feedback"]
    assert "matching arguments by name" in g["feedback"]


def test_a_buggy_function_under_another_name_still_fails_its_cases(alice):
    body = GAE_BODY.replace("gamma * lam * alive * running", "gamma * alive * running")
    g = grade(
        alice, "gae-intro", gae_answer("gae_advantages(rewards, values, dones, gamma, lam)", body)
    )
    assert "exponential_weights_of_residuals" in failed(g)
    points = {kp["id"]: kp for kp in g["key_points"]}
    # the prose explains the (γλ) sum: the point stays, and the feedback names the failing case
    assert points["exponential-sum"]["covered"]
    assert "你的实现未通过用例" in g["feedback"]


def test_a_positional_guess_never_takes_away_prose_credit(alice):
    """Argument names that say nothing, in another order than the contract's: the tests fail, but
    the order was a guess, so the explanation keeps what it earned."""
    prose = gae_answer("x()", "")
    prose_only = grade(alice, "gae-intro", prose[: prose.index("```")] + prose.split("```")[-1])
    assert prose_only["tests"] == []
    body = GAE_BODY.replace("rewards", "a").replace("values", "b").replace("dones", "c")
    body = body.replace("gamma", "e").replace("lam", "d")
    g = grade(alice, "gae-intro", gae_answer("gae(a, b, c, d, e)", body))
    assert g["tests"] and failed(g)  # λ and γ were placed the wrong way round
    assert "signature_mismatch" in g["flags"]
    prose_points = {kp["id"] for kp in prose_only["key_points"] if kp["covered"]}
    assert prose_points <= {kp["id"] for kp in g["key_points"] if kp["covered"]}


def test_a_function_that_cannot_be_called_is_reported_and_the_prose_grade_stands(alice):
    """A coding question: the function lacks an argument. Not run, not `no_code`, not halved."""
    prose = "DPO 的损失是 -log σ(β·[(logπ_c - logref_c) - (logπ_r - logref_r)])，对 batch 取平均。"
    code = (
        prose + "\n```python\nimport numpy as np\n\n"
        "def dpo_loss(policy_chosen_logps, policy_rejected_logps, beta):\n"
        "    return np.mean(np.logaddexp(0.0, -beta * (policy_chosen_logps - policy_rejected_logps)))\n"
        "```"
    )
    qid = "dpo-loss-formula-handwrite"
    g, prose_grade = grade(alice, qid, code), grade(alice, qid, prose)
    assert g["tests"] == []
    assert "signature_mismatch" in g["flags"]
    assert not {"no_code", "code_error"} & set(g["flags"])
    assert "cannot be called as dpo_loss(" in g["feedback"]
    assert g["score"] >= prose_grade["score"]


# ---------- rubric and tasks accept the same conventions ----------

REINFORCE_MEAN = """```python
import numpy as np

def reinforce_loss(logp, rewards, gamma):
    returns = np.zeros(len(rewards))
    running = 0.0
    for t in reversed(range(len(rewards))):
        running = rewards[t] + gamma * running
        returns[t] = running
    return -np.mean(logp * returns)
```"""
REINFORCE_EXACT = """```python
import numpy as np

def reinforce_loss(logp, rewards, gamma):
    T = len(rewards)
    weights = np.array([sum(gamma ** k * rewards[k] for k in range(t, T)) for t in range(T)])
    return -np.sum(logp * weights)
```"""
DQN_HUBER = """```python
import torch
import torch.nn.functional as F

def dqn_td_loss(q_values, actions, rewards, next_q_target, dones, gamma):
    q_sa = q_values.gather(1, actions.long().unsqueeze(1)).squeeze(1)
    target = (rewards + gamma * (1 - dones) * next_q_target.max(dim=1).values).detach()
    return F.smooth_l1_loss(q_sa, target)
```"""
GRPO_TOKEN_MEAN = """```python
import torch

def grpo_loss(logp, old_logp, ref_logp, advantages, mask, clip_eps, beta):
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(-1)
    pg = -torch.min(ratio * adv, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
    kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
    return ((pg + beta * kl) * mask).sum() / mask.sum()
```"""


@pytest.mark.parametrize(
    ("qid", "answer"),
    [
        ("policy-gradient-formula", REINFORCE_MEAN),  # mean over steps, not sum
        ("policy-gradient-formula", REINFORCE_EXACT),  # γ^t·G_t: the other convention
        ("dqn-pseudocode-td-loss", DQN_HUBER),  # the rubric accepts Huber; so do the tests
        ("grpo-loss-tensor-shapes", GRPO_TOKEN_MEAN),  # DAPO/verl token-mean
    ],
)
def test_conventions_the_rubric_accepts_pass_the_tests(alice, qid, answer):
    g = grade(alice, qid, answer)
    assert g["tests"] and not failed(g), g["tests"]


def test_contracts_state_the_accepted_conventions(alice):
    for qid, zh, en in [
        ("policy-gradient-formula", "另一种约定", "other convention"),
        ("dqn-pseudocode-td-loss", "Huber", "Huber"),
        ("grpo-loss-tensor-shapes", "token-mean", "token mean"),
    ]:
        coding = alice.get(f"/api/questions/{qid}").json()["coding"]
        assert zh in coding["contract"] and en in coding["contract_en"]


def test_the_token_ratio_point_rests_only_on_token_ratio_cases(alice):
    """A wrong sequence ratio with right token ratios keeps the token-level point."""
    answer = """```python
import numpy as np

def importance_ratios(logp, old_logp, mask):
    log_ratio = np.where(mask > 0, logp - old_logp, 0.0)
    return np.exp(log_ratio), np.exp(log_ratio.sum(axis=-1))  # raw product, not normalised
```"""
    g = grade(alice, "sequence-vs-token-importance-sampling", answer)
    assert {"token_ratio_per_position", "masked_positions_ratio_one"}.isdisjoint(failed(g))
    assert "sequence_ratio_geometric_mean" in failed(g)
    points = {kp["id"]: kp for kp in g["key_points"]}
    assert points["token-level-def"]["covered"] and not points["length-normalization"]["covered"]


# ---------- the contract is visible before answering ----------


def test_the_contract_is_in_the_question_and_in_the_turn_that_asks_it(alice):
    detail = alice.get("/api/questions/gae-intro").json()
    coding = detail["coding"]
    assert coding["function"] == "compute_gae" and coding["params"] == GAE_PARAMS
    assert coding["title"] and coding["title_en"] and "[T+1]" in coding["contract_en"]
    # a concept question that shares the task: the turn that asks it carries the contract too
    for seed in range(40):  # the GAE topic has several concept questions: find a plan that
        r = alice.post(  # starts with gae-intro
            "/api/sessions",
            json={
                "mode": "practice",
                "num_questions": 1,
                "topics": ["GAE"],
                "types": ["concept"],
                "seed": seed,
            },
        )
        assert r.status_code == 201, r.text
        created = r.json()
        if created["question"]["entry_id"] == "gae-intro":
            break
    asked = created["question"]
    assert asked["entry_id"] == "gae-intro"
    assert asked["coding"] == coding
    state = alice.get(f"/api/sessions/{created['id']}").json()
    assert state["current"]["coding"]["signature"] == coding["signature"]
    assert "cases" not in str(state["current"]["coding"])


# ---------- a prose probe answer keeps the code's verdict ----------

DPO_CODE = """DPO 的损失是 -log σ(β·[(logπ_c - logref_c) - (logπ_r - logref_r)])，对 batch 取平均。
```python
import numpy as np

def dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    logits = beta * ((policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - ref_rejected_logps))
    return np.mean(np.logaddexp(0.0, -logits))
```"""


def test_a_prose_probe_answer_keeps_the_tests_flags_and_grade(bob):
    r = bob.post(
        "/api/sessions",
        json={
            "mode": "practice",
            "num_questions": 1,
            "types": ["coding"],
            "topics": ["DPO损失函数推导"],
            "seed": 1,
        },
    )
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["question"]["entry_id"] == "dpo-loss-formula-handwrite"
    sid = created["id"]
    first = bob.post(f"/api/sessions/{sid}/answers", json={"answer": DPO_CODE}).json()
    assert first["grade"]["tests"] and not failed(first["grade"])
    # Judge v2: passing code covers the points its cases evidence, so a probe may not follow.
    assert first["next"]["kind"] in ("probe", "end")
    grades = [first["grade"]]
    step = first
    for probe_answer in (
        "可能是把每个 token 的 logp 求和吧，也许比值在 log 空间算。",
        "token logp 求和、序列 logp、log 空间、logsigmoid",
    ):
        if step["next"]["kind"] != "probe":
            break
        step = bob.post(f"/api/sessions/{sid}/answers", json={"answer": probe_answer}).json()
        grades.append(step["grade"])
    for g in grades[1:]:
        assert "no_code" not in g["flags"]
        assert g["tests"] == first["grade"]["tests"]
        assert g["score"] >= first["grade"]["score"]
    bob.post(f"/api/sessions/{sid}/end")
    report = bob.get(f"/api/sessions/{sid}/report").json()
    q = report["questions"][0]
    assert len(q["tests"]) == len(first["grade"]["tests"]) and "no_code" not in q["flags"]
    md = bob.get(f"/api/sessions/{sid}/report", params={"format": "md"}).text
    passed = len(first["grade"]["tests"])
    assert f"{passed}/{passed}" in md
    for t in first["grade"]["tests"]:  # every case, with its verdict
        assert f"- ✓ {t['explain']}" in md
