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
    assert "总分" in replies[-1] and f"/ui/?session={sid}" in replies[-1]
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
    # The way out is said: back to the original branch, or a new chat.
    assert "original branch" in err.value.message and "new chat" in err.value.message
    with client_for(base_url, "carol") as c:
        raw = c.post(
            "/v1/chat/completions", json={"model": "sparring-practice", "messages": edited}
        )
    assert raw.status_code == 409 and "original branch" in raw.json()["error"]["message"]


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


# ---------- issue 24: size limits and hostile input ----------


def test_the_seed_payload_is_refused_at_once_and_a_long_opening_still_works(base_url):
    """ "seed" + 24,000 spaces once froze the server (a backtracking regex): now it is over the
    answer limit (413, OpenAI's shape), and the longest accepted opening starts an interview."""
    payload = {"role": "user", "content": "seed" + " " * 24000 + "x"}
    with client_for(base_url, "dave") as c:
        r = c.post(
            "/v1/chat/completions", json={"model": "sparring-practice", "messages": [payload]}
        )
        assert r.status_code == 413, r.text
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error" and error["code"] == "answer_too_long"
        assert error["param"] == "messages[0].content"
        longest = "seed" + " " * 7990 + "=7"
        r = c.post(
            "/v1/chat/completions",
            json={"model": "sparring-practice", "messages": [{"role": "user", "content": longest}]},
        )
        assert r.status_code == 200, r.text
        assert c.get("/healthz").status_code == 200


def test_every_user_message_and_the_joined_answer_are_size_checked(oai, base_url):
    history: list[dict] = []
    first = say(oai, history, START)
    sid, _ = marker_of(first)
    turns = session_state(base_url, "carol", sid)["turns"]
    # Two messages after the marker are one answer: together over the limit.
    half = "策略梯度" * 1100  # 4400 characters each, 8801 joined
    too_long = [*history, {"role": "user", "content": half}, {"role": "user", "content": half}]
    with pytest.raises(openai.APIStatusError) as err:
        oai.chat.completions.create(model="sparring-practice", messages=too_long)
    assert err.value.status_code == 413
    assert err.value.body["code"] == "answer_too_long" and err.value.body["param"] == "messages"
    # An over-long message anywhere in the history (here the opening one) is refused too.
    edited = [{"role": "user", "content": START + " " + "x" * 8000}, *history[1:]]
    edited.append({"role": "user", "content": WEAK})
    with pytest.raises(openai.APIStatusError) as err:
        oai.chat.completions.create(model="sparring-practice", messages=edited)
    assert err.value.status_code == 413 and err.value.body["param"] == "messages[0].content"
    assert session_state(base_url, "carol", sid)["turns"] == turns  # nothing recorded


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
        (
            b'{"model":"sparring-practice","stream":' + b"7" * 5000 + b',"messages":[]}',
            "not valid JSON",
        ),
        (b'{"model":"sparring-practice","stream":"yes","messages":[]}', "stream"),
        (b'{"model":"sparring-practice","stream":1,"messages":[]}', "stream"),
        (b"[]", "JSON object"),
    ],
    ids=["nested", "5000-digit-stream", "string-stream", "int-stream", "not-an-object"],
)
def test_hostile_bodies_get_a_clear_400(base_url, content, needle):
    with client_for(base_url, "dave") as c:
        r = c.post(
            "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
        )
    assert r.status_code == 400, r.text[:300]
    error = r.json()["error"]
    assert needle in error["message"] and error["type"] == "invalid_request_error"


@pytest.mark.parametrize("turn", ["100000000000000000000", "9" * 5000])
def test_a_marker_with_an_impossible_turn_is_a_400(oai, base_url, turn):
    history: list[dict] = []
    first = say(oai, history, START)
    sid, _ = marker_of(first)
    forged = first.replace(" turn=0", f" turn={turn}")
    messages = [
        history[0],
        {"role": "assistant", "content": forged},
        {"role": "user", "content": WEAK},
    ]
    with client_for(base_url, "carol") as c:
        r = c.post(
            "/v1/chat/completions", json={"model": "sparring-practice", "messages": messages}
        )
    assert r.status_code == 400, r.text[:300]
    assert r.json()["error"]["code"] == "invalid_marker"
    assert not any(t["kind"] == "answer" for t in session_state(base_url, "carol", sid)["turns"])


# ---------- issue 28: usage, errors, models, options, presentation ----------


def test_usage_is_counted_with_tiktoken(oai):
    from server.api.token_count import count, encoding

    assert encoding() is not None and encoding().name == "o200k_base"  # loaded offline
    messages = [{"role": "user", "content": START}]
    reply = oai.chat.completions.create(model="sparring-practice", messages=messages)
    usage = reply.usage
    assert usage.completion_tokens == count(reply.choices[0].message.content)
    assert usage.prompt_tokens == 3 + 3 + count("user") + count(START)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_stream_options_include_usage(oai, base_url):
    """The `llm` CLI always asks for usage when it streams: a last chunk with no choices."""
    stream = oai.chat.completions.create(
        model="sparring-practice",
        messages=[{"role": "user", "content": START}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0
    assert chunks[-1].usage.prompt_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-2].choices[0].finish_reason == "stop"
    # Raw: the usage chunk comes right before [DONE]; without the option there is none.
    body = {
        "model": "sparring-practice",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": START}],
    }
    with client_for(base_url, "dave") as c:
        events = [e for e in c.post("/v1/chat/completions", json=body).text.split("\n\n") if e]
        assert events[-1] == "data: [DONE]"
        last = json.loads(events[-2][len("data: ") :])
        assert last["choices"] == [] and last["usage"]["total_tokens"] > 0
        body.pop("stream_options")
        events = [e for e in c.post("/v1/chat/completions", json=body).text.split("\n\n") if e]
        assert all("usage" not in json.loads(e[6:]) for e in events[:-1])


def test_errors_carry_type_and_param(base_url):
    bad = httpx.post(
        f"{base_url}/v1/chat/completions",
        json={"model": "sparring-practice", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": "Bearer not-a-real-token-xxxx"},
        timeout=30,
    )
    assert bad.status_code == 401
    assert bad.json()["error"]["type"] == "authentication_error" and "param" in bad.json()["error"]
    with client_for(base_url, "dave") as c:
        big = c.post(
            "/v1/chat/completions",
            content=b'{"model":"x","messages":[],"pad":"' + b"x" * 1_100_000 + b'"}',
            headers={"content-type": "application/json"},
        )
        assert big.status_code == 413
        assert (
            big.json()["error"]["type"] == "invalid_request_error"
            and "param" in big.json()["error"]
        )
        unknown = c.post(
            "/v1/chat/completions",
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert unknown.status_code == 404 and unknown.json()["error"]["param"] == "model"
        nowhere = c.get("/v1/responses")
        assert nowhere.status_code == 404 and nowhere.json()["error"]["type"]


def test_a_model_is_retrieved(oai):
    model = oai.models.retrieve("sparring-interview")
    assert model.id == "sparring-interview" and model.object == "model"
    assert oai.models.retrieve("sparring-practice-en-grpo").id == "sparring-practice-en-grpo"
    with pytest.raises(openai.NotFoundError) as err:
        oai.models.retrieve("gpt-4o")
    assert err.value.body["code"] == "model_not_found" and err.value.body["param"] == "model"


@pytest.mark.parametrize(
    ("options", "param", "why"),
    [
        ({"n": 2}, "n", "one choice"),
        (
            {"tool_choice": "required", "tools": [{"type": "function", "function": {"name": "f"}}]},
            "tool_choice",
            "never calls tools",
        ),
        (
            {
                "tool_choice": {"type": "function", "function": {"name": "f"}},
                "tools": [{"type": "function", "function": {"name": "f"}}],
            },
            "tool_choice",
            "never calls tools",
        ),
        ({"response_format": {"type": "json_object"}}, "response_format", "plain text"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {}},
                }
            },
            "response_format",
            "plain text",
        ),
        ({"logprobs": True}, "logprobs", "not sampled"),
    ],
    ids=["n", "tool-required", "tool-named", "json-object", "json-schema", "logprobs"],
)
def test_what_cannot_be_honoured_is_refused_with_the_reason(oai, base_url, options, param, why):
    messages = [{"role": "user", "content": START}]
    with client_for(base_url, "carol") as c:
        before = len(c.get("/api/progress").json()["sessions"])
    with pytest.raises(openai.BadRequestError) as err:
        oai.chat.completions.create(model="sparring-practice", messages=messages, **options)
    assert err.value.body["param"] == param and why in err.value.body["message"]
    with client_for(base_url, "carol") as c:
        assert len(c.get("/api/progress").json()["sessions"]) == before  # nothing started
        raw = c.post(
            "/v1/chat/completions",
            json={"model": "sparring-practice", "messages": messages, **options},
        )
    assert raw.status_code == 400 and raw.json()["error"]["type"] == "invalid_request_error"
    # What can be honoured is accepted: n=1, tool_choice auto/none, response_format text.
    ok = oai.chat.completions.create(
        model="sparring-practice",
        messages=[{"role": "user", "content": "/help"}],
        n=1,
        tool_choice="none",
        tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}],
        response_format={"type": "text"},
    )
    assert ok.choices[0].finish_reason == "stop"


def test_max_tokens_is_honoured(oai, base_url):
    from server.api.token_count import count

    history: list[dict] = []
    full = say(oai, history, START)
    # seed=7: every new interview opens with the same text, so a cut reply is a prefix of it.
    cut = oai.chat.completions.create(model="sparring-practice", messages=history[:1], max_tokens=5)
    text = cut.choices[0].message.content
    assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 5
    assert count(text) <= 5 and full.startswith(text)
    newer = oai.chat.completions.create(
        model="sparring-practice", messages=history[:1], max_completion_tokens=3, stream=True
    )
    chunks = list(newer)
    assert chunks[-1].choices[0].finish_reason == "length"
    # A limit the reply fits in changes nothing.
    whole = oai.chat.completions.create(
        model="sparring-practice", messages=history[:1], max_tokens=4000
    )
    assert whole.choices[0].finish_reason == "stop"
    assert MARKER_RE.search(whole.choices[0].message.content)
    with client_for(base_url, "carol") as c:
        raw = c.post(
            "/v1/chat/completions",
            json={"model": "sparring-practice", "messages": history[:1], "max_tokens": 5},
        ).json()
    assert raw["choices"][0]["finish_reason"] == "length" and raw["usage"]["completion_tokens"] == 5
    # `stream` is a boolean for the SDK too (extra_body sends what the type hints would refuse).
    with pytest.raises(openai.BadRequestError) as err:
        oai.chat.completions.create(
            model="sparring-practice", messages=history[:1], extra_body={"stream": "yes"}
        )
    assert err.value.body["param"] == "stream"


def test_the_end_report_reads_well_in_a_chat(oai, base_url):
    history: list[dict] = []
    say(
        oai,
        history,
        "start a GRPO interview in English, 2 questions, seed=7",
        "sparring-practice-en",
    )
    ended = say(oai, history, "/end", "sparring-practice-en")
    sid, _ = marker_of(ended)
    lines = ended.splitlines()
    items = [line for line in lines if re.match(r"^\d+\. \[", line)]
    assert items and not any(line.startswith(("- ", "• ")) for line in lines)
    # The report's address is a line (and paragraph) of its own, an absolute link to the UI.
    url = f"{base_url}/ui/?session={sid}&lang=en"
    at = lines.index(url)
    assert lines[at - 1] == "" and lines[at + 1] == ""
    # The same reply over raw HTTP (a resend replays it), link and all.
    with client_for(base_url, "carol") as c:
        raw = c.post(
            "/v1/chat/completions", json={"model": "sparring-practice-en", "messages": history[:-1]}
        ).json()
    assert url in raw["choices"][0]["message"]["content"].splitlines()
    for item in items:
        text = item.split(" — ", 1)[1]
        assert len(text) <= 61
        if text.endswith("…"):
            assert text[-2] != " "


def test_question_texts_are_cut_at_a_word():
    from server.interview.chat import shorten

    text = "Explain how the clipped surrogate objective keeps the new policy close to the old one"
    short = shorten(text, 60)
    assert short.endswith("…") and len(short) <= 61 and text.startswith(short[:-1])
    assert text[len(short) - 1] == " "  # the cut fell between two words
    assert shorten("短题目", 60) == "短题目"
    assert shorten("长" * 80, 60) == "长" * 60 + "…"
