"""Interview UX over HTTP (issue #15): the server's clock ends the interview, the reference answer is
held back while a probe is pending, turns carry labels, filters say what exists, the report and the
history read well."""

from __future__ import annotations

import time

from tests.conftest import client_for

WEAK = "我不太确定，大概和采样有关。"
GRPO_CODE = """思路：每组减均值除以标准差。
```python
import numpy as np

def grpo_advantages(rewards, group_size):
    g = rewards.reshape(-1, group_size)
    return ((g - g.mean(axis=1, keepdims=True)) / (g.std(axis=1, keepdims=True) + 1e-4)).reshape(-1)
```"""


def start(client, **overrides):
    body = {"mode": "practice", "num_questions": 2, "language": "zh", "seed": 3, **overrides}
    r = client.post("/api/sessions", json=body)
    assert r.status_code == 201, r.text
    return r.json()


def wait_past(deadline_s: float) -> None:
    while time.time() < deadline_s:
        time.sleep(0.1)


def test_a_short_timed_interview_ends_by_itself_at_its_deadline(base_url):
    with client_for(base_url, "carol") as c:
        began = time.time()
        s = start(c, mode="interview", duration_seconds=2, num_questions=3)
        sid = s["id"]
        assert s["question"]["budget_seconds"] == 0  # 2 s over 3 questions
        running = c.get(f"/api/sessions/{sid}").json()
        assert running["status"] == "active" and running["remaining_seconds"] <= 2
        # Past the server's own deadline (creating the session can itself take seconds on a
        # loaded machine, so the client's clock at the request is not the deadline's start).
        from datetime import datetime

        deadline = datetime.fromisoformat(s["deadline"].replace("Z", "+00:00")).timestamp()
        wait_past(max(began + 2.5, deadline + 0.5))
        # Every route after the deadline sees the end: GET state, the report, and each action.
        state = c.get(f"/api/sessions/{sid}").json()
        assert state["status"] == "ended" and state["end_reason"] == "time"
        assert state["remaining_seconds"] == 0 and state["current"] is None
        for action in ("hint", "followup", "skip"):
            r = c.post(f"/api/sessions/{sid}/{action}")
            assert r.status_code == 409, (action, r.text)
            assert r.json()["error"]["code"] in ("time_up", "session_ended")
        report = c.get(f"/api/sessions/{sid}/report").json()
        assert report["status"] == "ended" and report["end_reason"] == "time"
        assert report["questions"][0]["status"] == "unanswered"
        missed = report["questions"][0]["missed"]
        assert missed and all(m["text_en"] and m["probe_en"] for m in missed)
        # The ending was committed: later calls see it ended, and the answer is refused.
        again = c.post(f"/api/sessions/{sid}/answers", json={"answer": "晚了"})
        assert again.status_code == 409 and again.json()["error"]["code"] == "session_ended"
        end_turns = [t for t in c.get(f"/api/sessions/{sid}").json()["turns"] if t["kind"] == "end"]
        assert len(end_turns) == 1 and end_turns[0]["label"] == "面试结束"


def test_progress_ends_timed_out_interviews_and_names_sessions(base_url):
    with client_for(base_url, "dave") as c:
        began = time.time()
        s = start(c, mode="interview", duration_seconds=1, num_questions=1, language="en")
        wait_past(began + 1.5)
        progress = c.get("/api/progress").json()
        row = next(r for r in progress["sessions"] if r["id"] == s["id"])
        assert row["status"] == "ended" and row["end_reason"] == "time"
        assert row["title"] and row["title_en"] and row["ended_at"]
        assert row["language"] == "en"
        # From the first session on, each area has a mastery value.
        assert progress["mastery"] and progress["mastery"][0]["answered"] >= 1
        assert all(item["text_en"] for item in progress["review_queue"])


def test_reference_answer_is_withheld_while_a_probe_is_pending(alice):
    s = start(alice, topics=["grpo"])
    sid = s["id"]
    seen_probe = False
    for _ in range(8):
        body = alice.post(f"/api/sessions/{sid}/answers", json={"answer": WEAK}).json()
        kind = body["next"]["kind"]
        if kind == "probe":
            seen_probe = True
            assert body["grade"]["reference_answer"] == ""
        else:
            # The question (with its probes) is finished: now the reference is revealed.
            assert body["grade"]["reference_answer"]
        assert body["question_number"] == 1 or kind != "probe"
        assert body["labels"]["zh"].startswith("第 ") and body["labels"]["en"].startswith("Q")
        if kind != "probe":
            break
    assert seen_probe


def test_every_turn_carries_a_label_in_both_languages(alice):
    s = start(alice, topics=["grpo"], num_questions=2)
    sid = s["id"]
    alice.post(f"/api/sessions/{sid}/hint")
    first = alice.post(f"/api/sessions/{sid}/answers", json={"answer": WEAK}).json()
    assert first["next"]["kind"] == "probe"
    turns = alice.get(f"/api/sessions/{sid}").json()["turns"]
    labels = [(t["role"], t["kind"], t["label"], t["labels"]["en"]) for t in turns]
    assert labels[0][2] == "第 1 题" and labels[0][3] == "Q1"
    assert ("interviewer", "hint", "第 1 题 · 提示 1", "Q1 · Hint 1") in labels
    assert ("candidate", "answer", "第 1 题 · 你的回答", "Q1 · Your answer") in labels
    assert ("interviewer", "probe", "第 1 题 · 追问 1", "Q1 · Follow-up 1") in labels
    second = alice.post(f"/api/sessions/{sid}/answers", json={"answer": WEAK}).json()
    turns = alice.get(f"/api/sessions/{sid}").json()["turns"]
    answer_after_probe = [t for t in turns if t["role"] == "candidate"][-1]
    assert answer_after_probe["label"] == "第 1 题 · 追问 1 · 你的回答"
    assert second["question_number"] == 1


def test_filter_options_count_what_exists_for_the_chosen_companies(alice):
    everything = alice.get("/api/topics").json()
    bytedance = alice.get("/api/topics", params={"company": "字节跳动"}).json()
    assert 0 < bytedance["total"] < everything["total"]
    assert sum(t["count"] for t in bytedance["topics"]) == bytedance["total"]
    assert all(t["name_en"] and t["count"] > 0 for t in bytedance["topics"])
    assert {a["area"] for a in bytedance["areas"]} <= {a["area"] for a in everything["areas"]}
    gae = next(a for a in everything["areas"] if a["area"] == "grpo")
    assert gae["name_zh"] and gae["name_en"] == "GRPO family"
    # A topic the company never asked: the error names what the company does have.
    absent = next(
        t["topic"]
        for t in everything["topics"]
        if t["topic"] not in {b["topic"] for b in bytedance["topics"]}
    )
    r = alice.post("/api/sessions", json={"companies": ["字节跳动"], "topics": [absent]})
    assert r.status_code == 422 and r.json()["error"]["code"] == "no_questions"
    assert bytedance["topics"][0]["topic"] in r.json()["error"]["message"]


def test_code_question_contract_tests_and_markdown_report_in_both_languages(alice, services):
    eid = next(
        e.id
        for e in services.bank
        if (c := services.grading.coding_contract(e.id)) and c.function == "grpo_advantages"
    )
    topic = services.bank.get(eid).topic
    s = start(alice, topics=[topic], num_questions=1)
    assert s["question"]["entry_id"] == eid
    assert s["question"]["coding"]["function"] == "grpo_advantages"
    body = alice.post(f"/api/sessions/{s['id']}/answers", json={"answer": GRPO_CODE}).json()
    assert body["grade"]["tests"]
    alice.post(f"/api/sessions/{s['id']}/end")
    report = alice.get(f"/api/sessions/{s['id']}/report").json()
    assert report["questions"][0]["tests"] and report["language"] == "zh"
    assert report["questions"][0]["topic_en"] and report["questions"][0]["text_en"]
    zh = alice.get(f"/api/sessions/{s['id']}/report", params={"format": "md", "lang": "zh"}).text
    en = alice.get(f"/api/sessions/{s['id']}/report", params={"format": "md"}).text
    assert "# Sparring 面试报告" in zh and "隐藏测试" in zh and "参考答案" in zh
    assert "# Sparring interview report" in en and "Hidden tests" in en
    bad = alice.get(f"/api/sessions/{s['id']}/report", params={"format": "md", "lang": "fr"})
    assert bad.status_code == 422


def test_every_bank_topic_and_area_has_an_english_name(services):
    from server.corpus.topic_names import load_topic_names

    names = load_topic_names(services.settings.corpus_dir)
    missing = sorted({e.topic for e in services.bank} - set(names.topics))
    assert not missing, f"add these topics to corpus/topics.yaml: {missing}"
    assert {e.area.value for e in services.bank} <= set(names.areas)
    assert all(v.strip() for v in names.topics.values())


def test_a_dropped_question_keeps_its_number_and_the_related_one_takes_it(alice):
    s = start(alice, num_questions=3)
    sid = s["id"]
    alice.post(f"/api/sessions/{sid}/skip")  # question 2 is asked
    r = alice.post(f"/api/sessions/{sid}/followup")  # dropped for a related question
    assert r.status_code == 200, r.text
    turns = alice.get(f"/api/sessions/{sid}").json()["turns"]
    openings = [t["label"] for t in turns if t["role"] == "interviewer" and t["kind"] != "skip"]
    assert openings == ["第 1 题", "第 2 题", "第 2 题 · 相关问题"]


def test_a_clarifying_question_is_labelled_as_a_question_not_an_answer(alice):
    s = start(alice, topics=["grpo"], num_questions=1)
    sid = s["id"]
    r = alice.post(f"/api/sessions/{sid}/clarify", json={"question": "你指 token 级还是序列级？"})
    assert r.status_code == 200, r.text
    first = alice.post(f"/api/sessions/{sid}/answers", json={"answer": WEAK}).json()
    assert first["next"]["kind"] == "probe"
    alice.post(f"/api/sessions/{sid}/clarify", json={"question": "是问方差吗？"})
    turns = alice.get(f"/api/sessions/{sid}").json()["turns"]
    labels = [(t["role"], t["kind"], t["label"], t["labels"]["en"]) for t in turns]
    assert ("candidate", "ask", "第 1 题 · 你的提问", "Q1 · Your question") in labels
    assert ("interviewer", "clarify", "第 1 题 · 答疑", "Q1 · Clarification") in labels
    # After a probe, the question is tied to the probe as an answer would be.
    assert (
        "candidate",
        "ask",
        "第 1 题 · 追问 1 · 你的提问",
        "Q1 · Follow-up 1 · Your question",
    ) in labels
    assert ("candidate", "answer", "第 1 题 · 你的回答", "Q1 · Your answer") in labels


GRPO_PARTIAL = (
    "对同一个 prompt 采样一组 G 条回答，baseline 取组内奖励的均值，再除以标准差得到优势 "
    "A_i = (r_i - mean) / (std + eps)，所有 token 共享这个优势；这替代了 PPO 的 critic，不需要价值模型。"
)


def test_skipping_a_pending_probe_keeps_the_grade_already_earned(alice):
    s = start(alice, topics=["grpo"], num_questions=2)
    sid = s["id"]
    first = alice.post(f"/api/sessions/{sid}/answers", json={"answer": GRPO_PARTIAL}).json()
    assert first["next"]["kind"] == "probe", first["next"]
    earned = first["grade"]["score"]
    assert earned > 0
    skipped = alice.post(f"/api/sessions/{sid}/skip")
    assert skipped.status_code == 200, skipped.text
    body = skipped.json()
    # Only the probe is skipped: the question keeps its grade, and the interview moves on.
    assert body["grade"]["score"] == earned
    assert "probe_skipped" in body["grade"]["flags"] and "skipped" not in body["grade"]["flags"]
    assert any(kp["covered"] for kp in body["grade"]["key_points"])
    assert body["grade"]["reference_answer"]  # the question is finished
    assert body["question_number"] == 1
    assert body["next"]["kind"] in ("question", "followup")
    assert body["next"]["question"]["number"] == 2
    report = alice.get(f"/api/sessions/{sid}/report").json()
    q1 = report["questions"][0]
    assert q1["status"] == "done" and q1["score"] == earned and q1["covered"]
    assert "probe_skipped" in q1["flags"]
    # the Markdown report names the flag in words (issue 27), never as the raw code
    for lang, status, flag in (
        ("zh", "已答", "跳过了追问"),
        ("en", "answered", "follow-up skipped"),
    ):
        md = alice.get(f"/api/sessions/{sid}/report", params={"format": "md", "lang": lang}).text
        q1_md = md.split("### 1.")[1].split("### 2.")[0]
        assert f"**{earned}**" in q1_md and status in q1_md and flag in q1_md
        assert "probe_skipped" not in q1_md


def test_hints_taken_during_a_probe_cap_the_grade_a_skip_keeps(alice):
    s = start(alice, topics=["grpo"], num_questions=2)
    sid = s["id"]
    first = alice.post(f"/api/sessions/{sid}/answers", json={"answer": GRPO_PARTIAL}).json()
    assert first["next"]["kind"] == "probe", first["next"]
    earned = first["grade"]["score"]
    cap = 10.0
    while cap >= earned:
        hint = alice.post(f"/api/sessions/{sid}/hint")
        assert hint.status_code == 200, hint.text
        cap = hint.json()["score_cap"]
    body = alice.post(f"/api/sessions/{sid}/skip").json()
    assert body["grade"]["score"] == cap < earned
    assert {"probe_skipped", "hint_used"} <= set(body["grade"]["flags"])


def test_skipping_a_question_never_answered_still_scores_zero(alice):
    s = start(alice, topics=["grpo"], num_questions=2)
    sid = s["id"]
    body = alice.post(f"/api/sessions/{sid}/skip").json()
    assert body["grade"]["score"] == 0
    assert body["grade"]["flags"] == ["skipped"]
    assert not any(kp["covered"] for kp in body["grade"]["key_points"])
    assert body["next"]["question"]["number"] == 2
    report = alice.get(f"/api/sessions/{sid}/report").json()
    q1 = report["questions"][0]
    assert q1["status"] == "skipped" and q1["score"] == 0 and q1["flags"] == ["skipped"]
    md = alice.get(f"/api/sessions/{sid}/report", params={"format": "md", "lang": "en"}).text
    assert "score **0.0**" in md.split("### 1.")[1].split("### 2.")[0]
