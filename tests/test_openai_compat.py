"""Whole mock interviews through the OpenAI-compatible endpoint, driven by the real `openai` client
against the real app on loopback (no LLM configured: rubric grader and template lines)."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from server.interview.chat import MARKER_RE
from tests.conftest import client_for, token_for

WEAK = "我不太确定，大概和采样有关。"
START = "开始练习，GRPO 方向，2 道题，seed=7"


@pytest.fixture()
def oai(base_url) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key=token_for("carol"), max_retries=0)


def marker_of(text: str) -> tuple[str, int]:
    found = MARKER_RE.findall(text)
    assert found, f"no session marker in {text!r}"
    sid, seq = found[-1]
    return sid, int(seq)


def say(client: openai.OpenAI, history: list[dict], text: str, model="sparring-practice") -> str:
    history.append({"role": "user", "content": text})
    reply = client.chat.completions.create(model=model, messages=history)
    content = reply.choices[0].message.content
    assert reply.object == "chat.completion" and reply.choices[0].finish_reason == "stop"
    history.append({"role": "assistant", "content": content})
    return content


def say_streamed(client: openai.OpenAI, history: list[dict], text: str) -> str:
    history.append({"role": "user", "content": text})
    stream = client.chat.completions.create(
        model="sparring-interview", messages=history, stream=True
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    history.append({"role": "assistant", "content": content})
    return content


def session_state(base_url: str, user: str, sid: str) -> dict:
    with client_for(base_url, user) as c:
        r = c.get(f"/api/sessions/{sid}")
        assert r.status_code == 200, r.text
        return r.json()


def test_models_are_listed(oai):
    ids = [m.id for m in oai.models.list().data]
    assert {"sparring-interview", "sparring-interview-en", "sparring-practice"} <= set(ids)
    assert "sparring-interview-grpo" in ids


def test_a_whole_interview_plain(oai, base_url):
    history: list[dict] = []
    first = say(oai, history, START)
    sid, seq = marker_of(first)
    assert seq == 0 and "第 1 题" in first and "练习" in first
    replies = []
    for _ in range(12):
        reply = say(oai, history, WEAK)
        replies.append(reply)
        assert marker_of(reply) == (sid, len(replies))
        if "总分" in reply:
            break
    assert "总分" in replies[-1] and "/api/sessions/" in replies[-1]
    assert all("上一答得分" in r for r in replies)
    assert any("追问一下" in r for r in replies)  # weak answers are probed
    # While probing, the reply names no missed point (it would give the probe away).
    probing = next(r for r in replies if "追问一下" in r)
    assert "遗漏" not in probing
    state = session_state(base_url, "carol", sid)
    assert state["status"] == "ended" and state["end_reason"] == "done"
    assert sum(t["kind"] == "answer" for t in state["turns"]) == len(replies)
    # After the end every message gets the summary, and nothing is recorded.
    after = say(oai, history, "还能再答吗")
    assert "总分" in after
    assert len(session_state(base_url, "carol", sid)["turns"]) == len(state["turns"])


def test_a_whole_interview_streamed(oai, base_url):
    history: list[dict] = []
    first = say_streamed(oai, history, "来一场 GRPO 面试，1 道题，20 分钟，seed=7")
    sid, _ = marker_of(first)
    assert "限时 20 分钟" in first and "剩余" in first
    for _ in range(6):
        reply = say_streamed(oai, history, WEAK)
        if "总分" in reply:
            break
    assert "总分" in reply
    state = session_state(base_url, "carol", sid)
    assert state["status"] == "ended" and state["mode"] == "interview"


def test_stream_wire_format(base_url):
    """The raw SSE lines, as OpenAI sends them: `data: {...}` events and `data: [DONE]`."""
    body = {
        "model": "sparring-practice",
        "stream": True,
        "messages": [{"role": "user", "content": START}],
    }
    with client_for(base_url, "dave") as c:
        r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = [e for e in r.text.split("\n\n") if e]
    assert all(e.startswith("data: ") for e in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(e[len("data: ") :]) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert MARKER_RE.search(text)


def test_commands(oai, base_url):
    history: list[dict] = []
    say(oai, history, START)
    help_text = say(oai, history, "/help")
    assert "/hint" in help_text and "/skip" in help_text
    hint = say(oai, history, "/hint")
    assert "提示" in hint and "得分上限 7.5" in hint
    skipped = say(oai, history, "/skip")
    assert "跳过" in skipped and "第 2 题" in skipped
    followup = say(oai, history, "/followup")
    assert "相关" in followup
    unknown = say(oai, history, "/dance")
    assert "未知命令" in unknown
    ended = say(oai, history, "/end")
    assert "总分" in ended
    sid, _ = marker_of(ended)
    state = session_state(base_url, "carol", sid)
    assert state["status"] == "ended" and state["end_reason"] == "manual"
    kinds = [t["kind"] for t in state["turns"]]
    assert "hint" in kinds and "skip" in kinds and "followup" in kinds
    assert "answer" not in kinds  # commands are not answers


def test_a_clarifying_question_is_answered_not_graded(oai, base_url):
    history: list[dict] = []
    first = say(oai, history, START)
    sid, _ = marker_of(first)
    reply = say(oai, history, "你指 token 级还是序列级？")
    assert "题目问的是" in reply and "计时还在继续" in reply
    assert "上一答得分" not in reply
    state = session_state(base_url, "carol", sid)
    assert [t["kind"] for t in state["turns"]][-2:] == ["ask", "clarify"]
    assert not any(t["kind"] == "answer" for t in state["turns"])
    # /ask forces a clarification even without a question mark.
    forced = say(oai, history, "/ask 可以只讲思路不写公式")
    assert "题目问的是" in forced


def test_resending_history_continues_and_never_grades_twice(oai, base_url):
    history: list[dict] = []
    say(oai, history, START)
    first_answer = say(oai, history, WEAK)
    sid, seq = marker_of(first_answer)
    answers_before = sum(
        t["kind"] == "answer" for t in session_state(base_url, "carol", sid)["turns"]
    )
    # A client retrying (or "regenerate"): the same history up to the last user message.
    again = oai.chat.completions.create(model="sparring-practice", messages=history[:-1])
    assert again.choices[0].message.content == first_answer
    assert again.model_extra["sparring"]["replayed"] is True
    # A client that sends only the last few messages of a long chat.
    tail = oai.chat.completions.create(model="sparring-practice", messages=history[-3:-1])
    assert tail.choices[0].message.content == first_answer
    turns = session_state(base_url, "carol", sid)["turns"]
    assert sum(t["kind"] == "answer" for t in turns) == answers_before
    # The conversation goes on from where it was.
    nxt = say(oai, history, WEAK)
    assert marker_of(nxt) == (sid, seq + 1)
    # Editing an earlier answer is refused: the interview has moved on.
    edited = [*history[:2], {"role": "user", "content": "换一个回答"}]
    with pytest.raises(openai.ConflictError) as err:
        oai.chat.completions.create(model="sparring-practice", messages=edited)
    assert err.value.body["code"] == "conflict"


def test_english_from_the_model_name(oai):
    history: list[dict] = []
    first = say(oai, history, "start, seed=7", model="sparring-interview-en")
    assert "Question 1" in first and "left" in first
    reply = say(
        oai, history, "I am not sure, something about sampling.", model="sparring-interview-en"
    )
    assert "Last answer:" in reply


def test_another_users_session_is_not_found(oai, base_url):
    history: list[dict] = []
    say(oai, history, START)
    history.append({"role": "user", "content": WEAK})
    other = openai.OpenAI(base_url=f"{base_url}/v1", api_key=token_for("erin"), max_retries=0)
    with pytest.raises(openai.NotFoundError):
        other.chat.completions.create(model="sparring-practice", messages=history)


def test_a_wrong_api_key_is_refused(base_url):
    bad = openai.OpenAI(base_url=f"{base_url}/v1", api_key="not-a-real-token-xxxx", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(
            model="sparring-practice", messages=[{"role": "user", "content": START}]
        )
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({"model": "sparring-practice", "messages": []}, 400, "invalid_request"),
        ({"messages": [{"role": "user", "content": "hi"}]}, 400, "invalid_request"),
        (
            {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
            404,
            "model_not_found",
        ),
        (
            {"model": "sparring-practice", "messages": [{"role": "assistant", "content": "hi"}]},
            400,
            "invalid_request",
        ),
        (
            {"model": "sparring-practice", "messages": [{"role": "wizard", "content": "x"}]},
            400,
            "invalid_request",
        ),
    ],
)
def test_bad_requests_get_openai_style_errors(base_url, body, status, code):
    with client_for(base_url, "dave") as c:
        r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code and error["message"] and error["type"] == "invalid_request_error"


def test_a_body_that_is_not_json(base_url):
    with client_for(base_url, "dave") as c:
        r = c.post(
            "/v1/chat/completions",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"


def test_the_openai_client_raises_bad_request(oai):
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model="sparring-practice", messages=[])
    with pytest.raises(openai.NotFoundError):
        oai.chat.completions.create(
            model="sparring-nonsense", messages=[{"role": "user", "content": "hi"}]
        )


def test_content_parts_are_read_as_text(base_url):
    body = {
        "model": "sparring-practice",
        "messages": [{"role": "user", "content": [{"type": "text", "text": START}]}],
    }
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token_for('dave')}"}, timeout=60
    ) as c:
        r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert re.search(r"第 1 题", r.json()["choices"][0]["message"]["content"])


def test_a_chat_clients_background_task_starts_no_interview(oai, base_url):
    """Open WebUI asks the same model for a title/tags ("### Task: ..."): answered, no session."""
    with client_for(base_url, "carol") as c:
        before = len(c.get("/api/progress").json()["sessions"])
    task = "### Task:\nGenerate a concise, 3-5 word title summarizing the chat history.\n..."
    reply = oai.chat.completions.create(
        model="sparring-interview", messages=[{"role": "user", "content": task}]
    )
    assert json.loads(reply.choices[0].message.content)["title"]
    assert not MARKER_RE.search(reply.choices[0].message.content)
    with client_for(base_url, "carol") as c:
        assert len(c.get("/api/progress").json()["sessions"]) == before
    # Sent after an interview's history, it is still not an answer.
    history: list[dict] = []
    say(oai, history, START)
    sid, _ = marker_of(history[-1]["content"])
    turns_before = session_state(base_url, "carol", sid)["turns"]
    reply = oai.chat.completions.create(
        model="sparring-practice", messages=[*history, {"role": "user", "content": task}]
    )
    assert json.loads(reply.choices[0].message.content)["title"]
    assert session_state(base_url, "carol", sid)["turns"] == turns_before


def test_twin_requests_are_answered_once(oai, base_url):
    """A client that sends the same message twice at once: one grading, the same reply twice."""
    history: list[dict] = []
    first = say(oai, history, START)
    sid, _ = marker_of(first)
    history.append({"role": "user", "content": WEAK})

    def send() -> str:
        reply = oai.chat.completions.create(model="sparring-practice", messages=history)
        return reply.choices[0].message.content

    with ThreadPoolExecutor(max_workers=2) as pool:
        replies = list(pool.map(lambda _: send(), range(2)))
    assert replies[0] == replies[1]
    answers = [t for t in session_state(base_url, "carol", sid)["turns"] if t["kind"] == "answer"]
    assert len(answers) == 1
