"""The Gradio UI end to end in Debian's Chromium, driven by Playwright: a two-question interview."""

from __future__ import annotations

import os
import shutil
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


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_two_question_interview_in_the_browser(page, base_url):
    page.goto(f"{base_url}/ui/")
    page.locator("#start-btn").wait_for()
    page.locator("#num-questions input[type=number]").fill("2")
    page.locator("#num-questions input[type=number]").press("Tab")
    shot(page, "1-setup")
    page.locator("#start-btn").click()

    chat = page.locator("#chat")
    chat.get_by_text("第 1 题").wait_for()
    assert "⏱" in page.locator("#countdown").inner_text()

    answer = page.locator("#answer-box textarea")
    answer.fill(
        "GRPO 对同一个 prompt 采样一组回答，用组内奖励均值做 baseline，再除以标准差得到优势。"
    )
    answer.press("Control+Enter")  # the keyboard shortcut submits
    feedback = page.locator("#feedback")
    feedback.get_by_text("得分").wait_for()
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
    report.get_by_text("Overall").wait_for()
    assert report.locator("tbody tr").count() == 2
    assert page.locator("#download-btn").count() == 1
    shot(page, "3-report")

    # An API error reaches the user as a readable message (the interview has ended).
    page.get_by_role("tab", name="面试").click()
    page.locator("#hint-btn").click()
    page.locator("#error-box").get_by_text("ended").wait_for()

    page.get_by_role("tab", name="历史").click()
    page.locator("#refresh-btn").click()
    page.locator("#sessions").get_by_text("interview").first.wait_for()
    shot(page, "4-history")

    # Reloading the page comes back to the same session (its report, as it has ended).
    page.reload()
    page.locator("#report-table").get_by_text("Overall").wait_for()


def test_reload_resumes_a_running_interview(page, base_url):
    page.goto(f"{base_url}/ui/")
    page.locator("#start-btn").click()
    page.locator("#chat").get_by_text("第 1 题").wait_for()
    first_question = page.locator("#chat").inner_text()
    page.reload()
    page.locator("#chat").get_by_text("第 1 题").wait_for()
    assert page.locator("#chat").inner_text().strip()[:40] == first_question.strip()[:40]


def test_interface_switches_to_english(page, base_url):
    page.goto(f"{base_url}/ui/")
    page.locator("#ui-lang").get_by_text("English").click()
    page.get_by_role("button", name="Start interview").wait_for()
    shot(page, "5-english")
