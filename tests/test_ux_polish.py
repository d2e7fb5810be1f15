"""Polish from issue #15, items 8–10: start-up and shutdown of `sparring serve`, `/` sends a browser to
the UI, bank text rendered as Markdown (line breaks, code, subscripts), evidence quotes that cannot
break a card, a report table that keeps full text, interviewer lines that read as questions, and
the report's follow-up count matching the chat."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from server.config import PROJECT_ROOT
from tests.conftest import client_for, free_port

SPARRING = str(Path(sys.executable).with_name("sparring"))


# ----- 9. start-up and shell -------------------------------------------------------------------


def test_root_sends_a_browser_to_the_ui_and_unknown_api_paths_stay_json(base_url):
    r = httpx.get(f"{base_url}/", follow_redirects=False, timeout=30)
    assert r.status_code in (302, 307) and r.headers["location"] == "/ui/"
    page = httpx.get(f"{base_url}/", follow_redirects=True, timeout=60)
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    with client_for(base_url, "alice") as c:
        missing = c.get("/api/nothing-here")
    assert missing.status_code == 404 and missing.headers["content-type"].startswith(
        "application/json"
    )
    assert httpx.get(f"{base_url}/nothing-here", timeout=30).status_code == 404


def test_worker_mode_announces_once_the_health_check_answers(base_url):
    """`serve --workers N` has no hook into its worker processes: it polls /healthz instead."""
    from server.serving import announce_when_healthy, local_url

    assert local_url("0.0.0.0", 8000) == "http://127.0.0.1:8000"
    assert local_url("::", 8000) == "http://[::1]:8000"
    ready = threading.Event()
    announce_when_healthy(base_url, ready.set).join(timeout=60)
    assert ready.is_set()
    nobody = threading.Event()
    thread = announce_when_healthy(f"http://127.0.0.1:{free_port()}", nobody.set, 1.0)
    thread.join(timeout=30)
    assert not thread.is_alive() and not nobody.is_set()  # gives up, says nothing


class Output:
    """A subprocess's merged output, read on a thread, with a way to wait for a line."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_for(self, text: str, timeout: float) -> int:
        """Index of the first line containing `text`; fails after `timeout` seconds."""
        end = time.monotonic() + timeout
        with self._changed:
            while True:
                for i, line in enumerate(self.lines):
                    if text in line:
                        return i
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {text!r} in the output:\n" + "\n".join(self.lines))
                self._changed.wait(left)


@pytest.fixture()
def serve_data_dir(services, tmp_path) -> Path:
    """A data dir holding a copy of the session's ready index, so `serve` embeds nothing."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copytree(services.settings.chroma_path, data / "chroma")
    return data


def test_serve_announces_when_listening_and_ctrl_c_stops_it_with_a_tab_open(serve_data_dir):
    port = free_port()
    env = {
        **os.environ,
        "SPARRING_DATA_DIR": str(serve_data_dir),
        "SPARRING_AUTH_TOKENS": "",
        "SPARRING_LLM_MODEL": "",
        "SPARRING_SHUTDOWN_GRACE_SECONDS": "2",
        "PYTHONUNBUFFERED": "1",
        "COLUMNS": "200",
    }
    proc = subprocess.Popen(
        [SPARRING, "serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = Output(proc)
    url = f"http://127.0.0.1:{port}"
    try:
        out.wait_for("Index ready", timeout=300)
        out.wait_for("Sparring on", timeout=300)
        # The line is printed only once the socket accepts connections and the app has started:
        # the very next request is answered, with no retry.
        assert httpx.get(f"{url}/healthz", timeout=10).json() == {"status": "ok"}
        assert httpx.get(f"{url}/", timeout=30).status_code in (302, 307)
        # A browser tab holds streams open (Gradio's heartbeat and event streams); an upload still
        # in flight holds its connection the same way: uvicorn waits for both before it stops.
        with (
            socket.create_connection(("127.0.0.1", port), timeout=30) as upload,
            httpx.Client(timeout=30) as browser,
            browser.stream("GET", f"{url}/ui/gradio_api/heartbeat/tab-1") as tab,
        ):
            assert tab.status_code == 200 and "ALIVE" in next(tab.iter_text())
            upload.sendall(
                b"POST /api/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                b'application/json\r\nContent-Length: 100000\r\n\r\n{"mode": '
            )
            time.sleep(0.5)  # let the server start reading the body
            proc.send_signal(signal.SIGINT)  # Ctrl+C
            # The test's bound, not a speed claim: without a graceful-shutdown timeout the
            # process waits for these connections forever.
            code = proc.wait(timeout=90)
        out.wait_for("Sparring stopped.", timeout=10)
        assert code == 0, "\n".join(out.lines)
        assert any(line.startswith("Stopping") for line in out.lines)
        assert not any("Traceback" in line for line in out.lines), "\n".join(out.lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


# ----- 10. the report counts the follow-ups the chat showed --------------------------------------

WEAK = "我不太确定，大概和采样有关。"


def probe_turns_per_question(state: dict) -> dict[str, int]:
    """Follow-up (probe) messages the chat shows, per question label (第 N 题)."""
    counts: dict[str, int] = {}
    for turn in state["turns"]:
        if turn["role"] == "interviewer" and turn["kind"] == "probe":
            question = turn["label"].split(" · ")[0]
            counts[question] = counts.get(question, 0) + 1
    return counts


@pytest.mark.parametrize("then", ["answer", "skip", "followup", "end", "hint"])
def test_report_follow_up_count_matches_the_chat(alice, then):
    body = {"mode": "practice", "num_questions": 3, "language": "zh", "seed": 5, "topics": ["grpo"]}
    sid = alice.post("/api/sessions", json=body).json()["id"]
    first = alice.post(f"/api/sessions/{sid}/answers", json={"answer": WEAK}).json()
    assert first["next"]["kind"] == "probe"
    if then == "answer":
        for _ in range(3):
            nxt = alice.post(f"/api/sessions/{sid}/answers", json={"answer": WEAK}).json()
            if nxt["next"]["kind"] != "probe":
                break
    elif then == "hint":
        alice.post(f"/api/sessions/{sid}/hint")
        alice.post(f"/api/sessions/{sid}/answers", json={"answer": WEAK})
    else:
        alice.post(f"/api/sessions/{sid}/{then}")
    alice.post(f"/api/sessions/{sid}/end")
    state = alice.get(f"/api/sessions/{sid}").json()
    shown = probe_turns_per_question(state)
    report = alice.get(f"/api/sessions/{sid}/report").json()
    for q in report["questions"]:
        assert q["probes"] == shown.get(f"第 {q['number']} 题", 0), (then, q["number"], shown)
    md = alice.get(f"/api/sessions/{sid}/report", params={"format": "md", "lang": "zh"}).text
    for q in report["questions"]:
        count = shown.get(f"第 {q['number']} 题", 0)
        assert f"追问 {count} ·" in md.split(f"### {q['number']}. ")[1]


# ----- 8. rendering --------------------------------------------------------------------------------


def html_of(markdown: str) -> str:
    """Markdown rendered the way the UI's Markdown components read it (CommonMark + tables)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)


def bank_entry(services, entry_id: str):
    entry = services.bank.get(entry_id)
    assert entry is not None and entry.rubric is not None
    return entry


def test_reference_answers_keep_their_lines_code_and_subscripts(services):
    from server.corpus.markdown import bank_markdown

    dpo = bank_entry(services, "dpo-loss-formula-handwrite").rubric.reference_answer
    html = html_of(bank_markdown(dpo))
    # The implementation is a fenced Python block, indentation kept; the prose lines stay lines.
    assert (
        '<pre><code class="language-python">import torch.nn.functional as F\ndef dpo_loss(' in html
    )
    assert "\n    chosen_logratios = " in html
    assert html.count("<p>") >= dpo.count("\n") - 8
    assert "L<sub>DPO</sub>" in html and "_{" not in html.split("<pre>")[0]
    ppo = bank_entry(services, "ppo-core-formula-and-practice").rubric.reference_answer
    html = html_of(bank_markdown(ppo))
    assert "γV(s<sub>t+1</sub>) - V(s<sub>t</sub>)" in html and "s_{t+1}" not in html
    assert "L<sup>CLIP</sup>" in html and "<em>" not in html
    # Indented pseudo-code (DQN) and an indented torch snippet become code blocks too.
    for entry_id in ("dqn-pseudocode-td-loss", "sequence-vs-token-importance-sampling"):
        html = html_of(bank_markdown(bank_entry(services, entry_id).rubric.reference_answer))
        assert html.count("<pre><code") >= 1, entry_id


def test_bare_math_becomes_sub_and_superscripts_but_identifiers_and_latex_stay():
    from server.corpus.markdown import readable_math

    assert readable_math("A_t = Σ_l (γλ)^l δ_{t+l}") == (
        "A<sub>t</sub> = Σ<sub>l</sub> (γλ)<sup>l</sup> δ<sub>t+l</sub>"
    )
    assert readable_math("π_θ(a_t|s_t)/π_old") == (
        "π<sub>θ</sub>(a<sub>t</sub>|s<sub>t</sub>)/π<sub>old</sub>"
    )
    # snake_case names, LaTeX for KaTeX and code spans are left alone
    assert readable_math("old_logp, log_std, $V(s_{t+1})$, `r_t`") == (
        "old_logp, log_std, $V(s_{t+1})$, `r_t`"
    )


CODE_ANSWER = (
    "思路：\n```python\ndef grpo_advantages(r, g):\n    return (r - r.mean()) / r.std()\n```"
)


def card_grade(evidence: str) -> dict:
    return {
        "score": 7.5,
        "grader": "rubric",
        "flags": [],
        "key_points": [
            {"id": "a", "text": "组内归一化 A_i = (r_i - mean)/std", "covered": True,
             "evidence": evidence},
            {"id": "b", "text": "不需要 critic", "covered": False},
        ],
        "misconceptions": [],
        "tests": [],
    }  # fmt: skip


def test_a_quote_with_a_code_block_stays_inside_the_feedback_card():
    from ui.app import feedback_card

    card = feedback_card({"grade": card_grade(CODE_ANSWER), "labels": {"zh": "第 1 题"}}, "中文")
    html = html_of(card)
    # One list with both points; the code is an inline code span in the first, no block opened.
    assert "<pre>" not in html and html.count("<li>") == 2
    assert "<code>思路： def grpo_advantages(r, g): return (r - r.mean()) / r.std()</code>" in html
    assert "✗ 不需要 critic" in html
    assert "A<sub>i</sub> = (r<sub>i</sub> - mean)/std" in html
    # A quote with backticks of its own still cannot close the span early.
    tricky = feedback_card({"grade": card_grade("用 ``` 和 `x` 混在一起\n第二行")}, "中文")
    assert "<pre>" not in html_of(tricky) and html_of(tricky).count("<li>") == 2


def test_a_quote_with_a_code_block_keeps_the_markdown_report_list_whole(services):
    from datetime import UTC, datetime

    from server.interview.report import report_markdown
    from server.interview.schemas import Mode, Report, ReportQuestion

    question = ReportQuestion(
        number=1, entry_id="x", kind="question", text="GRPO 的优势 A_i 怎么算？", topic="grpo",
        area="grpo", status="done", score=7.5, grader="rubric",
        covered=[{"id": "a", "text": "组内归一化", "evidence": CODE_ANSWER}],
        missed=[{"id": "b", "text": "不需要 critic", "probe": "为什么不需要 critic？",
                 "asked": True}],
        misconceptions=[], reference_answer="第一行\n  x = 1\n第三行", time_used_seconds=3.0,
        hints=0, probes=1, flags=[],
    )  # fmt: skip
    report = Report(
        session_id="s", mode=Mode("practice"), status="ended", end_reason="manual",
        created_at=datetime.now(UTC), ended_at=datetime.now(UTC), overall_score=7.5,
        questions=[question], per_topic={"grpo": 7.5}, language="zh",
    )  # fmt: skip
    html = html_of(report_markdown(report, language="zh"))
    body, reference = html.split("<h3>")[1].split("<summary>")
    # Before: the quote's newlines and fence opened a code block that swallowed the list.
    assert "<pre>" not in body and body.count("<li>") == 2
    assert "A<sub>i</sub>" in body and "已追问：为什么不需要 critic？" in body
    assert (
        "<p>第一行</p>" in reference and "<pre><code" in reference and "<p>第三行</p>" in reference
    )


def test_the_report_table_keeps_full_text():
    from ui.app import report_table

    long_question = "为什么 GRPO 不需要价值模型？" * 8
    missed = [{"text": f"漏掉的要点 {i}：" + "组内相对优势的基线作用" * 3} for i in range(4)]
    report = {
        "overall_score": 4.0, "status": "ended", "end_reason": "manual",
        "questions": [{"number": 1, "text": long_question, "score": 4.0, "covered": [],
                       "missed": missed, "tests": []}],
    }  # fmt: skip
    table = report_table(report, "中文")
    html = html_of(table)
    # Long cells show a shortened summary ending in "…" that opens to the full text.
    question_cell, _, _, missed_cell = html.split("<td>")[2:6]
    assert question_cell.startswith("<details><summary>为什么 GRPO")
    assert "…</summary>" in question_cell and long_question in question_cell
    assert "…</summary>" in missed_cell
    assert all(m["text"] in missed_cell for m in missed)  # every missed point, in full
    short = {**report, "questions": [{**report["questions"][0], "text": "GRPO 的 A_i？"}]}
    assert "| GRPO 的 A<sub>i</sub>？ |" in report_table(short, "中文")  # short text: as is


def test_the_markdown_report_renders_bank_text_and_marks_which_probes_were_asked(alice):
    sid = None
    for seed in range(12):  # the topic has two entries: find the one with the code reference
        body = {"mode": "practice", "num_questions": 1, "language": "zh", "seed": seed,
                "topics": ["DPO损失函数推导"]}  # fmt: skip
        created = alice.post("/api/sessions", json=body).json()
        if created["question"]["entry_id"] == "dpo-loss-formula-handwrite":
            sid = created["id"]
            break
        alice.post(f"/api/sessions/{created['id']}/end")
    assert sid, "no seed picked dpo-loss-formula-handwrite"
    answer = "DPO 的损失是 -log σ(β(log π_θ/π_ref 的差))，不需要奖励模型。\n" + CODE_ANSWER
    first = alice.post(f"/api/sessions/{sid}/answers", json={"answer": answer}).json()
    alice.post(f"/api/sessions/{sid}/end")
    report = alice.get(f"/api/sessions/{sid}/report").json()
    md = alice.get(f"/api/sessions/{sid}/report", params={"format": "md", "lang": "zh"}).text
    html = html_of(md)
    reference = html.split("<summary>参考答案</summary>")[1]
    assert '<pre><code class="language-python">import torch.nn.functional as F' in reference
    assert "L<sub>DPO</sub>" in reference
    # Every key point is one list item, whatever its evidence holds.
    q = report["questions"][0]
    points = len(q["covered"]) + len(q["missed"])
    assert html.split("<h3>")[1].count("<li>") >= points
    # The rubric's probe questions are marked: asked as a follow-up, or only for review.
    probed = first["next"]["kind"] == "probe"
    asked = [m for m in q["missed"] if m["asked"]]
    assert len(asked) <= q["probes"] == (1 if probed else 0)
    assert md.count("已追问：") == len(asked)
    assert md.count("复习时想想：") == len(q["missed"]) - len(asked)


# ----- 10. interviewer lines ----------------------------------------------------------------------


def test_a_related_question_does_not_repeat_what_was_just_asked():
    from server.interview.phrasing import asked_once, unasked_part

    before = "GRPO与PPO在RLHF中的核心区别、优化思想、奖励迁移、优势计算。"
    after = "PPO、DPO、GRPO、DAPO的改进与区别？PPO和GRPO的核心区别？Value是什么？"
    assert unasked_part(after, before) == "PPO、DPO、GRPO、DAPO的改进与区别？Value是什么？"
    assert unasked_part("What is PPO? What is GRPO's baseline?", "What is PPO?") == (
        "What is GRPO's baseline?"
    )
    assert unasked_part("PPO和GRPO的核心区别？", "PPO和GRPO的核心区别？") == "PPO和GRPO的核心区别？"
    assert asked_once("介绍DPO、PPO算法。变体：1. 介绍DPO。2. 介绍PPO。") == "介绍DPO、PPO算法。"


def test_interviewer_lines_read_as_questions_over_http(alice, services):
    body = {"mode": "practice", "num_questions": 3, "language": "zh", "seed": 2, "topics": ["grpo"]}
    sid = alice.post("/api/sessions", json=body).json()["id"]
    first = alice.get(f"/api/sessions/{sid}").json()
    previous = services.bank.get(first["current"]["entry_id"])
    step = alice.post(f"/api/sessions/{sid}/followup").json()
    assert step["kind"] == "followup"
    line = step["prompt"]
    # A lead-in that says how it relates, no '变体' list, no sentence of the previous question.
    leads = ("我们往深一层，问一道相关的题", "回到它背后的基础，问一道相关的题",
             "换个角度，问一道相关的对比题", "再问一个相关的问题", "我们换一道相关的题")  # fmt: skip
    assert line.startswith(leads), line
    assert "变体" not in line
    for sentence in [s for s in previous.text.replace("？", "？\n").splitlines() if len(s) > 8]:
        assert sentence not in line, sentence
