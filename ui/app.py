"""The Gradio UI: a thin client of the HTTP API (setup, interview, report, history screens).

It holds no interview logic; it renders what the server returns. Point it at any server URL."""

from __future__ import annotations

import os
import tempfile
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr
import pandas as pd

from ui.api_client import ApiError, SparringClient, mm_ss, seconds_left

LATEX = [
    {"left": "$$", "right": "$$", "display": True},
    {"left": "$", "right": "$", "display": False},
    {"left": "\\(", "right": "\\)", "display": False},
    {"left": "\\[", "right": "\\]", "display": True},
]

# Ctrl+Enter (Cmd+Enter) in the answer box submits.
HEAD = """
<script>
document.addEventListener('keydown', function (e) {
  if ((e.ctrlKey || e.metaKey) && e.key === 'Enter' && e.target.closest('#answer-box')) {
    e.preventDefault();
    const b = document.querySelector('#submit-btn');
    if (b) b.click();
  }
});
</script>
"""

T = {
    "zh": {
        "title": "# Sparring · RL / 后训练模拟面试",
        "setup": "设置",
        "interview": "面试",
        "report": "报告",
        "history": "历史",
        "mode": "模式",
        "companies": "公司",
        "topics": "主题",
        "difficulty": "难度",
        "duration": "时长（分钟）",
        "questions": "题目数",
        "language": "面试官语言",
        "grader": "评分器",
        "start": "开始面试",
        "answer": "你的回答（Ctrl+Enter 提交）",
        "submit": "提交回答",
        "followup": "追问一个",
        "hint": "提示",
        "skip": "跳过",
        "end": "结束面试",
        "reference": "参考答案",
        "download": "下载 Markdown 报告",
        "refresh": "刷新历史",
        "untimed": "不计时",
        "left": "剩余",
        "time_up": "时间到",
        "score": "得分",
        "tests": "隐藏测试通过",
        "no_session": "还没有进行中的面试，请在“设置”页开始。",
        "llm_yes": "已配置 LLM：{model}",
        "llm_no": "未配置 LLM，使用离线评分标准（rubric）",
    },
    "en": {
        "title": "# Sparring · RL / post-training mock interviews",
        "setup": "Setup",
        "interview": "Interview",
        "report": "Report",
        "history": "History",
        "mode": "Mode",
        "companies": "Companies",
        "topics": "Topics",
        "difficulty": "Difficulty",
        "duration": "Duration (minutes)",
        "questions": "Questions",
        "language": "Interviewer language",
        "grader": "Grader",
        "start": "Start interview",
        "answer": "Your answer (Ctrl+Enter submits)",
        "submit": "Submit answer",
        "followup": "Ask me a follow-up",
        "hint": "Hint",
        "skip": "Skip",
        "end": "End interview",
        "reference": "Reference answer",
        "download": "Download Markdown report",
        "refresh": "Refresh history",
        "untimed": "untimed",
        "left": "left",
        "time_up": "time is up",
        "score": "Score",
        "tests": "Hidden tests passed",
        "no_session": "No interview is running; start one on the Setup screen.",
        "llm_yes": "LLM configured: {model}",
        "llm_no": "No LLM configured: the offline rubric grader is used",
    },
}


def _lang(ui_lang: str) -> dict[str, str]:
    return T["en" if ui_lang == "English" else "zh"]


def countdown_text(deadline: str | None, ui_lang: str) -> str:
    t = _lang(ui_lang)
    if not deadline:
        return f"⏱ {t['untimed']}"
    left = seconds_left(deadline)
    if left <= 0:
        return f"⏱ **{t['time_up']}**"
    return f"⏱ **{mm_ss(left)}** {t['left']}"


def chat_from_state(state: dict) -> list[dict[str, str]]:
    messages = []
    for turn in state["turns"]:
        if turn["role"] == "interviewer":
            messages.append({"role": "assistant", "content": turn["text"]})
        elif turn["kind"] == "skip":
            messages.append({"role": "user", "content": "(skip)"})
        else:
            late = " ⏰" if turn["late"] else ""
            messages.append({"role": "user", "content": turn["text"] + late})
    return messages


def feedback_card(grade: dict, ui_lang: str) -> str:
    t = _lang(ui_lang)
    lines = [f"### {t['score']}: {grade['score']} / 10 · `{grade['grader']}`"]
    if grade.get("flags"):
        lines.append("flags: " + ", ".join(f"`{f}`" for f in grade["flags"]))
    lines.append("")
    for kp in grade["key_points"]:
        text = kp["text_en"] if ui_lang == "English" and kp.get("text_en") else kp["text"]
        if kp["covered"]:
            lines.append(f"- ✓ {text}" + (f" — “{kp['evidence']}”" if kp.get("evidence") else ""))
        else:
            lines.append(f"- ✗ {text}")
    for m in grade.get("misconceptions", []):
        lines.append(f"- ⚠ {m['text']} → {m['correction']}")
    tests = grade.get("tests", [])
    if tests:
        passed = sum(t["passed"] for t in tests)
        lines += ["", f"**{t['tests']}: {passed}/{len(tests)}**"]
        for test in tests:
            why = "" if test["passed"] else f" — `{test['message']}`"
            lines.append(f"- {'✓' if test['passed'] else '✗'} {test['explain']}{why}")
    return "\n".join(lines)


def report_table(report: dict) -> str:
    lines = [
        f"**Overall {report['overall_score']} / 10** · {report['status']}"
        + (f" ({report['end_reason']})" if report.get("end_reason") else ""),
        "",
        "| # | question | score | covered | missed |",
        "|---|---|---|---|---|",
    ]
    for q in report["questions"]:
        missed = "; ".join(m["text"][:30] for m in q["missed"][:3])
        lines.append(
            f"| {q['number']} | {q['text'][:60]} | {q['score']} | {len(q['covered'])} | {missed} |"
        )
    return "\n".join(lines)


def build_ui(api_url: str, token: str = "") -> gr.Blocks:
    def client() -> SparringClient:
        return SparringClient(api_url, token)

    def safe_info() -> dict[str, Any]:
        try:
            c = client()
            try:
                return c.server_info()
            finally:
                c.close()
        except ApiError:
            return {
                "areas": [],
                "topics": [],
                "companies": [],
                "llm_configured": False,
                "llm_model": None,
            }

    with gr.Blocks(title="Sparring") as demo:
        store = gr.BrowserState({"sid": None}, storage_key="sparring-session")
        sid = gr.State(None)
        deadline = gr.State(None)
        title = gr.Markdown(T["zh"]["title"])
        ui_lang = gr.Radio(
            ["中文", "English"], value="中文", label="界面 / Interface", elem_id="ui-lang"
        )
        error = gr.Markdown(elem_id="error-box")
        with gr.Tabs(selected="setup") as tabs:
            with gr.Tab(T["zh"]["setup"], id="setup") as tab_setup:
                mode = gr.Radio(
                    ["interview", "practice", "review"], value="interview", label=T["zh"]["mode"]
                )
                companies = gr.Dropdown([], multiselect=True, label=T["zh"]["companies"])
                topics = gr.Dropdown([], multiselect=True, label=T["zh"]["topics"])
                difficulty = gr.CheckboxGroup([1, 2, 3], label=T["zh"]["difficulty"])
                with gr.Row():
                    duration = gr.Slider(5, 120, value=30, step=5, label=T["zh"]["duration"])
                    num_questions = gr.Slider(
                        1, 20, value=5, step=1, label=T["zh"]["questions"], elem_id="num-questions"
                    )
                language = gr.Radio(
                    ["zh", "en"],
                    value="zh",
                    label=T["zh"]["language"],
                    elem_id="interviewer-language",
                )
                grader = gr.Radio(["auto", "rubric", "llm"], value="auto", label=T["zh"]["grader"])
                llm_note = gr.Markdown()
                start_btn = gr.Button(T["zh"]["start"], variant="primary", elem_id="start-btn")
            with gr.Tab(T["zh"]["interview"], id="interview") as tab_interview:
                clock = gr.Markdown(elem_id="countdown")
                chat = gr.Chatbot(height=420, latex_delimiters=LATEX, elem_id="chat")
                answer = gr.Textbox(lines=5, label=T["zh"]["answer"], elem_id="answer-box")
                with gr.Row():
                    submit_btn = gr.Button(
                        T["zh"]["submit"], variant="primary", elem_id="submit-btn"
                    )
                    followup_btn = gr.Button(T["zh"]["followup"], elem_id="followup-btn")
                    hint_btn = gr.Button(T["zh"]["hint"], elem_id="hint-btn")
                    skip_btn = gr.Button(T["zh"]["skip"], elem_id="skip-btn")
                    end_btn = gr.Button(T["zh"]["end"], variant="stop", elem_id="end-btn")
                feedback = gr.Markdown(latex_delimiters=LATEX, elem_id="feedback")
                with gr.Accordion(T["zh"]["reference"], open=False) as ref_box:
                    reference = gr.Markdown(latex_delimiters=LATEX, elem_id="reference")
            with gr.Tab(T["zh"]["report"], id="report") as tab_report:
                report_md = gr.Markdown(latex_delimiters=LATEX, elem_id="report-table")
                topic_chart = gr.BarPlot(x="topic", y="score", y_lim=[0, 10], elem_id="topic-chart")
                download = gr.DownloadButton(T["zh"]["download"], elem_id="download-btn")
            with gr.Tab(T["zh"]["history"], id="history") as tab_history:
                refresh_btn = gr.Button(T["zh"]["refresh"], elem_id="refresh-btn")
                sessions_df = gr.Dataframe(elem_id="sessions")
                mastery_chart = gr.LinePlot(
                    x="at", y="score", color="area", y_lim=[0, 10], elem_id="mastery"
                )
                queue_df = gr.Dataframe(elem_id="review-queue")
        timer = gr.Timer(1.0)

        # ----- handlers (sync: each runs in a worker thread and calls the API over HTTP) -----

        def on_load(saved: dict | None, lang: str):
            info = safe_info()
            t = _lang(lang)
            note = (
                t["llm_yes"].format(model=info.get("llm_model"))
                if info.get("llm_configured")
                else t["llm_no"]
            )
            updates = [
                gr.update(choices=info.get("companies", [])),
                gr.update(choices=info.get("areas", []) + info.get("topics", [])),
                note,
            ]
            session_id = (saved or {}).get("sid")
            if not session_id:
                return (*updates, None, None, [], "", gr.update(), "", "", None, gr.update())
            try:
                c = client()
                state = c.state(session_id)
                rep = c.report(session_id) if state["status"] == "ended" else None
                c.close()
            except ApiError:
                return (*updates, None, None, [], "", gr.update(), "", "", None, gr.update())
            if rep is not None:
                table, chart, path = _report_views(session_id, rep)
                return (
                    *updates,
                    session_id,
                    state["deadline"],
                    chat_from_state(state),
                    "",
                    gr.Tabs(selected="report"),
                    table,
                    "",
                    chart,
                    path,
                )
            return (
                *updates,
                session_id,
                state["deadline"],
                chat_from_state(state),
                countdown_text(state["deadline"], lang),
                gr.Tabs(selected="interview"),
                "",
                "",
                None,
                gr.update(),
            )

        def _report_views(session_id: str, rep: dict):
            chart = pd.DataFrame(
                {"topic": list(rep["per_topic"]), "score": list(rep["per_topic"].values())}
            )
            c = client()
            md = c.report_markdown(session_id)
            c.close()
            path = os.path.join(
                tempfile.mkdtemp(prefix="sparring-"), f"sparring-report-{session_id[:8]}.md"
            )
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(md)
            return report_table(rep), chart, path

        def on_start(
            mode_v, companies_v, topics_v, diff_v, duration_v, n_v, language_v, grader_v, lang
        ):
            body = {
                "mode": mode_v,
                "companies": companies_v or [],
                "topics": topics_v or [],
                "difficulty": [int(d) for d in (diff_v or [])],
                "duration_minutes": int(duration_v),
                "num_questions": int(n_v),
                "language": language_v,
                "grader": grader_v,
            }
            try:
                c = client()
                created = c.start(**body)
                state = c.state(created["id"])
                c.close()
            except ApiError as exc:
                return (
                    f"⚠️ {exc}",
                    gr.update(),
                    gr.update(),
                    gr.update(),
                    gr.update(),
                    gr.update(),
                    gr.update(),
                    "",
                )
            return (
                "",
                created["id"],
                created["deadline"],
                {"sid": created["id"]},
                chat_from_state(state),
                countdown_text(created["deadline"], lang),
                gr.Tabs(selected="interview"),
                "",
            )

        def after_action(session_id: str, result: dict | None, lang: str):
            """Re-render from the server's state; jump to the report when the interview is over."""
            c = client()
            state = c.state(session_id)
            c.close()
            grade = (result or {}).get("grade")
            card = feedback_card(grade, lang) if grade else gr.update()
            ref = grade.get("reference_answer", "") if grade else gr.update()
            if state["status"] == "ended":
                rep = (
                    c.report(session_id)
                    if False
                    else SparringClient(api_url, token).report(session_id)
                )
                table, chart, path = _report_views(session_id, rep)
                return (
                    "",
                    chat_from_state(state),
                    card,
                    ref,
                    "",
                    gr.Tabs(selected="report"),
                    table,
                    chart,
                    path,
                )
            return (
                "",
                chat_from_state(state),
                card,
                ref,
                gr.update(value=""),
                gr.update(),
                gr.update(),
                gr.update(),
                gr.update(),
            )

        def act(kind: str):
            def handler(session_id, text, lang):
                t = _lang(lang)
                if not session_id:
                    return (f"⚠️ {t['no_session']}", *[gr.update()] * 8)
                try:
                    c = client()
                    if kind == "answer":
                        if not (text or "").strip():
                            c.close()
                            return (
                                "⚠️ "
                                + (
                                    "请先输入回答。"
                                    if lang != "English"
                                    else "Type an answer first."
                                ),
                                *[gr.update()] * 8,
                            )
                        result = c.answer(session_id, text)
                    elif kind == "skip":
                        result = c.skip(session_id)
                    elif kind == "hint":
                        c.hint(session_id)
                        result = None
                    elif kind == "followup":
                        c.followup(session_id)
                        result = None
                    else:
                        c.end(session_id)
                        result = None
                    c.close()
                except ApiError as exc:
                    return (f"⚠️ {exc}", *[gr.update()] * 8)
                return after_action(session_id, result, lang)

            return handler

        def on_tick(session_id, deadline_v, lang):
            return countdown_text(deadline_v, lang) if session_id else ""

        def on_refresh(lang):
            try:
                c = client()
                prog = c.progress()
                c.close()
            except ApiError as exc:
                return f"⚠️ {exc}", gr.update(), gr.update(), gr.update()
            sessions = pd.DataFrame(
                prog["sessions"] or [],
                columns=["id", "mode", "status", "created_at", "questions", "average"],
            )
            rows = [
                {"at": h["at"], "score": h["score"], "area": m["area"]}
                for m in prog["mastery"]
                for h in m["history"]
            ]
            mastery = pd.DataFrame(rows or [], columns=["at", "score", "area"])
            queue = pd.DataFrame(
                [
                    {
                        "question": q["text"][:60],
                        "area": q["area"],
                        "due": q["due"],
                        "due now": q["is_due"],
                        "last score": q["last_score"],
                    }
                    for q in prog["review_queue"]
                ]
                or [],
                columns=["question", "area", "due", "due now", "last score"],
            )
            return "", sessions, mastery, queue

        def on_lang(lang):
            t = _lang(lang)
            return (
                t["title"],
                gr.update(label=t["setup"]),
                gr.update(label=t["interview"]),
                gr.update(label=t["report"]),
                gr.update(label=t["history"]),
                gr.update(label=t["mode"]),
                gr.update(label=t["companies"]),
                gr.update(label=t["topics"]),
                gr.update(label=t["difficulty"]),
                gr.update(label=t["duration"]),
                gr.update(label=t["questions"]),
                gr.update(label=t["language"]),
                gr.update(label=t["grader"]),
                gr.update(value=t["start"]),
                gr.update(label=t["answer"]),
                gr.update(value=t["submit"]),
                gr.update(value=t["followup"]),
                gr.update(value=t["hint"]),
                gr.update(value=t["skip"]),
                gr.update(value=t["end"]),
                gr.update(label=t["reference"]),
                gr.update(label=t["download"]),
                gr.update(value=t["refresh"]),
            )

        action_outputs = [
            error,
            chat,
            feedback,
            reference,
            answer,
            tabs,
            report_md,
            topic_chart,
            download,
        ]
        demo.load(
            on_load,
            inputs=[store, ui_lang],
            outputs=[
                companies,
                topics,
                llm_note,
                sid,
                deadline,
                chat,
                clock,
                tabs,
                report_md,
                feedback,
                topic_chart,
                download,
            ],
        )
        start_btn.click(
            on_start,
            inputs=[
                mode,
                companies,
                topics,
                difficulty,
                duration,
                num_questions,
                language,
                grader,
                ui_lang,
            ],
            outputs=[error, sid, deadline, store, chat, clock, tabs, feedback],
        )
        submit_btn.click(act("answer"), inputs=[sid, answer, ui_lang], outputs=action_outputs)
        skip_btn.click(act("skip"), inputs=[sid, answer, ui_lang], outputs=action_outputs)
        hint_btn.click(act("hint"), inputs=[sid, answer, ui_lang], outputs=action_outputs)
        followup_btn.click(act("followup"), inputs=[sid, answer, ui_lang], outputs=action_outputs)
        end_btn.click(act("end"), inputs=[sid, answer, ui_lang], outputs=action_outputs)
        timer.tick(
            on_tick, inputs=[sid, deadline, ui_lang], outputs=[clock], show_progress="hidden"
        )
        refresh_btn.click(
            on_refresh, inputs=[ui_lang], outputs=[error, sessions_df, mastery_chart, queue_df]
        )
        tab_history.select(
            on_refresh, inputs=[ui_lang], outputs=[error, sessions_df, mastery_chart, queue_df]
        )
        ui_lang.change(
            on_lang,
            inputs=[ui_lang],
            outputs=[
                title,
                tab_setup,
                tab_interview,
                tab_report,
                tab_history,
                mode,
                companies,
                topics,
                difficulty,
                duration,
                num_questions,
                language,
                grader,
                start_btn,
                answer,
                submit_btn,
                followup_btn,
                hint_btn,
                skip_btn,
                end_btn,
                ref_box,
                download,
                refresh_btn,
            ],
        )
    return demo
