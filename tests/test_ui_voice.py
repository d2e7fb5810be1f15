"""Spoken answers in the Gradio UI (issue #16 item 3), in Debian's Chromium driven by Playwright.

An espeak-ng WAV is uploaded through the audio component of a UI whose server names the scripted
OpenAI-compatible speech endpoint: a failed transcription reads as a sentence in the interface
language and records nothing; the transcript then lands in the chat as the answer and is graded.
Without a speech service the component is not shown."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.api.app import create_app
from tests.conftest import client_for, free_port, token_for
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import derived_services, serve_app
from tests.test_ui_browser import ARGS, CHROMIUM, open_ui, pick, shot, start, text_of, wait_text
from ui.audio import speech_wav as speech_wav_16k

SPOKEN = "对同一个 prompt 采样一组回答，baseline 取组内奖励的均值，再除以标准差。"
TOPIC = "GRPO优势基线"
pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory) -> Path:
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    path: Path = tmp_path_factory.mktemp("ui-speech") / "answer.wav"
    subprocess.run(["espeak-ng", "-v", "cmn", "-w", str(path), SPOKEN], check=True)
    return path


@pytest.fixture(scope="module")
def speech() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture(scope="module")
def voice_server(services, speech, tmp_path_factory) -> Iterator[str]:
    """The app with its UI mounted and a speech service: the scripted endpoint."""
    database = tmp_path_factory.mktemp("ui-speech-db") / "sparring.db"
    svc = derived_services(
        services,
        database_url=f"sqlite:///{database}",
        speech_model="openai/whisper-1",
        speech_api_base=speech.base_url,
        speech_api_key="test-key",
        speech_timeout_seconds=5,
    )
    port = free_port()
    settings = svc.settings.model_copy(
        update={"port": port, "ui_enabled": True, "ui_token": token_for("frank")}
    )
    with serve_app(create_app(settings, svc), port=port) as url:
        yield url


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: `make test` installs Debian's chromium"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        page = context.new_page()
        page.set_default_timeout(60_000)
        yield page
        browser.close()


def upload(page, wav: Path) -> None:
    """Put a file into the audio component through its upload source (the microphone is first)."""
    box = page.locator("#voice-box")
    box.get_by_role("button", name=re.compile("upload", re.I)).first.click()
    box.locator("input[type=file]").set_input_files(str(wav))
    box.locator("audio, .waveform-container, button[aria-label*='Clear' i]").first.wait_for()


def answers(server: str) -> list[dict]:
    """The candidate's answer turns of the UI user's newest session, as the server has them."""
    with client_for(server, "frank") as c:
        newest = c.get("/api/progress").json()["sessions"][-1]
        turns = c.get(f"/api/sessions/{newest['id']}").json()["turns"]
    return [t for t in turns if t["role"] == "candidate" and t["kind"] == "answer"]


def test_a_spoken_answer_is_transcribed_into_the_chat_and_graded(
    page, voice_server, speech, speech_wav
):
    open_ui(page, voice_server, "?lang=zh")
    page.locator("#mode").get_by_text("自由练习").click()
    pick(page, "#topics", TOPIC)
    start(page, questions=1)
    wait_text(page, "#chat", "第 1 题")
    assert page.locator("#voice-box").is_visible() and text_of(page, "#voice-btn") == "发送语音回答"
    upload(page, speech_wav)

    # The speech service fails: a sentence saying what to do, and nothing is recorded.
    speech.script(("status", 500))
    page.locator("#voice-btn").click()
    wait_text(page, "#error-box", "没听清，请再录一次或直接输入")
    assert answers(voice_server) == []
    assert len(speech.requests) == 1

    # The same, in English, after switching the interface language (the recording stays).
    page.locator("#ui-lang").get_by_text("English").click()
    wait_text(page, "#voice-btn", "Send spoken answer")
    speech.script(("transcript", "   "))
    page.locator("#voice-btn").click()
    wait_text(page, "#error-box", "No speech was heard")
    assert answers(voice_server) == []

    # Now it is heard: the transcript is the answer in the chat, and it is graded.
    speech.script(("transcript", SPOKEN))
    page.locator("#voice-btn").click()
    wait_text(page, "#chat", "baseline 取组内奖励的均值")
    wait_text(page, "#feedback", "Q1 · Feedback")
    shot(page, "voice-answer")
    score = re.search(r"Score: ([\d.]+) / 10", text_of(page, "#feedback"))
    assert score and float(score.group(1)) > 3, text_of(page, "#feedback")
    assert "⚠️" not in text_of(page, "#error-box")
    (spoken,) = answers(voice_server)
    assert spoken["text"] == SPOKEN
    # What the browser uploaded reached the speech endpoint, as 16 kHz mono WAV (ui/audio.py).
    request = speech.requests[-1]
    assert request["path"] == "/v1/audio/transcriptions" and request["language"] == "zh"
    assert request["audio"] == speech_wav_16k(speech_wav.read_bytes())
    assert request["audio"][:4] == b"RIFF" and request["file_type"] == "audio/wav"


def test_without_a_speech_service_there_is_no_microphone(page, base_url):
    with client_for(base_url, "frank") as c:
        assert c.get("/api/info").json()["speech_enabled"] is False
    open_ui(page, base_url, "?lang=zh")
    page.locator("#mode").get_by_text("自由练习").click()
    start(page, questions=1)
    wait_text(page, "#chat", "第 1 题")
    assert page.locator("#answer-box textarea").is_visible()
    assert not page.locator("#voice-box").is_visible()
    assert not page.locator("#voice-btn").is_visible()
