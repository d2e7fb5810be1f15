"""The Gradio UI: a thin client of the HTTP API (setup, interview, report, history screens).

It holds no interview logic; it renders what the server returns. Point it at any server URL.
Query parameters: `?lang=en|zh` (interface language, also remembered in the browser),
`?session=<id>` (open that session: a running one resumes, an ended one shows its report),
`?duration_seconds=N` (a timed interview of N seconds, for demos and tests)."""

from __future__ import annotations

import os
import tempfile
from typing import Any

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import contextlib

import gradio as gr
import pandas as pd

from server.corpus.markdown import bank_markdown, inline_quote, readable_math
from ui.api_client import ApiError, SparringClient, mm_ss, seconds_left
from ui.audio import prepared_recording
from ui.texts import T, error_sentence, flag_text, lang_key, readable_time, shorten, tr

LATEX = [
    {"left": "$$", "right": "$$", "display": True},
    {"left": "$", "right": "$", "display": False},
    {"left": "\\(", "right": "\\)", "display": False},
    {"left": "\\[", "right": "\\]", "display": True},
]

# Ctrl+Enter (Cmd+Enter) in the answer box or the code editor submits; Tab in the code editor
# indents (four spaces) instead of leaving it.
HEAD = """
<style>
/* The report table: number, score and covered count stay on one line (on a phone a squeezed
   column would otherwise stack "得分" one character per line); text columns wrap. */
#report-table th:nth-child(1), #report-table td:nth-child(1),
#report-table th:nth-child(3), #report-table td:nth-child(3),
#report-table th:nth-child(4), #report-table td:nth-child(4) { white-space: nowrap; }
#report-table td:nth-child(2), #report-table td:nth-child(5) { min-width: 5.5em; }
@media (max-width: 480px) { #report-table th, #report-table td { padding: 4px 6px; } }
#report-table th { overflow-wrap: normal; word-break: keep-all; }
#report-table summary { cursor: pointer; }
/* The chat's trash icon would wipe the conversation without asking; the server keeps it anyway. */
#chat .icon-button-wrapper.top-panel { display: none; }
</style>
<script>
document.addEventListener('keydown', function (e) {
  if ((e.ctrlKey || e.metaKey) && e.key === 'Enter'
      && e.target.closest('#answer-box, #code-box')) {
    e.preventDefault();
    const b = document.querySelector('#submit-btn');
    if (b) b.click();
    return;
  }
  if (e.key === 'Tab' && !e.shiftKey && !e.ctrlKey && !e.altKey
      && e.target.closest('#code-box .cm-content')) {
    e.preventDefault();
    e.stopPropagation();
    document.execCommand('insertText', false, '    ');
  }
}, true);
</script>
"""

UI_LANGS = ["中文", "English"]
BUTTONS = ("submit", "related", "hint", "skip", "end")
# Per-area bar charts plot this column: the score, or a sliver for a 0 so that the area is seen.
# Each bar's label carries the true score; the chart's own tooltip is off, as it would show the
# sliver's height rather than the 0.
BAR = "bar"
ZERO_SLIVER = 0.12


def area_bars(areas: list[str], scores: list[float], x: str) -> pd.DataFrame:
    """One bar per area, labelled "area · score" (the score as given, 0 included)."""
    return pd.DataFrame(
        {
            x: [f"{a} · {round(s, 1):g}" for a, s in zip(areas, scores, strict=True)],
            BAR: [max(float(s), ZERO_SLIVER) for s in scores],
        }
    )


def bars_update(chart: pd.DataFrame, x: str, y: str) -> dict:
    return gr.update(value=chart, x=x, y=BAR, x_title=x, y_title=y)


def mode_choices(ui_lang: str) -> list[tuple[str, str]]:
    t = tr(ui_lang)
    return [(t[f"mode_{m}"], m) for m in ("interview", "practice", "review")]


def grader_choices(ui_lang: str, llm: bool) -> list[tuple[str, str]]:
    t = tr(ui_lang)
    return [(t[f"grader_{g}"], g) for g in ("auto", "rubric", *(("llm",) if llm else ()))]


def language_choices(ui_lang: str) -> list[tuple[str, str]]:
    t = tr(ui_lang)
    return [(t["lang_zh"], "zh"), (t["lang_en"], "en")]


def countdown_text(deadline: str | None, ui_lang: str, ended: bool = False) -> str:
    t = tr(ui_lang)
    if ended:
        return f"⏱ **{t['time_up']}**" if deadline else ""
    if not deadline:
        return f"⏱ {t['untimed']}"
    left = seconds_left(deadline)
    if left <= 0:
        return f"⏱ **{t['time_up']}**"
    return f"⏱ **{mm_ss(left)}** {t['left']}"


def turn_label(turn: dict, ui_lang: str) -> str:
    return (turn.get("labels") or {}).get(lang_key(ui_lang)) or turn.get("label", "")


def chat_from_state(state: dict, ui_lang: str) -> list[dict[str, str]]:
    """One message per turn, each opened by its label (第 2 题 · 追问 1)."""
    t = tr(ui_lang)
    messages = []
    for turn in state["turns"]:
        label = turn_label(turn, ui_lang)
        head = f"**{label}**\n\n" if label else ""
        if turn["role"] == "interviewer":
            messages.append({"role": "assistant", "content": head + readable_math(turn["text"])})
        elif turn["kind"] == "skip":
            messages.append({"role": "user", "content": head + t["skipped"]})
        else:
            late = f"\n\n⏰ {t['late']}" if turn["late"] else ""
            messages.append({"role": "user", "content": head + turn["text"] + late})
    return messages


def feedback_card(result: dict, ui_lang: str) -> str:
    t = tr(ui_lang)
    grade = result["grade"]
    en = lang_key(ui_lang) == "en"
    label = (result.get("labels") or {}).get(lang_key(ui_lang), "")
    head = f"#### {label} · {t['feedback']}\n\n" if label else ""
    lines = [f"{head}**{t['score']}: {grade['score']} / 10** · `{grade['grader']}`"]
    if grade.get("flags"):
        lines.append(" · ".join(flag_text(f, ui_lang) for f in grade["flags"]))
    lines.append("")
    for kp in grade["key_points"]:
        text = readable_math(kp["text_en"] if en and kp.get("text_en") else kp["text"])
        if kp["covered"]:
            # A quote holding code becomes a code span: it cannot open a block inside the card.
            quote = f" — “{inline_quote(kp['evidence'], 160)}”" if kp.get("evidence") else ""
            lines.append(f"- ✓ {text}{quote}")
        else:
            lines.append(f"- ✗ {text}")
    for m in grade.get("misconceptions", []):
        lines.append(f"- ⚠ {readable_math(m['text'])} → {readable_math(m['correction'])}")
    tests = grade.get("tests", [])
    if tests:
        passed = sum(bool(x["passed"]) for x in tests)
        lines += ["", f"**{t['tests']}: {passed}/{len(tests)}**"]
        for test in tests:
            explain = test.get("explain_en") if en and test.get("explain_en") else test["explain"]
            why = "" if test["passed"] else f" — `{shorten(test.get('message', ''), 200)}`"
            lines.append(f"- {'✓' if test['passed'] else '✗'} {explain}{why}")
    return "\n".join(lines)


def report_status(report: dict, ui_lang: str) -> str:
    t = tr(ui_lang)
    status = t.get(f"status_{report['status']}", report["status"])
    if report.get("end_reason"):
        status += f" ({t.get('reason_' + report['end_reason'], report['end_reason'])})"
    return t["overall"].format(score=report["overall_score"], status=status)


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell: no pipes, no strikethrough from '~', one line."""
    return text.replace("|", "\\|").replace("~", "\\~").replace("\n", " ")


def expandable(text: str, limit: int) -> str:
    """Text for a table cell: in full when short; otherwise its first `limit` characters with "…"
    that open (tap or click) to the full text — never cut without a way to read the rest."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return readable_math(flat)
    return (
        f"<details><summary>{readable_math(shorten(flat, limit))}</summary>"
        f"{readable_math(flat)}</details>"
    )


def report_table(report: dict, ui_lang: str) -> str:
    t = tr(ui_lang)
    en = lang_key(ui_lang) == "en"
    lines = [
        f"**{report_status(report, ui_lang)}**",
        "",
        f"| {t['col_num']} | {t['col_question']} | {t['col_score']} | {t['col_covered']}"
        f" | {t['col_missed']} |",
        "|---|---|---|---|---|",
    ]
    for q in report["questions"]:
        # Long text opens to its full length (see expandable); the score columns keep one line
        # on a phone (CSS in HEAD).
        text = q.get("text_en") if en and q.get("text_en") else q["text"]
        missed = "; ".join(
            m.get("text_en") if en and m.get("text_en") else m["text"] for m in q["missed"]
        )
        tests = q.get("tests") or []
        if tests:
            passed = sum(bool(x.get("passed")) for x in tests)
            missed = f"{t['col_tests']} {passed}/{len(tests)}" + (f"; {missed}" if missed else "")
        lines.append(
            f"| {q['number']} | {cell(expandable(text, 120))} | {q['score']} | {len(q['covered'])}"
            f" | {cell(expandable(missed, 60))} |"
        )
    return "\n".join(lines)


def search_results(found: dict, names: dict[str, str], ui_lang: str) -> str:
    """Search hits with their calibrated relevance and the match verdict, when the server sends
    them (`relevance` per result, `match` strong|weak|none)."""
    t = tr(ui_lang)
    en = lang_key(ui_lang) == "en"
    results = found.get("results") or []
    if not results:
        return t["no_results"]
    lines = []
    match = found.get("match")
    if match == "none":
        topics = list(dict.fromkeys(names.get(r["topic"], r["topic"]) for r in results))
        lines += [f"**{t['match_none'].format(topics=', '.join(topics[:5]))}**", ""]
    elif match == "weak":
        lines += [f"**{t['match_weak']}**", ""]
    for r in results:
        text = r.get("text_en") if en and r.get("text_en") else r["text"]
        rel = r.get("relevance")
        score = f" · {t['relevance']} {round(100 * rel)}%" if isinstance(rel, int | float) else ""
        lines.append(
            f"- {readable_math(shorten(text, 140))} — *{names.get(r['topic'], r['topic'])}*{score}"
        )
    return "\n".join(lines)


def build_ui(api_url: str, token: str = "") -> gr.Blocks:
    def client() -> SparringClient:
        return SparringClient(api_url, token)

    def call(fn, *args, **kwargs):
        c = client()
        try:
            return fn(c, *args, **kwargs)
        finally:
            c.close()

    def safe_info() -> dict[str, Any]:
        try:
            return call(lambda c: c.server_info())
        except ApiError:
            return {"llm_configured": False, "llm_model": None, "companies": []}

    def options(companies: list[str] | None) -> dict[str, Any]:
        try:
            return call(lambda c: c.filter_options(companies))
        except ApiError:
            return {"companies": [], "areas": [], "topics": [], "total": 0}

    def topic_choices(opts: dict, ui_lang: str) -> list[tuple[str, str]]:
        en = lang_key(ui_lang) == "en"
        t = tr(ui_lang)
        areas = [
            (f"{t['area_prefix']}: {a['name_en' if en else 'name_zh']} ({a['count']})", a["area"])
            for a in opts["areas"]
        ]
        topics = [
            (f"{x['name_en'] if en else x['topic']} ({x['count']})", x["topic"])
            for x in opts["topics"]
        ]
        return areas + topics

    def filter_note(opts: dict, companies_v, topics_v, ui_lang: str) -> str:
        t = tr(ui_lang)
        en = lang_key(ui_lang) == "en"
        if not companies_v:
            return t["filter_all"].format(n=opts["total"])
        names = "、".join(companies_v) if not en else ", ".join(companies_v)
        have = {a["area"] for a in opts["areas"]} | {x["topic"] for x in opts["topics"]}
        missing = [x for x in topics_v or [] if x not in have]
        if missing:
            areas = [f"{a['name_en' if en else 'name_zh']} ({a['count']})" for a in opts["areas"]]
            topics = [
                f"{x['name_en'] if en else x['topic']} ({x['count']})" for x in opts["topics"][:6]
            ]
            top = ", ".join(areas + topics) + (" …" if len(opts["topics"]) > 6 else "")
            return "⚠️ " + t["filter_missing"].format(
                companies=names, missing=", ".join(missing), available=top
            )
        return t["filter_company"].format(companies=names, n=opts["total"])

    def report_views(session_id: str, ui_lang: str):
        rep = call(lambda c: c.report(session_id))
        md = call(lambda c: c.report_markdown(session_id, lang_key(ui_lang)))
        en = lang_key(ui_lang) == "en"
        names = {a["area"]: a["name_en" if en else "name_zh"] for a in options(None)["areas"]}
        t = tr(ui_lang)
        chart = area_bars(
            [names.get(a, a) for a in rep["per_topic"]],
            list(rep["per_topic"].values()),
            t["axis_topic"],
        )
        path = os.path.join(
            tempfile.mkdtemp(prefix="sparring-"), f"sparring-report-{session_id[:8]}.md"
        )
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(md)
        return report_table(rep, ui_lang), chart_update(chart, ui_lang), path

    def chart_update(chart: pd.DataFrame, ui_lang: str):
        t = tr(ui_lang)
        return bars_update(chart, t["axis_topic"], t["axis_score"])

    def buttons(enabled: bool, coding: bool, clear: bool = False, lang: str | None = None) -> list:
        """The five buttons, the answer box and the code editor (shown for code questions);
        with `lang`, their captions in that language too."""
        fresh = {"value": ""} if clear else {}
        t = tr(lang) if lang else None
        return [
            *[
                gr.update(interactive=enabled, **({"value": t[key]} if t else {}))
                for key in BUTTONS
            ],
            gr.update(interactive=enabled, **fresh, **({"label": t["answer"]} if t else {})),
            gr.update(
                interactive=enabled, visible=coding, **fresh, **({"label": t["code"]} if t else {})
            ),
        ]

    def fixed_labels(lang: str) -> list:
        """Captions of the widgets no handler other than a language change redraws (the order of
        `labelled` below): applied on load too, so a page opened with ?lang= is in one language
        from its first paint, not only once the language change has run."""
        t = tr(lang)
        return [
            t["title"],
            gr.update(label=t["setup"]),
            gr.update(label=t["interview"]),
            gr.update(label=t["report"]),
            gr.update(label=t["history"]),
            gr.update(label=t["bank"]),
            gr.update(label=t["mode"], choices=mode_choices(lang)),
            gr.update(label=t["difficulty"]),
            gr.update(label=t["duration"]),
            gr.update(label=t["questions"]),
            gr.update(label=t["language"], choices=language_choices(lang)),
            gr.update(value=t["start"]),
            gr.update(label=t["reference"]),
            gr.update(value=t["refresh"]),
            gr.update(label=t["search"]),
            gr.update(value=t["search_btn"]),
            t["mastery_title"],
            t["trend_title"],
            gr.update(label=t["voice"]),
            t["voice_send"],
        ]

    def question_views(state: dict | None, ui_lang: str):
        """The contract and code editor when the open question grades code."""
        current = (state or {}).get("current") or {}
        coding = current.get("coding")
        if not coding:
            return gr.update(visible=False, value=""), False
        en = lang_key(ui_lang) == "en"
        text = coding.get("contract_en") if en and coding.get("contract_en") else coding["contract"]
        signature = coding.get("signature") or coding.get("function", "")
        md = f"**{tr(ui_lang)['contract']}:** `{signature}`\n\n{text}"
        return gr.update(visible=True, value=md), True

    with gr.Blocks(title="Sparring") as demo:
        store = gr.BrowserState({"sid": None}, storage_key="sparring-session")
        lang_store = gr.BrowserState("中文", storage_key="sparring-ui-lang")
        sid = gr.State(None)
        deadline = gr.State(None)
        ended = gr.State(False)
        short = gr.State(None)  # ?duration_seconds=N
        title = gr.Markdown(T["zh"]["title"])
        ui_lang = gr.Radio(UI_LANGS, value="中文", label="界面 / Interface", elem_id="ui-lang")
        error = gr.Markdown(elem_id="error-box")
        with gr.Tabs(selected="setup") as tabs:
            with gr.Tab(T["zh"]["setup"], id="setup", elem_id="tab-setup") as tab_setup:
                mode = gr.Radio(
                    mode_choices("中文"), value="interview", label=T["zh"]["mode"], elem_id="mode"
                )
                companies = gr.Dropdown(
                    [], multiselect=True, label=T["zh"]["companies"], elem_id="companies"
                )
                topics = gr.Dropdown(
                    [], multiselect=True, label=T["zh"]["topics"], elem_id="topics"
                )
                filters_md = gr.Markdown(elem_id="filter-note")
                difficulty = gr.CheckboxGroup([1, 2, 3], label=T["zh"]["difficulty"])
                with gr.Row():
                    duration = gr.Slider(5, 120, value=30, step=5, label=T["zh"]["duration"])
                    num_questions = gr.Slider(
                        1, 20, value=5, step=1, label=T["zh"]["questions"], elem_id="num-questions"
                    )
                language = gr.Radio(
                    language_choices("中文"),
                    value="zh",
                    label=T["zh"]["language"],
                    elem_id="interviewer-language",
                )
                grader = gr.Radio(
                    grader_choices("中文", False), value="auto", label=T["zh"]["grader"]
                )
                llm_note = gr.Markdown(elem_id="llm-note")
                start_btn = gr.Button(T["zh"]["start"], variant="primary", elem_id="start-btn")
            with gr.Tab(T["zh"]["interview"], id="interview", elem_id="tab-interview") as tab_iv:
                clock = gr.Markdown(elem_id="countdown")
                chat = gr.Chatbot(
                    height=460,
                    show_label=False,
                    latex_delimiters=LATEX,
                    elem_id="chat",
                    group_consecutive_messages=False,
                    buttons=["copy"],
                )
                contract = gr.Markdown(visible=False, elem_id="contract")
                code = gr.Code(
                    language="python",
                    lines=10,
                    label=T["zh"]["code"],
                    visible=False,
                    interactive=True,
                    elem_id="code-box",
                )
                answer = gr.Textbox(lines=5, label=T["zh"]["answer"], elem_id="answer-box")
                # Spoken answers: shown only when /api/info says the server has a speech service.
                with gr.Row(visible=False, elem_id="voice-row") as voice_row:
                    voice = gr.Audio(
                        sources=["microphone", "upload"],
                        type="filepath",
                        label=T["zh"]["voice"],
                        elem_id="voice-box",
                        scale=4,
                    )
                    voice_btn = gr.Button(T["zh"]["voice_send"], elem_id="voice-btn", scale=1)
                with gr.Row():
                    submit_btn = gr.Button(
                        T["zh"]["submit"], variant="primary", elem_id="submit-btn"
                    )
                    related_btn = gr.Button(T["zh"]["related"], elem_id="followup-btn")
                    hint_btn = gr.Button(T["zh"]["hint"], elem_id="hint-btn")
                    skip_btn = gr.Button(T["zh"]["skip"], elem_id="skip-btn")
                    end_btn = gr.Button(T["zh"]["end"], variant="stop", elem_id="end-btn")
                feedback = gr.Markdown(latex_delimiters=LATEX, elem_id="feedback")
                with gr.Accordion(T["zh"]["reference"], open=True, elem_id="ref-box") as ref_box:
                    reference = gr.Markdown(latex_delimiters=LATEX, elem_id="reference")
            with gr.Tab(T["zh"]["report"], id="report", elem_id="tab-report") as tab_report:
                report_md = gr.Markdown(latex_delimiters=LATEX, elem_id="report-table")
                topic_chart = gr.BarPlot(
                    x=T["zh"]["axis_topic"],
                    y=BAR,
                    y_title=T["zh"]["axis_score"],
                    y_lim=[0, 10],
                    tooltip="none",
                    elem_id="topic-chart",
                )
                download = gr.DownloadButton(T["zh"]["download"], elem_id="download-btn")
            with gr.Tab(T["zh"]["bank"], id="bank", elem_id="tab-bank") as tab_bank:
                with gr.Row():
                    query = gr.Textbox(label=T["zh"]["search"], elem_id="search-box", scale=4)
                    search_btn = gr.Button(T["zh"]["search_btn"], elem_id="search-btn", scale=1)
                hits_md = gr.Markdown(elem_id="search-results")
            with gr.Tab(T["zh"]["history"], id="history", elem_id="tab-history") as tab_history:
                refresh_btn = gr.Button(T["zh"]["refresh"], elem_id="refresh-btn")
                mastery_title = gr.Markdown(T["zh"]["mastery_title"])
                mastery_chart = gr.BarPlot(
                    x=T["zh"]["axis_topic"],
                    y=BAR,
                    y_title=T["zh"]["axis_mastery"],
                    y_lim=[0, 10],
                    tooltip="none",
                    elem_id="mastery",
                )
                trend_title = gr.Markdown(T["zh"]["trend_title"])
                trend_chart = gr.LinePlot(
                    x=T["zh"]["axis_session"],
                    y=T["zh"]["axis_score"],
                    y_lim=[0, 10],
                    elem_id="trend",
                    visible=False,
                )
                sessions_md = gr.Markdown(elem_id="sessions")
                queue_md = gr.Markdown(elem_id="review-queue")
        timer = gr.Timer(1.0)
        widgets = [submit_btn, related_btn, hint_btn, skip_btn, end_btn, answer, code]

        # ----- handlers (sync: each runs in a worker thread and calls the API over HTTP) -----

        def on_load(saved: dict | None, saved_lang: str | None, request: gr.Request):
            params = dict(request.query_params) if request else {}
            lang = {"en": "English", "zh": "中文"}.get(params.get("lang", ""), saved_lang)
            lang = lang if lang in UI_LANGS else "中文"
            seconds = params.get("duration_seconds")
            short_v = int(seconds) if seconds and seconds.isdigit() else None
            info = safe_info()
            t = tr(lang)
            note = (
                t["llm_yes"].format(model=info.get("llm_model"))
                if info.get("llm_configured")
                else t["llm_no"]
            )
            opts = options(None)
            head = [
                lang,
                short_v,
                gr.update(label=t["companies"],
                          choices=[(f"{c['company']} ({c['count']})", c["company"])
                                   for c in opts["companies"]]),
                gr.update(label=t["topics"], choices=topic_choices(opts, lang)),
                filter_note(opts, [], [], lang),
                note,
                gr.update(label=t["grader"],
                          choices=grader_choices(lang, bool(info.get("llm_configured")))),
                *fixed_labels(lang),
            ]  # fmt: skip
            download_label = gr.update(label=t["download"])
            session_id = params.get("session") or (saved or {}).get("sid")
            nothing = (None, None, False, [], "", gr.update(), "", gr.update(), download_label,
                       gr.update(visible=False), *buttons(True, False, lang=lang))  # fmt: skip
            if not session_id:
                return (*head, *nothing)
            try:
                state = call(lambda c: c.state(session_id))
            except ApiError:
                return (*head, *nothing)
            contract_u, coding = question_views(state, lang)
            if state["status"] == "ended":
                table, chart, path = report_views(session_id, lang)
                return (*head, session_id, state["deadline"], True, chat_from_state(state, lang),
                        countdown_text(state["deadline"], lang, ended=True),
                        gr.Tabs(selected="report"), table, chart,
                        gr.update(value=path, label=t["download"]), contract_u,
                        *buttons(False, False, lang=lang))  # fmt: skip
            return (*head, session_id, state["deadline"], False, chat_from_state(state, lang),
                    countdown_text(state["deadline"], lang), gr.Tabs(selected="interview"), "",
                    gr.update(), download_label, contract_u,
                    *buttons(True, coding, lang=lang))  # fmt: skip

        def on_start(mode_v, companies_v, topics_v, diff_v, duration_v, n_v, language_v,
                     grader_v, lang, short_v):  # fmt: skip
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
            if short_v and mode_v == "interview":
                body["duration_seconds"] = int(short_v)
            try:
                created = call(lambda c: c.start(**body))
                state = call(lambda c: c.state(created["id"]))
            except ApiError as exc:
                available = ""
                if exc.code == "no_questions" and companies_v:
                    opts = options(companies_v)
                    available = filter_note(opts, companies_v, topics_v, lang) + " "
                msg = error_sentence(exc.code, exc.status, exc.message, lang, available)
                return (f"⚠️ {msg}", *[gr.update()] * 18)
            contract_u, coding = question_views(state, lang)
            return (
                "",
                created["id"],
                created["deadline"],
                False,
                {"sid": created["id"]},
                chat_from_state(state, lang),
                countdown_text(created["deadline"], lang),
                gr.Tabs(selected="interview"),
                "",  # feedback of the last interview
                "",  # its reference answer
                contract_u,
                gr.update(label=tr(lang)["reference"]),
                *buttons(True, coding, clear=True),  # and its draft
            )

        def after_action(session_id: str, result: dict | None, lang: str):
            """Re-render from the server's state; jump to the report when the interview is over."""
            t = tr(lang)
            state = call(lambda c: c.state(session_id))
            contract_u, coding = question_views(state, lang)
            card, ref, ref_label = gr.update(), gr.update(), gr.update()
            if result and result.get("grade"):
                card = feedback_card(result, lang)
                label = (result.get("labels") or {}).get(lang_key(lang), "")
                if result["grade"].get("reference_answer"):
                    ref = bank_markdown(result["grade"]["reference_answer"])
                    ref_label = gr.update(label=t["reference_for"].format(label=label))
                else:
                    ref, ref_label = t["reference_wait"], gr.update(label=t["reference"])
            if state["status"] == "ended":
                table, chart, path = report_views(session_id, lang)
                return ("", chat_from_state(state, lang), card, ref, ref_label, True,
                        countdown_text(state["deadline"], lang, ended=True),
                        gr.Tabs(selected="report"), table, chart, path, contract_u,
                        *buttons(False, False, clear=True))  # fmt: skip
            return ("", chat_from_state(state, lang), card, ref, ref_label, False, gr.update(),
                    gr.update(), gr.update(), gr.update(), gr.update(), contract_u,
                    *buttons(True, coding, clear=True))  # fmt: skip

        def act(kind: str):
            def handler(session_id, text, code_v, lang):
                t = tr(lang)
                if not session_id:
                    return (f"⚠️ {t['no_session']}", *[gr.update()] * 18)
                try:
                    if kind == "answer":
                        body = (text or "").strip()
                        if (code_v or "").strip():
                            body = f"{body}\n\n```python\n{code_v.rstrip()}\n```".strip()
                        if not body:
                            return (f"⚠️ {t['type_first']}", *[gr.update()] * 18)
                        result = call(lambda c: c.answer(session_id, body))
                    elif kind == "skip":
                        result = call(lambda c: c.skip(session_id))
                    elif kind == "hint":
                        call(lambda c: c.hint(session_id))
                        result = None
                    elif kind == "related":
                        call(lambda c: c.followup(session_id))
                        result = None
                    else:
                        call(lambda c: c.end(session_id))
                        result = None
                except ApiError as exc:
                    msg = error_sentence(exc.code, exc.status, exc.message, lang)
                    if exc.code in ("session_ended", "time_up"):
                        out = after_action(session_id, None, lang)
                        return (f"⚠️ {msg}", *out[1:])
                    return (f"⚠️ {msg}", *[gr.update()] * 18)
                out = after_action(session_id, result, lang)
                if kind == "hint":  # keep the draft: nothing was answered
                    out = (*out[:-2], gr.update(), gr.update())
                elif kind == "answer" and result["next"]["kind"] == "probe":
                    out = (*out[:-1], gr.update())  # the code stays for the follow-up
                return out

            return handler

        def on_tick(session_id, deadline_v, ended_v, lang):
            """The server owns the clock; at the deadline the UI asks it and shows the report."""
            idle = (gr.update(), *[gr.update()] * 14)
            if not session_id:
                return ("", *idle[1:])
            if ended_v or not deadline_v or seconds_left(deadline_v) > 0:
                return (countdown_text(deadline_v, lang, ended=ended_v), *idle[1:])
            try:
                out = after_action(session_id, None, lang)
            except ApiError:
                return (countdown_text(deadline_v, lang), *idle[1:])
            if out[5] is not True:  # the server's clock has not run out yet
                return (countdown_text(deadline_v, lang), *idle[1:])
            # after_action: error, chat, card, ref, ref_label, ended, clock, tabs, table, chart,
            # path, contract, 5 buttons, answer, code
            return (out[6], out[1], out[5], out[7], out[8], out[9], out[10], out[11], *out[12:])

        def on_refresh(lang):
            t = tr(lang)
            en = lang_key(lang) == "en"
            try:
                prog = call(lambda c: c.progress())
            except ApiError as exc:
                msg = error_sentence(exc.code, exc.status, exc.message, lang)
                return (f"⚠️ {msg}", *[gr.update()] * 4)
            names = {a["area"]: a["name_en" if en else "name_zh"] for a in options(None)["areas"]}
            mastery = area_bars(
                [names.get(m["area"], m["area"]) for m in prog["mastery"]],
                [m["mastery"] for m in prog["mastery"]],
                t["axis_topic"],
            )
            done = [s for s in prog["sessions"] if s.get("average") is not None]
            trend = pd.DataFrame(
                {
                    # The last 15 scored sessions, numbered from the first one ever.
                    t["axis_session"]: [f"#{i}" for i in range(1, len(done) + 1)][-15:],
                    t["axis_score"]: [s["average"] for s in done][-15:],
                }
            )
            if not prog["sessions"]:
                return (
                    "",
                    bars_update(mastery, t["axis_topic"], t["axis_mastery"]),
                    gr.update(visible=False),
                    t["no_history"],
                    "",
                )
            rows = [
                t["sessions_title"],
                "",
                f"| {t['col_when']} | {t['col_question']} | {t['col_mode']} | {t['col_status']}"
                f" | {t['col_count']} | {t['col_avg']} | {t['col_open']} |",
                "|---|---|---|---|---|---|---|",
            ]
            for s in list(reversed(prog["sessions"]))[:20]:  # the 20 newest
                title = s.get("title_en") if en and s.get("title_en") else s.get("title", "")
                status = t.get(f"status_{s['status']}", s["status"])
                if s.get("end_reason"):
                    status += f" ({t.get('reason_' + s['end_reason'], s['end_reason'])})"
                avg = "—" if s["average"] is None else s["average"]
                link = f"[{t['open_report']}](?session={s['id']}&lang={lang_key(lang)})"
                rows.append(
                    f"| {readable_time(s['created_at'])} | {cell(shorten(title, 50))} "
                    f"| {t.get('mode_' + s['mode'], s['mode'])} | {status} | {s['questions']} "
                    f"| {avg} | {link} |"
                )
            queue = [
                t["queue_title"],
                "",
                f"| {t['col_question']} | {t['col_area']} | {t['col_due']} | {t['col_due_now']}"
                f" | {t['col_last']} |",
                "|---|---|---|---|---|",
            ]
            for q in prog["review_queue"][:20]:
                queue.append(
                    f"| {cell(shorten(q.get('text_en') if en and q.get('text_en') else q['text'], 50))}"
                    f" | {names.get(q['area'], q['area'])} "
                    f"| {readable_time(q['due'])} | {t['yes'] if q['is_due'] else t['no']} "
                    f"| {q['last_score']} |"
                )
            trend_u = (
                gr.update(value=trend, visible=True, x=t["axis_session"], y=t["axis_score"],
                          x_title=t["axis_session"], y_title=t["axis_score"])
                if len(done) >= 2 else gr.update(visible=False)
            )  # fmt: skip
            mastery_u = bars_update(mastery, t["axis_topic"], t["axis_mastery"])
            return "", mastery_u, trend_u, "\n".join(rows), "\n".join(queue)

        def on_lang(lang, companies_v, topics_v, session_id, ended_v, deadline_v):
            t = tr(lang)
            info = safe_info()
            opts = options(companies_v)
            chat_u = gr.update()
            if session_id:
                with contextlib.suppress(ApiError):
                    chat_u = chat_from_state(call(lambda c: c.state(session_id)), lang)
            return (
                lang,
                *fixed_labels(lang),
                gr.update(label=t["companies"]),
                gr.update(label=t["topics"], choices=topic_choices(opts, lang)),
                filter_note(opts, companies_v, topics_v, lang),
                gr.update(
                    label=t["grader"],
                    choices=grader_choices(lang, bool(info.get("llm_configured"))),
                ),
                t["llm_yes"].format(model=info.get("llm_model"))
                if info.get("llm_configured")
                else t["llm_no"],
                gr.update(label=t["answer"]),
                gr.update(label=t["code"]),
                *[gr.update(value=t[key]) for key in BUTTONS],
                gr.update(label=t["download"]),
                chat_u,
                countdown_text(deadline_v, lang, ended=bool(ended_v)) if session_id else "",
            )

        # in the order of fixed_labels()
        labelled = [title, tab_setup, tab_iv, tab_report, tab_history, tab_bank, mode, difficulty,
                    duration, num_questions, language, start_btn, ref_box, refresh_btn, query,
                    search_btn, mastery_title, trend_title, voice, voice_btn]  # fmt: skip
        demo.load(
            on_load,
            inputs=[store, lang_store],
            outputs=[ui_lang, short, companies, topics, filters_md, llm_note, grader, *labelled,
                     sid, deadline, ended, chat, clock, tabs, report_md, topic_chart, download,
                     contract, *widgets],
        )  # fmt: skip
        start_btn.click(
            on_start,
            inputs=[mode, companies, topics, difficulty, duration, num_questions, language,
                    grader, ui_lang, short],
            outputs=[error, sid, deadline, ended, store, chat, clock, tabs, feedback, reference,
                     contract, ref_box, *widgets],
        )  # fmt: skip
        action_outputs = [error, chat, feedback, reference, ref_box, ended, clock, tabs,
                          report_md, topic_chart, download, contract, *widgets]  # fmt: skip
        for btn, kind in ((submit_btn, "answer"), (skip_btn, "skip"), (hint_btn, "hint"),
                          (related_btn, "related"), (end_btn, "end")):  # fmt: skip
            btn.click(act(kind), inputs=[sid, answer, code, ui_lang], outputs=action_outputs)
        timer.tick(
            on_tick,
            inputs=[sid, deadline, ended, ui_lang],
            outputs=[clock, chat, ended, tabs, report_md, topic_chart, download, contract,
                     *widgets],
            show_progress="hidden",
        )  # fmt: skip

        # ----- spoken answers: the server transcribes, the transcript is the answer -----

        def on_voice_load():
            return gr.update(visible=bool(safe_info().get("speech_enabled")))

        def on_voice(session_id, audio_path, lang):
            t = tr(lang)
            keep = [gr.update()] * 18
            if not session_id:
                return (f"⚠️ {t['no_session']}", *keep, gr.update())
            if not audio_path:
                return (f"⚠️ {t['record_first']}", *keep, gr.update())
            try:
                recording = prepared_recording(audio_path)
                result = call(lambda c: c.answer_audio(session_id, *recording))
            except ApiError as exc:
                msg = error_sentence(exc.code, exc.status, exc.message, lang)
                if exc.code in ("session_ended", "time_up"):
                    out = after_action(session_id, None, lang)
                    return (f"⚠️ {msg}", *out[1:], gr.update())
                return (f"⚠️ {msg}", *keep, gr.update())  # the recording stays, to send again
            out = after_action(session_id, result, lang)
            if result["next"]["kind"] == "probe":  # a typed draft and the code stay
                out = (*out[:-2], gr.update(), gr.update())
            return (*out, gr.update(value=None))

        demo.load(on_voice_load, outputs=[voice_row])
        voice_btn.click(on_voice, inputs=[sid, voice, ui_lang], outputs=[*action_outputs, voice])

        def on_search(text, lang):
            if not (text or "").strip():
                return "", ""
            try:
                found = call(lambda c: c.search(text.strip(), 5))
            except ApiError as exc:
                return f"⚠️ {error_sentence(exc.code, exc.status, exc.message, lang)}", ""
            en = lang_key(lang) == "en"
            names = {
                x["topic"]: x["name_en"] if en else x["topic"] for x in options(None)["topics"]
            }
            return "", search_results(found, names, lang)

        def on_chat_cleared(session_id, lang):
            """The chat's clear action (hidden by CSS) must not lose the conversation: the server
            holds every turn, so the chat is drawn again from it."""
            if not session_id:
                return []
            try:
                return chat_from_state(call(lambda c: c.state(session_id)), lang)
            except ApiError:
                return gr.update()

        chat.clear(on_chat_cleared, inputs=[sid, ui_lang], outputs=[chat])
        search_btn.click(on_search, inputs=[query, ui_lang], outputs=[error, hits_md])
        query.submit(on_search, inputs=[query, ui_lang], outputs=[error, hits_md])

        def on_filters(companies_v, topics_v, lang):
            opts = options(companies_v)
            have = {a["area"] for a in opts["areas"]} | {x["topic"] for x in opts["topics"]}
            # Keep only choices that still exist; the note names the dropped ones.
            kept = [x for x in topics_v or [] if x in have]
            return (
                gr.update(choices=topic_choices(opts, lang), value=kept),
                filter_note(opts, companies_v, topics_v, lang),
            )

        companies.change(
            on_filters, inputs=[companies, topics, ui_lang], outputs=[topics, filters_md]
        )
        history_outputs = [error, mastery_chart, trend_chart, sessions_md, queue_md]
        refresh_btn.click(on_refresh, inputs=[ui_lang], outputs=history_outputs)
        tab_history.select(on_refresh, inputs=[ui_lang], outputs=history_outputs)
        ui_lang.change(
            on_lang,
            inputs=[ui_lang, companies, topics, sid, ended, deadline],
            outputs=[lang_store, *labelled, companies, topics, filters_md, grader, llm_note,
                     answer, code, submit_btn, related_btn, hint_btn, skip_btn, end_btn, download,
                     chat, clock],
        )  # fmt: skip
    return demo
