"""Coding questions: the answer's code runs against hidden tests in the sandbox, over HTTP."""

from __future__ import annotations

import pytest

from server.grading.code_extract import extract_code
from tests.support.gae import gae_answer

QID = "gae-intro"
RIGHT = gae_answer()
# The common bug: the episode boundary is ignored, so advantage leaks across episodes.
LEAKY = RIGHT.replace("alive = 1.0 - dones[t]", "alive = 1.0")
# λ forgotten in the recursion: the (γλ)^l exponential sum is wrong even without any termination.
NO_LAMBDA = RIGHT.replace("gamma * lam * alive * running", "gamma * alive * running")


def grade(client, answer: str, qid: str = QID) -> dict:
    r = client.post("/api/grade", json={"question_id": qid, "answer": answer, "grader": "rubric"})
    assert r.status_code == 200, r.text
    return r.json()


def test_right_code_passes_every_hidden_test_and_covers_its_points(alice):
    g = grade(alice, RIGHT)
    assert g["grader"] == "rubric" and g["tests"]
    assert all(t["passed"] for t in g["tests"]), g["tests"]
    points = {kp["id"]: kp for kp in g["key_points"]}
    for kp_id in ("td-residual", "exponential-sum", "bias-variance-lambda"):
        assert points[kp_id]["covered"]
        assert points[kp_id]["evidence"] in RIGHT  # verbatim, e.g. the def line
    assert "隐藏测试" in g["feedback"]


def test_a_bug_fails_the_test_that_targets_it_but_keeps_what_the_prose_explained(alice):
    right, wrong = grade(alice, RIGHT), grade(alice, NO_LAMBDA)
    failed = {t["name"] for t in wrong["tests"] if not t["passed"]}
    assert "exponential_weights_of_residuals" in failed and "single_step" not in failed
    points = {kp["id"]: kp for kp in wrong["key_points"]}
    # the prose explains the (γλ) sum: the failing case does not take the point away (issue #23)
    assert points["exponential-sum"]["covered"]
    assert "讲解 ✓" in wrong["feedback"] and "你的实现未通过用例" in wrong["feedback"]
    assert wrong["score"] < right["score"]
    message = next(t["message"] for t in wrong["tests"] if t["name"] == "typical_gamma_lambda")
    assert "数值错误" in message  # the session's language


def test_a_key_point_is_decided_only_by_the_cases_that_isolate_it(alice):
    """Ignoring episode ends fails the termination cases, which are reported; the exponential sum
    is mapped only to cases without a termination, so the point stays covered."""
    leaky = grade(alice, LEAKY)
    failed = {t["name"] for t in leaky["tests"] if not t["passed"]}
    assert failed == {"done_stops_bootstrap", "llm_terminal_reward"}
    points = {kp["id"]: kp for kp in leaky["key_points"]}
    assert points["exponential-sum"]["covered"]
    assert "✗ 回合在中途结束时" in leaky["feedback"]  # the failed case is still shown


def test_code_that_does_not_run_is_reported_not_a_500(alice):
    broken = RIGHT.replace(
        "def compute_gae(rewards, values, dones, gamma, lam):", "def compute_gae("
    )
    g = grade(alice, broken)
    assert "code_error" in g["flags"]
    assert g["tests"] and not any(t["passed"] for t in g["tests"])
    assert "SyntaxError" in g["tests"][0]["message"]
    looping = RIGHT.replace("    return adv", "    while True:\n        pass")
    g = grade(alice, looping)
    assert "code_error" in g["flags"] and "repetition" not in g["flags"]
    assert "CPU" in g["tests"][0]["message"] or "timed out" in g["tests"][0]["message"]
    # a hostile answer is content like any other
    hostile = RIGHT.replace("    return adv", "    import os\n    os.system('id')\n    return adv")
    g = grade(alice, hostile)
    assert not any(t["passed"] for t in g["tests"])
    assert "not allowed" in g["tests"][0]["message"]


def test_prose_only_answers_are_graded_by_the_rubric(alice):
    prose = "GAE 用 TD 残差 δ_t = r_t + γV(s_{t+1}) - V(s_t) 的 (γλ) 指数加权和估计优势。"
    g = grade(alice, prose)
    assert g["tests"] == [] and "no_code" not in g["flags"]  # a concept question: prose is fine
    coding = grade(alice, "我会先算 ratio，再 clip，最后取 min。", "grpo-loss-tensor-shapes")
    # a coding question with a task: no tests ran, and the grade says code was expected
    assert coding["tests"] == [] and "no_code" in coding["flags"]


def test_an_illustrative_snippet_on_a_concept_question_is_left_to_the_rubric(alice):
    prose = "GAE 是 TD 残差的 (γλ) 指数加权和，从后往前递推。"
    snippet = (
        prose + "\n```python\ndef td(r, v, v_next, gamma):\n    return r + gamma * v_next - v\n```"
    )
    g = grade(alice, snippet)
    assert g["tests"] == [] and "code_error" not in g["flags"]


def test_question_detail_states_the_function_but_not_the_tests(alice):
    detail = alice.get(f"/api/questions/{QID}").json()
    assert detail["coding"]["signature"] == "compute_gae(rewards, values, dones, gamma, lam)"
    assert detail["coding"]["tests"] >= 5
    assert "cases" not in str(detail["coding"]) and "reference" not in detail["coding"]
    assert alice.get("/api/questions/ppo-why-mean").json()["coding"] is None


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("no code here", None),
        ("```python\ndef f(x):\n    return x\n```\nthat's it", "def f(x):\n    return x\n"),
        ("思路如下\ndef f(x):\n    return x\n以上就是实现。", "def f(x):\n    return x\n"),
        ("```\nimport numpy as np\ndef f(x):\n    return x\n```", None),
    ],
)
def test_code_is_found_in_free_text(answer, expected):
    code = extract_code(answer)
    if expected is None and "import" not in answer:
        assert code is None
    elif expected is None:
        assert code is not None and code.startswith("import numpy")
    else:
        assert code == expected


def test_every_task_tells_right_code_from_known_wrong_code(services):
    """Each task's reference passes; each realistic wrong answer fails exactly its listed cases."""
    from server.grading.code_grader import verify_known_answers

    assert len(services.coding_tasks) >= 1
    problems = [
        p
        for t in services.coding_tasks.tasks
        for p in verify_known_answers(t, services.code_grader.sandbox)
    ]
    assert problems == []


def test_an_interview_states_the_contract_and_runs_the_code(bob):
    created = bob.post(
        "/api/sessions",
        json={"mode": "practice", "num_questions": 1, "types": ["coding"], "seed": 3},
    ).json()
    question = created["question"]
    assert question["type"] == "coding"
    contract = question["coding"]
    assert contract is not None  # seed 3 picks a coding question that has a task
    assert contract["signature"].split("(")[0] in question["prompt"]
    answer = f"```python\ndef {contract['function']}(*args):\n    return 0.0\n```"
    r = bob.post(f"/api/sessions/{created['id']}/answers", json={"answer": answer})
    assert r.status_code == 200, r.text
    grade = r.json()["grade"]
    assert grade["tests"] and not all(t["passed"] for t in grade["tests"])
    state = bob.get(f"/api/sessions/{created['id']}").json()
    assert any(t["role"] == "candidate" and t["text"] == answer for t in state["turns"])
