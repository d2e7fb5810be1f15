"""The review in the app, English parity and UX v3 in Debian's Chromium (issue #27).

Report tab: an empty state before the first interview, then every question's full review (the same
content as the Markdown report), collapsible. English: `/?lang=en` keeps its query, the interviewer
follows the interface language, its lines carry English topic names. UX: drafts survive a reload,
the code editor indents by four, 结束面试 asks first, a stale second tab does not answer, a
clarifying question has its own button, a running session in History can be resumed, and on a phone
the countdown stays in view and the buttons share rows. Screenshots: docs/screenshots/ (report-review,
phone-interview-en, phone-report-review-en)."""

from __future__ import annotations

import re
import shutil
import time

import pytest

from tests.test_ui_browser import (
    ARTIFACTS,
    DESKTOP,
    PHONE,
    WEAK,
    answer,
    api,
    bars,
    browser,  # noqa: F401  (fixture)
    coding_session,
    goto_tab,
    new_page,
    open_ui,
    server,  # noqa: F401  (fixture)
    shot,
    start,
    text_of,
    ui_url,  # noqa: F401  (fixture)
    wait_text,
)

pytestmark = pytest.mark.browser
CJK = re.compile(r"[\u3400-\u9fff]")
DOCS = ARTIFACTS.parents[1] / "docs" / "screenshots"


def publish(name: str) -> None:
    shutil.copy(ARTIFACTS / f"{name}.png", DOCS / f"{name}.png")


def weak_session(url: str, language: str, questions: int = 2) -> str:
    """A finished practice session: every question answered weakly (probes skipped), then ended."""
    with api(url) as c:
        r = c.post(
            "/api/sessions",
            json={"mode": "practice", "num_questions": questions, "language": language,
                  "seed": 4, "topics": ["grpo"]},
        )  # fmt: skip
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        for _ in range(3 * questions):
            body = c.post(f"/api/sessions/{sid}/answers", json={"answer": WEAK}).json()
            if body.get("next", {}).get("kind", "end") == "end":
                break
            if body["next"]["kind"] == "probe":
                skipped = c.post(f"/api/sessions/{sid}/skip").json()
                if skipped.get("next", {}).get("kind", "end") == "end":
                    break
        c.post(f"/api/sessions/{sid}/end")
    return sid


def test_report_tab_empty_state_then_the_full_review_of_every_question(browser, server):  # noqa: F811
    context, page = new_page(browser)
    try:
        open_ui(page, server, "?lang=zh")
        goto_tab(page, "报告")
        wait_text(page, "#report-table", "还没有报告")
        sid = weak_session(server, "zh")
        with api(server) as c:
            report = c.get(f"/api/sessions/{sid}/report").json()
            md = c.get(f"/api/sessions/{sid}/report", params={"format": "md", "lang": "zh"}).text
        page.goto(f"{server}/ui/?session={sid}&lang=zh")
        wait_text(page, "#report-table", "逐题复盘")
        blocks = page.locator("#report-table details.review-q")
        assert blocks.count() == len(report["questions"]) >= 2
        first = blocks.first
        assert not first.evaluate("d => d.open")  # closed until tapped
        first.locator("summary").first.click()
        assert first.evaluate("d => d.open")
        inside = first.inner_text()
        # The same content as the Markdown report: points, probes asked, the reference answer.
        assert "✗" in inside and "参考答案" in inside
        q1 = report["questions"][0]
        for missed in q1["missed"][:2]:
            assert missed["text"][:8] in inside
        if q1["probes_asked"]:
            assert "追问过" in inside and "追问过" in md
        first.locator("details summary").first.click()  # the reference opens inside it
        shot(page, "report-review")
        publish("report-review")
    finally:
        context.close()


def test_english_phone_interview_follows_the_interface_language(browser, server):  # noqa: F811
    context, page = new_page(browser, PHONE)
    try:
        page.goto(f"{server}/?lang=en")  # the redirect keeps the query
        assert page.url.endswith("/ui/?lang=en"), page.url
        page.locator("#start-btn").wait_for()
        wait_text(page, "#start-btn", "Start interview")
        checked = page.locator("#interviewer-language input:checked")
        assert checked.get_attribute("value") in ("en", "English"), checked.get_attribute("value")
        page.locator("#mode").get_by_text("Practice").click()
        page.locator("#num-questions input[type=number]").fill("2")
        page.locator("#num-questions input[type=number]").press("Tab")
        page.locator("#start-btn").click()
        wait_text(page, "#chat", "Question 1 (")
        first = text_of(page, "#chat")
        assert not CJK.search(first), first[:300]
        # The five buttons share rows on a phone (not one full-width button per row).
        tops = {round(page.locator(b).bounding_box()["y"]) for b in
                ("#submit-btn", "#followup-btn", "#hint-btn", "#skip-btn", "#end-btn")}  # fmt: skip
        assert len(tops) <= 2, tops
        assert "max −2.5 each" in text_of(page, "#hint-btn")
        # A draft survives a reload.
        page.locator("#answer-box textarea").fill("My draft about the group baseline")
        # The page saves the draft on its once-a-second tick, which starts only once the session
        # is on screen: wait for the save itself (a fixed 1.5 s was not enough on a loaded machine).
        page.wait_for_function(
            "localStorage.getItem('sparring-draft-answer') === 'My draft about the group baseline'",
            timeout=20_000,
        )
        page.reload()
        page.locator("#start-btn").wait_for()
        wait_text(page, "#chat", "Question 1 (")
        deadline = time.time() + 20
        while page.locator("#answer-box textarea").input_value() != (
            "My draft about the group baseline"
        ):
            assert time.time() < deadline, page.locator("#answer-box textarea").input_value()
            page.wait_for_timeout(250)
        page.locator("#answer-box textarea").fill(WEAK)
        page.locator("#submit-btn").click()
        wait_text(page, "#feedback", "Q1 · Feedback")
        # An answer sent right after the reload does not come back as a draft into the emptied box.
        for _ in range(6):
            assert page.locator("#answer-box textarea").input_value() != WEAK
            page.wait_for_timeout(500)
        # The countdown stays in view when the page is scrolled down.
        page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
        page.wait_for_timeout(300)
        box = page.locator("#countdown").bounding_box()
        assert box and -2 <= box["y"] < PHONE["height"], box
        shot(page, "phone-interview-en")
        publish("phone-interview-en")
        chat = text_of(page, "#chat") + text_of(page, "#feedback")
        assert not CJK.search(chat.replace(WEAK, "")), CJK.findall(chat)[:20]
        # 结束面试 asks first: one press changes nothing but the button.
        page.locator("#end-btn").click()
        wait_text(page, "#end-btn", "Click again")
        assert page.locator("#submit-btn").is_enabled()
        page.locator("#end-btn").click()
        wait_text(page, "#report-table", "Question by question")
        review = page.locator("#report-table details.review-q").first
        review.locator("summary").first.click()
        assert "Reference answer" in review.inner_text()
        shot(page, "phone-report-review-en")
        publish("phone-report-review-en")
    finally:
        context.close()


def test_code_indent_stale_tab_clarify_and_history_resume(browser, server):  # noqa: F811
    sid = coding_session(server, "zh")
    context, page = new_page(browser)
    try:
        page.goto(f"{server}/ui/?session={sid}&lang=zh")
        wait_text(page, "#chat", "第 1 题")
        wait_text(page, "#contract", "grpo_advantages")
        # Python indents by four: after a colon Enter gives four, Tab moves to the next four.
        page.locator("#code-box .cm-content").click()
        page.keyboard.type("def f(x):")
        page.keyboard.press("Enter")
        page.keyboard.type("if x:")
        page.keyboard.press("Enter")
        page.keyboard.type("return x")
        lines = page.locator("#code-box .cm-line").all_inner_texts()
        assert lines[:3] == ["def f(x):", "    if x:", "        return x"], lines
        # A clarifying question has its own control and is not graded.
        page.locator("#answer-box textarea").fill("rewards 的形状是什么？")
        page.locator("#clarify-btn").click()
        wait_text(page, "#chat", "答疑")
        assert page.locator("#answer-box textarea").input_value() == ""
        # A second tab on the same interview falls behind: it must not answer what it never saw.
        stale = context.new_page()
        stale.goto(f"{server}/ui/?session={sid}&lang=zh")
        wait_text(stale, "#chat", "答疑")
        with api(server) as c:
            c.post(f"/api/sessions/{sid}/answers", json={"answer": WEAK})
        before = len(c_turns(server, sid))
        stale.locator("#answer-box textarea").fill("过时标签页里的回答")
        stale.locator("#submit-btn").click()
        wait_text(stale, "#error-box", "另一个标签页")
        assert len(c_turns(server, sid)) == before  # nothing was sent
        assert stale.locator("#answer-box textarea").input_value() == "过时标签页里的回答"
        # History: the running session can be reopened (to continue or end it).
        goto_tab(page, "历史")
        wait_text(page, "#sessions", "继续或结束")
    finally:
        context.close()


def c_turns(url: str, sid: str) -> list[dict]:
    with api(url) as c:
        return c.get(f"/api/sessions/{sid}").json()["turns"]


def warnings_of(page) -> list[str]:
    """The page's console warnings and errors from now on (a list filled as they come)."""
    seen: list[str] = []
    page.on(
        "console",
        lambda m: seen.append(f"{m.type}: {m.text}") if m.type in ("warning", "error") else None,
    )
    return seen


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_report_and_history_charts_log_no_vega_lite_warning(browser, server, lang):  # noqa: F811
    """Gradio's plots declared Vega-Lite v5.17 to a bundled v6 and logged a version warning with
    every chart; the charts are HTML now (ui/charts.py): bars labelled with their scores, a trend."""
    zh = lang == "zh"
    sids = [weak_session(server, lang) for _ in range(2)]  # two scored sessions: a trend too
    for viewport in (DESKTOP, PHONE):
        context, page = new_page(browser, viewport)
        try:
            seen = warnings_of(page)
            page.goto(f"{server}/ui/?session={sids[-1]}&lang={lang}")
            wait_text(page, "#report-table", "逐题复盘" if zh else "Question by question")
            wait_text(page, "#topic-chart", "领域" if zh else "Area")
            [(label, size)] = bars(page, "#topic-chart")
            assert re.search(r" · \d+(\.\d)?$", label) and size > 1, (label, size)
            goto_tab(page, "历史" if zh else "History")
            wait_text(page, "#sessions", "打开报告" if zh else "Open report")
            page.locator("#mastery .sp-bar").first.wait_for(state="attached")
            page.locator("#trend svg").first.wait_for()
            assert page.locator("#trend svg circle").count() >= 2  # a point per scored session
            shot(page, f"charts-{lang}-{viewport['width']}")
            page.wait_for_timeout(1000)  # late console messages
            vega = [m for m in seen if "vega" in m.lower()]
            assert not vega, vega
        finally:
            context.close()


def interview_with_feedback(page, url: str, lang: str) -> None:
    """The interview tab after one weak answer: the question, the answer and its feedback card."""
    open_ui(page, url, f"?lang={lang}")
    page.locator("#mode").get_by_text("练习" if lang == "zh" else "Practice").click()
    start(page, questions=2)
    wait_text(page, "#chat", "第 1 题" if lang == "zh" else "Question 1")
    answer(page, WEAK if lang == "zh" else "Not sure, something about sampling I think.")
    wait_text(page, "#feedback", "反馈" if lang == "zh" else "Feedback")


@pytest.mark.parametrize("lang", ["zh", "en"])
def test_screenshots_of_the_review_and_the_interview(browser, server, lang):  # noqa: F811
    """docs/screenshots/: the Report tab's review (a question opened) and the interview tab with a
    feedback card, desktop and phone, in both languages."""
    zh = lang == "zh"
    sid = weak_session(server, lang)
    names = {  # (review, interview); the desktop zh ones keep the names the README shows
        ("zh", "desktop"): ("report-review", "interview"),
        ("zh", "phone"): ("phone-report-review-zh", "phone-interview-zh"),
        ("en", "desktop"): ("report-review-en", "interview-en"),
        ("en", "phone"): ("phone-report-review-en", "phone-interview-en"),
    }
    for viewport, kind in ((DESKTOP, "desktop"), (PHONE, "phone")):
        review_name, interview_name = names[(lang, kind)]
        context, page = new_page(browser, viewport)
        try:
            page.goto(f"{server}/ui/?session={sid}&lang={lang}")
            wait_text(page, "#report-table", "逐题复盘" if zh else "Question by question")
            review = page.locator("#report-table details.review-q").first
            review.locator("summary").first.click()
            assert review.evaluate("d => d.open")
            shot(page, review_name)
            publish(review_name)
            interview_with_feedback(page, server, lang)
            assert zh or not CJK.search(text_of(page, "#feedback"))
            shot(page, interview_name)
            publish(interview_name)
        finally:
            context.close()
