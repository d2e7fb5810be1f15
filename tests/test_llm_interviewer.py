"""The LLM interviewer against the scripted OpenAI-compatible server, through the real app over HTTP:
what the model is told (and not told), its lines used, and every failure falling back to the
template line, flagged."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from server.corpus.schema import QuestionEntry
from server.interview.llm_interviewer import leaks
from server.interview.phrasing import secrets_of
from tests.conftest import token_for
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import derived_services, serve_services

TOPIC = "GRPO优势基线"
ENTRY_ID = "grpo-advantage-baseline"
WEAK = "我觉得 baseline 和采样有关，大概是对一组回答算个什么值，具体不太记得了。"
PROBE_QUOTING = "你刚才说 baseline「和采样有关」——具体是在什么范围内算的？"


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture(scope="module")
def url(services, llm, tmp_path_factory) -> Iterator[str]:
    # Its own database: the sessions made here must not show up in other tests' users.
    database = tmp_path_factory.mktemp("interviewer-db") / "sparring.db"
    svc = derived_services(
        services,
        database_url=f"sqlite:///{database}",
        llm_model="openai/scripted-interviewer",
        llm_api_base=llm.base_url,
        llm_api_key="test-key",
        llm_timeout_seconds=2,
        llm_interviewer_timeout_seconds=2,
    )
    with serve_services(svc) as (base, _app):
        yield base


@pytest.fixture(scope="module")
def entry(services) -> QuestionEntry:
    found = services.bank.get(ENTRY_ID)
    assert found is not None and found.topic == TOPIC
    return found


@pytest.fixture()
def api(url) -> Iterator[httpx.Client]:
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token_for('bob')}"}, timeout=60
    ) as c:
        yield c


def start(api: httpx.Client, **extra) -> str:
    body = {
        "mode": "practice",
        "num_questions": 2,
        "topics": [TOPIC],
        "grader": "rubric",  # the scripted server speaks only for the interviewer here
        "seed": 7,
        **extra,
    }
    r = api.post("/api/sessions", json=body)
    assert r.status_code == 201, r.text
    if body["topics"] == [TOPIC]:
        assert r.json()["question"]["entry_id"] == ENTRY_ID
    return r.json()["id"]


def answer(api: httpx.Client, sid: str, text: str = WEAK) -> dict:
    r = api.post(f"/api/sessions/{sid}/answers", json={"answer": text})
    assert r.status_code == 200, r.text
    return r.json()


def told(request: dict) -> str:
    return "\n".join(m["content"] for m in request["messages"])


def assert_nothing_secret_was_told(request: dict, entry: QuestionEntry) -> None:
    content = told(request)
    assert entry.rubric is not None
    assert entry.rubric.reference_answer not in content
    for kp in entry.rubric.key_points:
        assert kp.text not in content and kp.text_en not in content


def test_a_probe_is_worded_by_the_model_from_the_candidates_words(api, llm, entry):
    sid = start(api)
    llm.script(("reply", PROBE_QUOTING))
    body = answer(api, sid)
    step = body["next"]
    assert step["kind"] == "probe"
    assert step["prompt"] == PROBE_QUOTING
    assert step["phrasing"] == {"by": "llm", "flags": []}
    # The wire: one chat-completions call with the system rules, the candidate's words in tags,
    # and the gap to probe — the rubric's probe question, not the point or the reference.
    assert len(llm.requests) == 1
    request = llm.requests[0]
    assert request["model"] == "scripted-interviewer"
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert f"<candidate_answer>\n{WEAK}\n</candidate_answer>" in told(request)
    kp = next(k for k in entry.rubric.key_points if k.id == step["key_point_id"])
    assert kp.probe in told(request)
    assert_nothing_secret_was_told(request, entry)
    # The line is stored as the interviewer's turn.
    turns = api.get(f"/api/sessions/{sid}").json()["turns"]
    assert turns[-1]["kind"] == "probe" and turns[-1]["text"] == PROBE_QUOTING


def test_a_reply_that_reveals_a_key_point_is_replaced_by_the_template(api, llm, entry):
    sid = start(api)
    point = entry.rubric.key_points[1].text
    llm.script(("reply", f"提示你一下，{point}。那你觉得呢？"))
    step = answer(api, sid)["next"]
    assert step["kind"] == "probe"
    assert step["prompt"].startswith("追问一下：")
    assert point not in step["prompt"]
    assert step["phrasing"] == {"by": "template", "flags": ["llm_leak"]}


def test_a_reply_that_repeats_the_reference_answer_is_replaced(api, llm, entry):
    sid = start(api)
    llm.script(("reply", entry.rubric.reference_answer[:60]))
    step = answer(api, sid)["next"]
    assert step["phrasing"]["flags"] == ["llm_leak"] and step["prompt"].startswith("追问一下")


def test_a_reply_that_grades_in_prose_is_replaced(api, llm):
    sid = start(api)
    llm.script(("reply", "这个回答只能给 3/10。那 baseline 是在什么范围内算的？"))
    step = answer(api, sid)["next"]
    assert step["phrasing"] == {"by": "template", "flags": ["llm_grading"]}


@pytest.mark.parametrize(
    ("steps", "flag"),
    [
        ((("status", 500),), "llm_error"),
        ((("slow", 5, PROBE_QUOTING),), "llm_timeout"),
        ((("reply", ""),), "llm_malformed"),
        ((("reply", "```\n```"),), "llm_malformed"),
        ((("reply", "x" * 2000),), "llm_malformed"),
    ],
)
def test_every_failure_falls_back_to_the_template_flagged(api, llm, steps, flag):
    sid = start(api)
    llm.script(*steps)
    step = answer(api, sid)["next"]
    assert step["kind"] == "probe" and step["prompt"].startswith("追问一下：")
    assert step["phrasing"] == {"by": "template", "flags": [flag]}
    assert len(llm.requests) == 1  # no retry: the template is the fallback, in the same deadline


def test_a_transition_says_why_and_keeps_the_question_verbatim(api, llm, services):
    # Related questions are in the grpo area: the session's filters must admit them.
    sid = start(api, topics=[TOPIC, "grpo"], seed=1)
    first = services.bank.get(api.get(f"/api/sessions/{sid}").json()["current"]["entry_id"])
    bridge = "既然聊到了这一步，我们顺着看一个相关的问题。"
    llm.script(("reply", bridge))
    r = api.post(f"/api/sessions/{sid}/followup")
    assert r.status_code == 200, r.text
    step = r.json()
    assert step["kind"] == "followup" and step["phrasing"]["by"] == "llm"
    assert step["prompt"].startswith(bridge)
    assert step["question"]["text"] in step["prompt"]  # the bank question, word for word
    request = llm.requests[0]
    assert "Previous question: " + first.text in told(request)
    assert "How the next question relates to the previous one:" in told(request)
    for asked in (first, services.bank.get(step["question"]["entry_id"])):
        assert_nothing_secret_was_told(request, asked)


def chat(url: str, user: str = "bob") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=token_for(user), max_retries=0)


def test_a_clarifying_question_is_answered_without_leaking(url, llm, entry):
    client = chat(url)
    history = [{"role": "user", "content": f"{TOPIC} 练习，1 道题，seed=7，grader=rubric"}]
    first = client.chat.completions.create(model="sparring-practice", messages=history)
    history.append({"role": "assistant", "content": first.choices[0].message.content})
    assert entry.text in history[-1]["content"]
    clarification = "问的是 baseline 怎么取；粒度你可以先说明自己的假设再展开。"
    llm.script(("reply", clarification))
    history.append({"role": "user", "content": "你指 token 级还是序列级？"})
    reply = client.chat.completions.create(model="sparring-practice", messages=history)
    text = reply.choices[0].message.content
    assert text.startswith(clarification)
    meta = reply.model_extra["sparring"]["meta"]
    assert meta["kind"] == "clarify" and meta["phrasing"] == {"by": "llm", "flags": []}
    request = llm.requests[0]
    assert "<candidate_question>\n你指 token 级还是序列级？\n</candidate_question>" in told(request)
    assert_nothing_secret_was_told(request, entry)
    # The same question again, and a model that gives the answer away: the template answers.
    history.append({"role": "assistant", "content": text})
    llm.script(("reply", f"其实就是{entry.rubric.key_points[1].text}。"))
    history.append({"role": "user", "content": "是指序列级还是 token 级？"})
    again = client.chat.completions.create(model="sparring-practice", messages=history)
    assert "题目问的是" in again.choices[0].message.content
    assert again.model_extra["sparring"]["meta"]["phrasing"]["flags"] == ["llm_leak"]


def test_the_leak_rule_allows_the_candidates_own_words():
    """Quoting the candidate is the point of a probe, even when they said a key point's words."""
    secret = ["baseline 是组内奖励的均值 mean(r)，再除以标准差"]
    said = "我记得 baseline 是组内奖励的均值"
    assert not leaks("你刚才说 baseline 是组内奖励的均值，那之后呢？", secret, [said])
    assert leaks("你刚才说 baseline 是组内奖励的均值，那之后呢？", secret, ["别的话"])
    assert leaks("之后还要再除以标准差吗？", secret, [said])


def test_secrets_cover_the_reference_and_every_point(entry):
    secrets = secrets_of(entry)
    assert entry.rubric.reference_answer in secrets
    assert all(kp.text in secrets and kp.text_en in secrets for kp in entry.rubric.key_points)


# ---------- a whole interview in a chat client, with the scripted model as the interviewer ----------


def between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def scripted_interviewer(body: dict) -> str:
    """A stand-in model that words what it was told: quotes the candidate's first clause and asks
    about the gap it was given; answers a clarifying question by its scope; bridges to a question."""
    user = body["messages"][-1]["content"]
    english = "Speak English" in body["messages"][0]["content"]
    if "<candidate_question>" in user:
        asked = between(user, "<candidate_question>\n", "\n</candidate_question>").rstrip("？?")
        if english:
            return f'You asked "{asked}": the question leaves that open, so state which reading you take and go on from there.'
        return f"你问的是「{asked}」——这里不限定，你先说明自己按哪一种理解，再展开回答就好。"
    if "The gap to probe" in user:
        answer = between(user, "<candidate_answer>\n", "\n</candidate_answer>")
        clause = re.split(r"[，。,；;]", answer)[0]
        gap = between(user, "The gap to probe (ask about this, and only this): ", "\n")
        if english:
            return f'You said "{clause}" — {gap}'
        return f"你刚才说「{clause}」——{gap}"
    if "Previous question:" in user:
        return "刚才那题落在优势怎么算上，下面这题顺着它再往下走一步。"
    return ""


def test_transcript_of_a_chat_interview_with_the_scripted_model(url, llm, services, tmp_path):
    client = chat(url, "frank")
    history: list[dict] = []
    lines: list[str] = []

    model = "sparring-practice"

    def turn(text: str) -> dict:
        history.append({"role": "user", "content": text})
        reply = client.chat.completions.create(model=model, messages=history)
        content = reply.choices[0].message.content
        history.append({"role": "assistant", "content": content})
        meta = reply.model_extra["sparring"]["meta"]
        phrasing = meta.get("phrasing")
        how = ""
        if phrasing:
            how = f"  \n_worded by: {phrasing['by']}" + (
                f", fallback flags: {', '.join(phrasing['flags'])}_" if phrasing["flags"] else "_"
            )
        lines.extend([f"**Candidate:** {text}", "", "**Sparring:**", "", content.strip(), how, ""])
        return meta

    compute = ("compute", scripted_interviewer)
    # The model answers the clarifying question and the first probe, then fails (HTTP 500) on the
    # second probe, then words the transition to a related question.
    llm.script(compute, compute, ("status", 500), compute)
    turn("GRPO 练习，2 道题，seed=7，grader=rubric")
    sid = history[-1]["content"].split("session=", 1)[1][:32]
    clarify = turn("你指 token 级还是序列级？")
    first_answer = "就是对同一个 prompt 采样一组回答，然后减掉一个 baseline，具体公式记不清了。"
    probe = turn(first_answer)
    failed = turn("baseline 应该是这组回答奖励的平均值吧。")
    turn("不太清楚了。")
    transition = turn("/followup")
    turn("/end")

    assert clarify["kind"] == "clarify" and clarify["phrasing"] == {"by": "llm", "flags": []}
    assert probe["next"] == "probe" and probe["phrasing"]["by"] == "llm"
    assert "你刚才说「就是对同一个 prompt 采样一组回答」" in "\n".join(lines)
    assert failed["next"] == "probe"
    assert failed["phrasing"] == {"by": "template", "flags": ["llm_error"]}
    assert transition["kind"] == "followup" and transition["phrasing"] == {"by": "llm", "flags": []}
    # Nothing the model said repeats the rubric of the questions asked.
    with client_for_state(url, "frank") as api:
        state = api.get(f"/api/sessions/{sid}").json()
        report = api.get(f"/api/sessions/{sid}/report").json()
    said = [t["text"] for t in state["turns"] if t["kind"] in ("probe", "clarify", "followup")]
    assert len(said) == 4
    for question in report["questions"]:
        entry = services.bank.get(question["entry_id"])
        for text in said:
            assert not leaks(text, secrets_of(entry), [entry.text, first_answer])

    # The same in English: the model name asks for it.
    lines.extend(["## The same in English", ""])
    history.clear()
    model = "sparring-practice-en"
    llm.script(compute, compute)
    turn("practice, 1 question, seed=7, grader=rubric, topic GRPO优势基线")
    en_clarify = turn("Do you mean token-level or sequence-level?")
    en_probe = turn(
        "I think the baseline is about sampling several answers, not sure how it is computed."
    )
    turn("/end")
    assert en_clarify["phrasing"] == {"by": "llm", "flags": []}
    assert en_probe["next"] == "probe" and en_probe["phrasing"]["by"] == "llm"
    assert 'You said "I think the baseline is about sampling several answers"' in "\n".join(lines)

    lines.insert(0, "## 中文\n")
    header = [
        "# Sparring in a chat client, with an LLM interviewer (scripted model)",
        "",
        "Generated by `tests/test_llm_interviewer.py::test_transcript_of_a_chat_interview_with_the_"
        "scripted_model`: the `openai` client talks to the real app on loopback through "
        "`/v1/chat/completions`; the interviewer LLM is the scripted OpenAI-compatible server of "
        "`tests/support/scripted_llm.py`, whose stand-in model words exactly what it was sent (it "
        "quotes the candidate's first clause from `<candidate_answer>` and asks about the gap the "
        "engine chose). Its third call is made to fail with HTTP 500, so that probe falls back to the "
        "template line, flagged. The grader is the offline rubric grader. Regenerate with "
        "`SPARRING_WRITE_TRANSCRIPT=1 .venv/bin/python -m pytest -q tests/test_llm_interviewer.py -k transcript`.",
        "",
    ]
    out = "\n".join(header + lines) + "\n"
    target = (
        Path(__file__).resolve().parents[1] / "docs" / "llm-transcript.md"
        if os.environ.get("SPARRING_WRITE_TRANSCRIPT") == "1"
        else tmp_path / "llm-transcript.md"
    )
    target.write_text(out, encoding="utf-8")


def client_for_state(url: str, user: str) -> httpx.Client:
    return httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token_for(user)}"}, timeout=60
    )


def test_the_json_api_answers_a_clarifying_question(api, llm, entry, alice):
    sid = start(api)
    llm.script(("reply", "这里问的是 baseline 的取法，按你的理解先说明假设再回答。"))
    r = api.post(f"/api/sessions/{sid}/clarify", json={"question": "你指 token 级还是序列级？"})
    assert r.status_code == 200, r.text
    assert r.json()["phrasing"] == {"by": "llm", "flags": []}
    assert_nothing_secret_was_told(llm.requests[0], entry)
    kinds = [t["kind"] for t in api.get(f"/api/sessions/{sid}").json()["turns"]]
    assert kinds[-2:] == ["ask", "clarify"] and "answer" not in kinds
    assert api.post(f"/api/sessions/{sid}/clarify", json={"question": ""}).status_code == 422
    # Offline (the session-wide app has no LLM): the template restates the question.
    offline = alice.post(
        "/api/sessions",
        json={"mode": "practice", "num_questions": 1, "topics": [TOPIC], "seed": 7},
    ).json()
    r = alice.post(f"/api/sessions/{offline['id']}/clarify", json={"question": "需要推导公式吗？"})
    assert r.status_code == 200
    assert r.json()["phrasing"] == {"by": "template", "flags": []}
    assert entry.text in r.json()["text"] and "计时还在继续" in r.json()["text"]
