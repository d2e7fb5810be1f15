"""The Gradio UI end to end in Debian's Chromium, driven by Playwright: a two-question interview."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts" / "ui"
CHROMIUM = os.environ.get("SPARRING_CHROMIUM", "/usr/bin/chromium")
pytestmark = pytest.mark.browser

if os.environ.get("SPARRING_SKIP_BROWSER") == "1":
    pytest.skip("browser tests disabled by SPARRING_SKIP_BROWSER=1", allow_module_level=True)


@pytest.fixture(scope="module")
def page(base_url, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: `make test` installs Debian's chromium"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(60_000)
        yield page
        context.close()
        browser.close()


def wait_text(page, selector: str, text: str, timeout_s: float = 60) -> None:
    """Wait until an element's visible text contains `text`; on failure say what the page showed."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        loc = page.locator(selector)
        if loc.count() and text in loc.first.inner_text():
            return
        page.wait_for_timeout(250)
    shot(page, "failure")
    shown = page.locator("#error-box").inner_text()
    raise AssertionError(f"{text!r} never appeared in {selector}; error box: {shown!r}")


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_two_question_interview_in_the_browser(page, base_url):
    page.goto(f"{base_url}/ui/")
    page.locator("#start-btn").wait_for()
    page.locator("#num-questions input[type=number]").fill("2")
    page.locator("#num-questions input[type=number]").press("Tab")
    shot(page, "1-setup")
    page.locator("#start-btn").click()

    wait_text(page, "#chat", "第 1 题")
    assert "⏱" in page.locator("#countdown").inner_text()

    answer = page.locator("#answer-box textarea")
    answer.fill(
        "GRPO 对同一个 prompt 采样一组回答，用组内奖励均值做 baseline，再除以标准差得到优势。"
    )
    answer.press("Control+Enter")  # the keyboard shortcut submits
    feedback = page.locator("#feedback")
    wait_text(page, "#feedback", "得分")
    assert "/ 10" in feedback.inner_text()
    shot(page, "2-interview")
    shutil.copy(ARTIFACTS / "2-interview.png", ARTIFACTS / "interview.png")

    # Skip until the interview ends (probes and the second question), then the report shows.
    for _ in range(8):
        if page.locator("#report-table").get_by_text("Overall").count():
            break
        page.locator("#skip-btn").click()
        page.wait_for_timeout(1500)
    report = page.locator("#report-table")
    wait_text(page, "#report-table", "Overall")
    assert report.locator("tbody tr").count() == 2
    assert page.locator("#download-btn").count() == 1
    shot(page, "3-report")

    # An API error reaches the user as a readable message (the interview has ended).
    page.get_by_role("tab", name="面试").click()
    page.locator("#hint-btn").click()
    wait_text(page, "#error-box", "ended")

    page.get_by_role("tab", name="历史").click()
    page.locator("#refresh-btn").click()
    wait_text(page, "#sessions", "interview")
    shot(page, "4-history")

    # Reloading the page comes back to the same session (its report, as it has ended).
    page.reload()
    wait_text(page, "#report-table", "Overall")


def test_reload_resumes_a_running_interview(page, base_url):
    page.goto(f"{base_url}/ui/")
    # The browser still remembers the ended interview of the previous test (its report shows).
    wait_text(page, "#report-table", "Overall")
    page.get_by_role("tab", name="设置").click()
    page.locator("#start-btn").click()
    wait_text(page, "#chat", "第 1 题")
    first_question = page.locator("#chat").inner_text()
    page.reload()
    wait_text(page, "#chat", "第 1 题")
    assert page.locator("#chat").inner_text().strip()[:40] == first_question.strip()[:40]


def test_interface_switches_to_english(page, base_url):
    page.goto(f"{base_url}/ui/")
    page.locator("#ui-lang").get_by_text("English").click()
    wait_text(page, "#start-btn", "Start interview")
    shot(page, "5-english")
