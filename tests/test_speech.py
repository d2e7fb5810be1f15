"""Spoken answers: espeak-ng speech uploaded to the real app, transcribed through litellm by the
scripted OpenAI-compatible speech endpoint, the transcript landing as the answer."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import client_for
from tests.support.scripted_llm import ScriptedLLM
from tests.support.servers import derived_services, serve_services

SPOKEN = "对同一个 prompt 采样一组回答，baseline 取组内奖励的均值，再除以标准差。"


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory) -> bytes:
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    path: Path = tmp_path_factory.mktemp("speech") / "answer.wav"
    subprocess.run(["espeak-ng", "-v", "cmn", "-w", str(path), SPOKEN], check=True)
    return path.read_bytes()


@pytest.fixture(scope="module")
def speech() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture(scope="module")
def url(services, speech, tmp_path_factory) -> Iterator[str]:
    # Its own database: the sessions made here must not show up in other tests' users.
    database = tmp_path_factory.mktemp("speech-db") / "sparring.db"
    svc = derived_services(
        services,
        database_url=f"sqlite:///{database}",
        speech_model="openai/whisper-1",
        speech_api_base=speech.base_url,
        speech_api_key="test-key",
        speech_timeout_seconds=2,
    )
    with serve_services(svc) as (base, _app):
        yield base


@pytest.fixture()
def api(url) -> Iterator[httpx.Client]:
    with client_for(url, "erin") as c:
        yield c


def start(api: httpx.Client) -> str:
    body = {"mode": "practice", "num_questions": 1, "topics": ["GRPO优势基线"], "seed": 7}
    r = api.post("/api/sessions", json=body)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def turns(api: httpx.Client, sid: str) -> list[dict]:
    return api.get(f"/api/sessions/{sid}").json()["turns"]


def upload(api: httpx.Client, sid: str, audio: bytes, content_type: str = "audio/wav"):
    return api.post(
        f"/api/sessions/{sid}/answers/audio", files={"file": ("mic.wav", audio, content_type)}
    )


def test_the_transcript_lands_as_the_answer(api, speech, speech_wav):
    assert api.get("/api/info").json()["speech_enabled"] is True
    sid = start(api)
    speech.script(("transcript", SPOKEN))
    r = upload(api, sid, speech_wav)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["transcript"] == SPOKEN
    assert body["grade"]["score"] > 3  # graded like the typed answer: the spoken one is good
    last = [t for t in turns(api, sid) if t["kind"] == "answer"][-1]
    assert last["text"] == SPOKEN and last["role"] == "candidate"
    # The wire: litellm's transcription call, multipart, the audio as uploaded.
    (request,) = speech.requests
    assert request["path"] == "/v1/audio/transcriptions"
    assert request["model"] == "whisper-1" and request["language"] == "zh"
    assert request["audio"] == speech_wav and request["audio"][:4] == b"RIFF"
    assert request["filename"] == "answer.wav" and request["file_type"] == "audio/wav"


@pytest.mark.parametrize(
    ("step", "status", "code"),
    [
        (("status", 500), 502, "transcription_failed"),
        (("slow", 5, SPOKEN), 504, "transcription_timeout"),
        (("transcript", "   "), 422, "empty_transcript"),
    ],
)
def test_a_failed_transcription_records_nothing(api, speech, speech_wav, step, status, code):
    sid = start(api)
    before = turns(api, sid)
    speech.script(step)
    r = upload(api, sid, speech_wav)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert turns(api, sid) == before


def test_bad_uploads_are_refused_before_the_speech_service(api, speech, speech_wav):
    sid = start(api)
    speech.script()
    r = upload(api, sid, b"hello", content_type="text/plain")
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_audio"
    r = upload(api, sid, b"")
    assert r.status_code == 422 and r.json()["error"]["code"] == "empty_audio"
    r = api.post(f"/api/sessions/{sid}/answers/audio", data={"nothing": "here"})
    assert r.status_code == 422
    api.post(f"/api/sessions/{sid}/end")
    r = upload(api, sid, speech_wav)
    assert r.status_code == 409 and r.json()["error"]["code"] == "session_ended"
    assert speech.requests == []  # none of these reached the speech service


def test_without_a_speech_service_the_route_is_off(alice, speech_wav):
    assert alice.get("/api/info").json()["speech_enabled"] is False
    sid = start(alice)
    r = upload(alice, sid, speech_wav)
    assert r.status_code == 404 and r.json()["error"]["code"] == "speech_disabled"


def test_a_spoken_answer_may_be_larger_than_a_json_body_but_not_unbounded(alice, speech_wav):
    # Two minutes of 16 kHz mono WAV (~3.8 MB) passes the guard's audio limit and reaches the
    # route, which is off here; the same size as JSON, or audio beyond the audio limit, is 413.
    sid = start(alice)
    minutes = speech_wav + b"\0" * 3_800_000
    r = upload(alice, sid, minutes)
    assert r.status_code == 404 and r.json()["error"]["code"] == "speech_disabled"
    r = alice.post(
        f"/api/sessions/{sid}/answers",
        content=b'{"answer": "' + b"x" * 3_800_000 + b'"}',
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
    r = upload(alice, sid, speech_wav + b"\0" * 13_000_000)
    assert r.status_code == 413 and r.json()["error"]["code"] == "body_too_large"
