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
import time

import gradio as gr

from server.corpus.markdown import bank_markdown, inline_quote, readable_math
from server.interview.labels import failure_reason, question_label
from ui.api_client import ApiError, SparringClient, mm_ss, seconds_left
from ui.audio import prepared_recording
from ui.charts import CSS as CHART_CSS
from ui.charts import bar_chart, line_chart
from ui.texts import T, error_sentence, flag_text, lang_key, readable_time, shorten, tr

LATEX = [
    {"left": "$$", "right": "$$", "display": True},
    {"left": "$", "right": "$", "display": False},
    {"left": "\\(", "right": "\\)", "display": False},
    {"left": "\\[", "right": "\\]", "display": True},
]

# Ctrl+Enter (Cmd+Enter) in the answer box or the code editor submits. The code editor indents
# as Python wants: Enter keeps the line's indent (four more after a colon), Tab moves to the next
# multiple of four. Drafts (answer box and code) are saved in the browser as they change and put
# back after a reload.
HEAD = r"""
<link rel="icon" type="image/svg+xml" href="/favicon.ico">
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
/* The countdown stays in view while the page scrolls (on a phone the chat is taller than it). */
#countdown { position: sticky; top: 0; z-index: 30; background: var(--background-fill-primary);
  padding: 2px 0; }
/* On a phone the action buttons share rows (three, then the rest) instead of stacking, and the
   countdown is pinned to the top of the screen (sticky does not hold inside Gradio's columns). */
@media (max-width: 640px) {
  #countdown { position: fixed; top: 0; left: 0; right: 0; padding: 4px 12px;
    box-shadow: 0 1px 3px rgba(0, 0, 0, 0.15); }
  #action-row { flex-wrap: wrap !important; gap: 6px !important; }
  #action-row > button { flex: 1 1 30% !important; min-width: 0 !important; padding: 6px 4px; }
}
.review-q { margin: 0 0 6px 0; }
.review-q > summary { cursor: pointer; }
</style>
<style id="sparring-charts"></style>
<script>
function sparringBeforeCaret() {
  // The code line's text before the caret (CodeMirror draws one .cm-line per line).
  const sel = window.getSelection();
  if (!sel || !sel.anchorNode) return null;
  const node = sel.anchorNode.nodeType === 1 ? sel.anchorNode : sel.anchorNode.parentElement;
  const line = node && node.closest('.cm-line');
  if (!line) return null;
  const range = document.createRange();
  range.selectNodeContents(line);
  range.setEnd(sel.anchorNode, sel.anchorOffset);
  return range.toString();
}
document.addEventListener('keydown', function (e) {
  if ((e.ctrlKey || e.metaKey) && e.key === 'Enter'
      && e.target.closest('#answer-box, #code-box')) {
    e.preventDefault();
    const b = document.querySelector('#submit-btn');
    if (b) b.click();
    return;
  }
  if (e.ctrlKey || e.altKey || e.metaKey || e.shiftKey || !e.target.closest('#code-box .cm-content')) return;
  if (e.key === 'Tab') {
    e.preventDefault();
    e.stopPropagation();
    const before = sparringBeforeCaret() || '';
    document.execCommand('insertText', false, ' '.repeat(4 - (before.length % 4)));
  } else if (e.key === 'Enter') {
    const before = sparringBeforeCaret();
    if (before === null) return;
    e.preventDefault();
    e.stopPropagation();
    let indent = before.match(/^ */)[0];
    if (/:\s*$/.test(before)) indent += '    ';
    document.execCommand('insertText', false, '\n' + indent);
  }
}, true);
(function () {
  const KEY = {answer: 'sparring-draft-answer', code: 'sparring-draft-code'};
  const answerBox = () => document.querySelector('#answer-box textarea');
  const codeBox = () => document.querySelector('#code-box .cm-content');
  const codeText = (el) => Array.from(el.querySelectorAll('.cm-line')).map((l) => l.textContent).join('\n');
  // The draft is put back on the first few ticks of a session on screen, not once: on a slow
  // server the load's own update of the boxes can land after the first restore and empty them.
  const RESTORE_TICKS = 4;
  let restored = 0, seen = 0;
  // Once the candidate types or presses a button the page is theirs: no more restoring, or an
  // answer submitted within those ticks would come back into the box the submit just emptied.
  const mine = (e) => { if (e.isTrusted && seen >= 2) restored = RESTORE_TICKS; };
  document.addEventListener('input', mine, true);
  document.addEventListener('click', (e) => { if (e.target.closest('button')) mine(e); }, true);
  setInterval(function () {
    // A session is on screen once the page's load has drawn its clock (◷ …); before that there is
    // nothing to put a draft back into, and the boxes are not the candidate's yet.
    // (its text holds ◷ only once the load's answer arrived; a loading timer shows before that),
    // and one more tick lets that answer's other updates (the boxes) land first.
    const clock = document.querySelector('#countdown');
    if (!clock || !clock.textContent.includes('◷')) { seen = 0; return; }
    if (++seen < 2) return;
    const a = answerBox(), c = codeBox();
    const restoring = restored < RESTORE_TICKS;
    if (restoring) restored += 1;
    if (a) {
      const draft = localStorage.getItem(KEY.answer);
      if (restoring && draft && !a.value) {
        const set = Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, 'value').set;
        set.call(a, draft);
        a.dispatchEvent(new Event('input', {bubbles: true}));
      } else {
        localStorage.setItem(KEY.answer, a.value);
      }
    }
    if (c && c.offsetParent !== null) {
      const code = localStorage.getItem(KEY.code);
      if (restoring && code && !codeText(c).trim()) {
        c.focus();
        document.execCommand('selectAll', false);
        document.execCommand('insertText', false, code);
        c.blur();
      } else {
        localStorage.setItem(KEY.code, codeText(c));
      }
    }
  }, 1000);
})();
</script>
"""
# The charts' styles (ui/charts.py) go into the style tag reserved for them.
HEAD = HEAD.replace(
    '<style id="sparring-charts"></style>', f'<style id="sparring-charts">{CHART_CSS}</style>'
)

UI_LANGS = ["中文", "English"]
BUTTONS = ("submit", "related", "hint", "skip", "end")
CONFIRM_SECONDS = 10.0  # a second press of 结束面试 within this ends the interview


def area_bars(areas: list[str], scores: list[float]) -> list[tuple[str, float]]:
    """One bar per area (ui/charts.py labels each "area · score", 0 included)."""
    return [(a, float(s)) for a, s in zip(areas, scores, strict=True)]


def bars_update(rows: list[tuple[str, float]], x: str, y: str, elem: str) -> dict:
    return gr.update(value=bar_chart(rows, x, y, elem))


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
        return f"◷ **{t['time_up']}**" if deadline else ""
    if not deadline:
        return f"◷ {t['untimed']}"
    left = seconds_left(deadline)
    if left <= 0:
        return f"◷ **{t['time_up']}**"
    return f"◷ **{mm_ss(left)}** {t['left']}"


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
            late = f"\n\n◷ {t['late']}" if turn["late"] else ""
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
        wrong = m.get("text_en") if en and m.get("text_en") else m["text"]
        fix = m.get("correction_en") if en and m.get("correction_en") else m["correction"]
        lines.append(f"- ⚠ {readable_math(wrong)} → {readable_math(fix)}")
    tests = grade.get("tests", [])
    if tests:
        passed = sum(bool(x["passed"]) for x in tests)
        lines += ["", f"**{t['tests']}: {passed}/{len(tests)}**"]
        for test in tests:
            explain = test.get("explain_en") if en and test.get("explain_en") else test["explain"]
            message = failure_reason(test.get("message", ""), lang_key(ui_lang))
            why = "" if test["passed"] else f" — `{shorten(message, 200)}`"
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


def review_sections(markdown: str) -> list[tuple[str, str]]:
    """The per-question sections of the server's Markdown report: (heading, body) each."""
    _, _, questions = markdown.partition("\n## ")
    parts = questions.split("\n### ")[1:]
    out = []
    for part in parts:
        heading, _, body = part.partition("\n")
        out.append((heading.strip(), body.strip()))
    return out


def report_review(report: dict, markdown: str, ui_lang: str) -> str:
    """Every question's full review, one collapsible block each (closed; a tap opens it): the
    same Markdown as the downloaded report, under a one-line summary with the score."""
    t = tr(ui_lang)
    sections = review_sections(markdown)
    if not sections:
        return ""
    blocks = [f"### {t['review_title']}", "", t["review_hint"], ""]
    en = lang_key(ui_lang) == "en"
    for q, (heading, body) in zip(report["questions"], sections, strict=False):
        _, _, text = heading.partition(". ")
        plain = q.get("text_en") if en and q.get("text_en") else q["text"]
        summary = f"{q['number']}. {readable_math(shorten(plain, 90))} — {q['score']:g} / 10"
        blocks += [
            f'<details class="review-q" id="review-q{q["number"]}">'
            f"<summary><b>{summary}</b></summary>",
            "",
            f"**{text}**",
            "",
            body,
            "",
            "</details>",
            "",
        ]
    return "\n".join(blocks)


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
        # Where the entry comes from: the interview notes, or written for the newer field.
        source = f" · {t['supplementary']}" if r.get("source") == "supplementary" else ""
        lines.append(
            f"- {readable_math(shorten(text, 140))} — *{names.get(r['topic'], r['topic'])}*"
            f"{source}{score}"
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
        chart = area_bars(
            [names.get(a, a) for a in rep["per_topic"]], list(rep["per_topic"].values())
        )
        path = os.path.join(
            tempfile.mkdtemp(prefix="sparring-"), f"sparring-report-{session_id[:8]}.md"
        )
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(md)
        page = report_table(rep, ui_lang) + "\n\n" + report_review(rep, md, ui_lang)
        return page, chart_update(chart, ui_lang), path

    def chart_update(chart: list[tuple[str, float]], ui_lang: str):
        t = tr(ui_lang)
        return bars_update(chart, t["axis_topic"], t["axis_score"], "topic-chart")

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

    def resumed_card(session_id: str, state: dict, lang: str) -> str:
        """After a reload, the feedback card of the last graded answer: the question's full
        review once it is done; while a follow-up on it is pending, its score only (the missed
        points would give the follow-up away)."""
        t = tr(lang)
        graded = [
            x for x in state["turns"] if x["role"] == "candidate" and x.get("score") is not None
        ]
        if not graded or graded[-1].get("question_number") is None:
            return ""
        number = graded[-1]["question_number"]
        head = f"#### {question_label(number)[lang_key(lang)]} · {t['feedback']}\n\n"
        with contextlib.suppress(ApiError):
            rep = call(lambda c: c.report(session_id))
            md = call(lambda c: c.report_markdown(session_id, lang_key(lang)))
            numbers = [q["number"] for q in rep["questions"]]
            sections = review_sections(md)
            if number in numbers and len(sections) == len(numbers):
                return head + sections[numbers.index(number)][1]
        return head + f"**{t['score']}: {graded[-1]['score']:g} / 10**"

    def reference_view(session_id: str, result: dict, lang: str) -> str:
        """The reference answer of the question just graded, in the interface language: the
        bank's English one in English (the Chinese one, said so, where the bank has none yet)."""
        zh = result["grade"]["reference_answer"]
        if lang_key(lang) != "en":
            return bank_markdown(zh)
        with contextlib.suppress(ApiError):
            rep = call(lambda c: c.report(session_id))
            for q in rep["questions"]:
                if q["number"] == result.get("question_number") and q.get("reference_answer_en"):
                    return bank_markdown(q["reference_answer_en"])
        return f"*{tr(lang)['ref_zh_only']}*\n\n{bank_markdown(zh)}"

    def fixed_labels(lang: str, follow: bool = False) -> list:
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
            # The interviewer speaks the interface language unless the candidate chose otherwise.
            gr.update(
                label=t["language"],
                choices=language_choices(lang),
                **({"value": lang_key(lang)} if follow else {}),
            ),
            gr.update(value=t["start"]),
            gr.update(label=t["reference"]),
            gr.update(value=t["refresh"]),
            gr.update(label=t["search"]),
            gr.update(value=t["search_btn"]),
            t["mastery_title"],
            t["trend_title"],
            gr.update(label=t["voice"]),
            t["voice_send"],
            gr.update(value=t["clarify"]),
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
        lang_touched = gr.State(False)  # the candidate picked the interviewer language
        end_armed = gr.State(0.0)  # when 结束面试 was pressed once (a second press confirms)
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
                with gr.Row(elem_id="action-row"):
                    submit_btn = gr.Button(
                        T["zh"]["submit"], variant="primary", elem_id="submit-btn"
                    )
                    related_btn = gr.Button(T["zh"]["related"], elem_id="followup-btn")
                    hint_btn = gr.Button(T["zh"]["hint"], elem_id="hint-btn")
                    skip_btn = gr.Button(T["zh"]["skip"], elem_id="skip-btn")
                    end_btn = gr.Button(T["zh"]["end"], variant="stop", elem_id="end-btn")
                clarify_btn = gr.Button(T["zh"]["clarify"], size="sm", elem_id="clarify-btn")
                feedback = gr.Markdown(latex_delimiters=LATEX, elem_id="feedback")
                with gr.Accordion(T["zh"]["reference"], open=True, elem_id="ref-box") as ref_box:
                    reference = gr.Markdown(latex_delimiters=LATEX, elem_id="reference")
            with gr.Tab(T["zh"]["report"], id="report", elem_id="tab-report") as tab_report:
                report_md = gr.Markdown(
                    T["zh"]["report_empty"], latex_delimiters=LATEX, elem_id="report-table"
                )
                topic_chart = gr.HTML(elem_id="topic-chart")
                download = gr.DownloadButton(T["zh"]["download"], elem_id="download-btn")
            with gr.Tab(T["zh"]["bank"], id="bank", elem_id="tab-bank") as tab_bank:
                with gr.Row():
                    query = gr.Textbox(label=T["zh"]["search"], elem_id="search-box", scale=4)
                    search_btn = gr.Button(T["zh"]["search_btn"], elem_id="search-btn", scale=1)
                hits_md = gr.Markdown(elem_id="search-results")
            with gr.Tab(T["zh"]["history"], id="history", elem_id="tab-history") as tab_history:
                refresh_btn = gr.Button(T["zh"]["refresh"], elem_id="refresh-btn")
                mastery_title = gr.Markdown(T["zh"]["mastery_title"])
                mastery_chart = gr.HTML(elem_id="mastery")
                trend_title = gr.Markdown(T["zh"]["trend_title"])
                trend_chart = gr.HTML(elem_id="trend", visible=False)
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
                *fixed_labels(lang, follow=True),
            ]  # fmt: skip
            download_label = gr.update(label=t["download"])
            session_id = params.get("session") or (saved or {}).get("sid")
            nothing = (None, None, False, [], "", gr.update(), t["report_empty"], gr.update(),
                       download_label,
                       gr.update(visible=False), *buttons(True, False, lang=lang), "")  # fmt: skip
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
                        *buttons(False, False, lang=lang), "")  # fmt: skip
            return (*head, session_id, state["deadline"], False, chat_from_state(state, lang),
                    countdown_text(state["deadline"], lang), gr.Tabs(selected="interview"),
                    t["report_running"], gr.update(), download_label, contract_u,
                    *buttons(True, coding, lang=lang),
                    resumed_card(session_id, state, lang))  # fmt: skip

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
                return (f"⚠️ {msg}", *[gr.update()] * 19)
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
                *buttons(True, coding, clear=True, lang=lang),  # and its draft
                tr(lang)["report_running"],
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
                    ref = reference_view(session_id, result, lang)
                    ref_label = gr.update(label=t["reference_for"].format(label=label))
                else:
                    ref, ref_label = t["reference_wait"], gr.update(label=t["reference"])
            if state["status"] == "ended":
                table, chart, path = report_views(session_id, lang)
                return ("", chat_from_state(state, lang), card, ref, ref_label, True,
                        countdown_text(state["deadline"], lang, ended=True),
                        gr.Tabs(selected="report"), table, chart, path, contract_u,
                        *buttons(False, False, clear=True, lang=lang))  # fmt: skip
            return ("", chat_from_state(state, lang), card, ref, ref_label, False, gr.update(),
                    gr.update(), gr.update(), gr.update(), gr.update(), contract_u,
                    *buttons(True, coding, clear=True, lang=lang))  # fmt: skip

        def moved_on(session_id: str, chat_v: list | None) -> bool:
            """True when the server holds turns this page never showed (another tab answered):
            acting now would answer a question or probe the candidate has not seen."""
            if chat_v is None:
                return False
            try:
                state = call(lambda c: c.state(session_id))
            except ApiError:
                return False
            return state["status"] == "active" and len(state["turns"]) > len(chat_v)

        def act(kind: str):
            def handler(session_id, text, code_v, chat_v, lang):
                t = tr(lang)
                if not session_id:
                    return (f"⚠️ {t['no_session']}", *[gr.update()] * 18)
                if kind != "end" and moved_on(session_id, chat_v):
                    out = after_action(session_id, None, lang)
                    return (f"⚠️ {t['stale']}", *out[1:-2], gr.update(), gr.update())
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
            )
            done = [s for s in prog["sessions"] if s.get("average") is not None]
            # The last 15 scored sessions, numbered from the first one ever.
            trend = [(f"#{i}", s["average"]) for i, s in enumerate(done, start=1)][-15:]
            if not prog["sessions"]:
                return (
                    "",
                    bars_update(mastery, t["axis_topic"], t["axis_mastery"], "mastery"),
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
                count = s["questions"]
                running = s["status"] == "active"
                if running:
                    # Questions still open are not scored yet: say so rather than "0, —"; the link
                    # reopens the interview, where it continues or 结束面试 closes it.
                    count = f"{count}+" if count else "…"
                    avg = t["status_active"] if s["average"] is None else f"{avg}…"
                link = (
                    f"[{t['resume'] if running else t['open_report']}]"
                    f"(?session={s['id']}&lang={lang_key(lang)})"
                )
                rows.append(
                    f"| {readable_time(s['created_at'])} | {cell(shorten(title, 50))} "
                    f"| {t.get('mode_' + s['mode'], s['mode'])} | {status} | {count} "
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
                gr.update(value=line_chart(trend, t["axis_session"], t["axis_score"]), visible=True)
                if len(done) >= 2
                else gr.update(visible=False)
            )
            mastery_u = bars_update(mastery, t["axis_topic"], t["axis_mastery"], "mastery")
            return "", mastery_u, trend_u, "\n".join(rows), "\n".join(queue)

        def on_lang(lang, companies_v, topics_v, session_id, ended_v, deadline_v, touched):
            t = tr(lang)
            info = safe_info()
            opts = options(companies_v)
            chat_u = gr.update()
            if session_id:
                with contextlib.suppress(ApiError):
                    chat_u = chat_from_state(call(lambda c: c.state(session_id)), lang)
            return (
                lang,
                *fixed_labels(lang, follow=not touched),
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
                    search_btn, mastery_title, trend_title, voice, voice_btn,
                    clarify_btn]  # fmt: skip
        demo.load(
            on_load,
            inputs=[store, lang_store],
            outputs=[ui_lang, short, companies, topics, filters_md, llm_note, grader, *labelled,
                     sid, deadline, ended, chat, clock, tabs, report_md, topic_chart, download,
                     contract, *widgets, feedback],
        )  # fmt: skip
        start_btn.click(
            on_start,
            inputs=[mode, companies, topics, difficulty, duration, num_questions, language,
                    grader, ui_lang, short],
            outputs=[error, sid, deadline, ended, store, chat, clock, tabs, feedback, reference,
                     contract, ref_box, *widgets, report_md],
        )  # fmt: skip
        action_outputs = [error, chat, feedback, reference, ref_box, ended, clock, tabs,
                          report_md, topic_chart, download, contract, *widgets]  # fmt: skip
        for btn, kind in ((submit_btn, "answer"), (skip_btn, "skip"), (hint_btn, "hint"),
                          (related_btn, "related")):  # fmt: skip
            btn.click(act(kind), inputs=[sid, answer, code, chat, ui_lang], outputs=action_outputs)

        end_now = act("end")

        def on_end(session_id, armed, text, code_v, chat_v, lang):
            """结束面试 asks first: the first press turns the button into a confirmation, a second
            press within CONFIRM_SECONDS ends the interview."""
            t = tr(lang)
            if session_id and time.time() - (armed or 0.0) > CONFIRM_SECONDS:
                keep = [gr.update()] * 18
                keep[15] = gr.update(value=t["end_confirm"])  # the end button (widgets[4])
                return ("", *keep, time.time())
            return (*end_now(session_id, text, code_v, chat_v, lang), 0.0)

        end_btn.click(
            on_end,
            inputs=[sid, end_armed, answer, code, chat, ui_lang],
            outputs=[*action_outputs, end_armed],
        )

        def on_clarify(session_id, text, lang):
            """A question about the question (scope, notation): answered, not graded."""
            t = tr(lang)
            if not session_id:
                return f"⚠️ {t['no_session']}", gr.update(), gr.update()
            question = (text or "").strip()
            if not question:
                return f"⚠️ {t['ask_first']}", gr.update(), gr.update()
            try:
                call(lambda c: c.clarify(session_id, question))
                state = call(lambda c: c.state(session_id))
            except ApiError as exc:
                return (
                    f"⚠️ {error_sentence(exc.code, exc.status, exc.message, lang)}",
                    gr.update(),
                    gr.update(),
                )
            return "", chat_from_state(state, lang), gr.update(value="")

        clarify_btn.click(on_clarify, inputs=[sid, answer, ui_lang], outputs=[error, chat, answer])
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
        # .input fires on the candidate's own choice only, not when the interface language sets it
        language.input(lambda: True, outputs=[lang_touched])
        history_outputs = [error, mastery_chart, trend_chart, sessions_md, queue_md]
        refresh_btn.click(on_refresh, inputs=[ui_lang], outputs=history_outputs)
        tab_history.select(on_refresh, inputs=[ui_lang], outputs=history_outputs)
        ui_lang.change(
            on_lang,
            inputs=[ui_lang, companies, topics, sid, ended, deadline, lang_touched],
            outputs=[lang_store, *labelled, companies, topics, filters_md, grader, llm_note,
                     answer, code, submit_btn, related_btn, hint_btn, skip_btn, end_btn, download,
                     chat, clock],
        )  # fmt: skip
    return demo
