"""`make test-cluster`: the scale-out topology on real engines, on loopback.

PostgreSQL (pgserver's wheel), a Chroma server (`chroma run`), the index built into it with
`sparring ingest`, and two API processes (`sparring serve --workers 2` and `sparring serve`). One
interview's turns alternate between the processes, both post at once, one process is SIGKILLed
while it grades an answer, and the interview finishes on the other. Then every turn, grade and the
report are checked against what the clients were told and against the database itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.conftest import free_port
from tests.support.engines import chroma_server, postgres_server

ROOT = Path(__file__).resolve().parents[2]
# CI shares its machine (issue #24: this failed at load average 10 on 2 cores). Every wait below is
# for a condition; these ceilings only end a wait that will never succeed.
START_CEILING = 900.0  # a process importing torch, loading the model and building its app
REQUEST_CEILING = 600.0  # one HTTP request, grading included
# pytest-timeout's 600 s per test (pyproject) counts the module fixture's start-up (PostgreSQL,
# Chroma, the ingest, two servers) into the first test; on a busy machine that alone exceeds it.
pytestmark = pytest.mark.timeout(3600)
ANSWER = (
    "GRPO 对同一个 prompt 采样一组回答，用组内奖励的均值做 baseline、再除以标准差得到优势，"
    "所以不需要 critic；PPO 的 clip 限制新旧策略比值，KL 惩罚防止偏离参考模型。"
)


@dataclass
class ApiProcess:
    name: str
    url: str
    proc: subprocess.Popen
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)  # no shutdown hooks, no flush: a crash
            self.proc.wait(timeout=REQUEST_CEILING)

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=REQUEST_CEILING)
            except subprocess.TimeoutExpired:
                self.kill()


def sparring(*args: str, env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "server.cli", *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its uvicorn workers die with it on SIGKILL of the group
        )


def wait_healthy(api: ApiProcess, seconds: float = START_CEILING) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not api.alive():
            raise RuntimeError(f"{api.name} exited at start-up:\n{api.log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{api.url}/healthz", timeout=10).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{api.name} did not start:\n{api.log.read_text()[-3000:]}")


@dataclass
class Cluster:
    env: dict[str, str]
    database_url: str
    work: Path
    apis: dict[str, ApiProcess] = field(default_factory=dict)


@pytest.fixture(scope="module")
def cluster(settings) -> Iterator[Cluster]:
    work = Path(tempfile.mkdtemp(prefix="sparring-cluster-"))
    with postgres_server() as db_url, chroma_server(work / "chroma", free_port()) as chroma_url:
        env = {
            **os.environ,
            "SPARRING_DATA_DIR": str(work / "data"),
            "SPARRING_DATABASE_URL": db_url,
            "SPARRING_CHROMA_URL": chroma_url,
            # The session's embedding cache: whichever of this ingest and the session's index
            # build comes second reads the other's vectors instead of encoding 8,000 texts again.
            "SPARRING_EMBEDDING_CACHE": str(settings.embedding_cache_file),
            "SPARRING_AUTH_TOKENS": "",
            "SPARRING_UI_ENABLED": "false",
            "SPARRING_LLM_MODEL": "",
            # Busy cores make every grade slow: no refusal on the expected queue wait, and the
            # supervisor of `--workers 2` must not restart a worker that is slow to answer its
            # ping (that would cut the requests it serves).
            "SPARRING_GRADING_MAX_WAIT_SECONDS": "0",
            "SPARRING_WORKER_HEALTHCHECK_SECONDS": "300",
        }
        ingest = subprocess.run(
            [sys.executable, "-m", "server.cli", "ingest"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=3 * START_CEILING,
        )
        assert ingest.returncode == 0, ingest.stdout + ingest.stderr
        assert "Index ready" in ingest.stdout
        c = Cluster(env=env, database_url=db_url, work=work)
        for name, extra in (("a", ["--workers", "2"]), ("b", [])):
            port = free_port()
            log = work / f"api-{name}.log"
            proc = sparring("serve", "--port", str(port), *extra, env=env, log=log)
            c.apis[name] = ApiProcess(name, f"http://127.0.0.1:{port}", proc, log)
        try:
            for api in c.apis.values():
                wait_healthy(api)
            yield c
        finally:
            for api in c.apis.values():
                api.stop()


def test_several_workers_refuse_the_embedded_chroma(tmp_path: Path) -> None:
    env = {**os.environ, "SPARRING_DATA_DIR": str(tmp_path), "SPARRING_CHROMA_URL": ""}
    done = subprocess.run(
        [sys.executable, "-m", "server.cli", "serve", "--port", str(free_port()), "--workers", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=START_CEILING,
    )
    assert done.returncode == 2
    assert "SPARRING_CHROMA_URL" in done.stdout


def post_answer(url: str, sid: str, answer: str) -> httpx.Response:
    return httpx.post(
        f"{url}/api/sessions/{sid}/answers", json={"answer": answer}, timeout=REQUEST_CEILING
    )


def state_of(url: str, sid: str) -> dict:
    r = httpx.get(f"{url}/api/sessions/{sid}", timeout=REQUEST_CEILING)
    assert r.status_code == 200, r.text
    return r.json()


def processes_in_group(pgid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if entry.isdigit() and int(stat[stat.rindex(")") + 2 :].split()[2]) == pgid:
            count += 1
    return count


def test_interview_across_processes_survives_a_killed_process(cluster: Cluster) -> None:
    a, b = cluster.apis["a"], cluster.apis["b"]
    # `--workers 2` really is a supervisor and two worker processes; B is one process.
    assert processes_in_group(a.proc.pid) >= 3
    assert processes_in_group(b.proc.pid) == 1
    created = httpx.post(
        f"{a.url}/api/sessions",
        # The interview's clock must not run out on a slow machine: the longest allowed.
        json={"mode": "interview", "num_questions": 4, "duration_minutes": 240, "seed": 17},
        timeout=REQUEST_CEILING,
    )
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    acknowledged: list[str] = []  # answers the server said 200 to, in order

    # 1. Turns alternate between the two processes.
    for n in range(4):
        api = (a, b)[n % 2]
        answer = f"[turn {n} via {api.name}] {ANSWER}"
        r = post_answer(api.url, sid, answer)
        assert r.status_code == 200, r.text
        acknowledged.append(answer)
        assert r.json()["next"]["kind"] != "end"

    # 2. Both processes get an answer for the session at the same moment: the row lock queues one
    #    behind the other, so both land as two separate turns, never as one turn twice.
    start = threading.Barrier(2)
    raced: dict[str, httpx.Response] = {}

    def race(api: ApiProcess) -> None:
        start.wait()
        raced[api.name] = post_answer(api.url, sid, f"[race via {api.name}] {ANSWER}")

    threads = [threading.Thread(target=race, args=(api,)) for api in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {k: r.status_code for k, r in raced.items()} == {"a": 200, "b": 200}
    state = state_of(a.url, sid)
    race_order = [t["text"] for t in state["turns"] if t["text"].startswith("[race")]
    assert sorted(race_order) == sorted(f"[race via {k}] {ANSWER}" for k in ("a", "b"))
    acknowledged += race_order

    # 3. B is killed (SIGKILL, whole process group) while it grades an answer.
    # A long answer (under SPARRING_MAX_ANSWER_CHARS) keeps B grading for longer, so the kill
    # usually lands mid-request; either outcome is checked below.
    doomed = f"[sent to b, killed] {ANSWER * 70}"
    outcome: dict[str, object] = {}

    def send_to_b() -> None:
        try:
            outcome["response"] = post_answer(b.url, sid, doomed)
        except httpx.HTTPError as exc:
            outcome["error"] = exc

    sender = threading.Thread(target=send_to_b)
    sender.start()
    time.sleep(0.1)
    os.killpg(b.proc.pid, signal.SIGKILL)
    b.proc.wait(timeout=REQUEST_CEILING)
    sender.join(timeout=REQUEST_CEILING)
    assert not sender.is_alive() and not b.alive()

    # All or nothing: the answer is stored with its grade and the interviewer's next turn, or absent.
    state = state_of(a.url, sid)
    texts = [t["text"] for t in state["turns"]]
    killed_before_commit = doomed not in texts
    if not killed_before_commit:
        at = texts.index(doomed)
        assert state["turns"][at]["score"] is not None
        assert at + 1 < len(texts) and state["turns"][at + 1]["role"] == "interviewer"
        acknowledged.append(doomed)
    else:  # lost with the process before its commit: the candidate resends it to A
        r = post_answer(a.url, sid, doomed)
        assert r.status_code == 200, r.text
        acknowledged.append(doomed)

    # 4. The interview finishes on A.
    for n in range(12):
        if state_of(a.url, sid)["status"] == "ended":
            break
        answer = f"[finish {n} via a] {ANSWER}"
        r = post_answer(a.url, sid, answer)
        assert r.status_code == 200, r.text
        acknowledged.append(answer)
    else:
        ended = httpx.post(f"{a.url}/api/sessions/{sid}/end", timeout=REQUEST_CEILING)
        assert ended.status_code == 200

    # 5. Nothing lost, nothing doubled: every acknowledged answer once, in order, graded.
    state = state_of(a.url, sid)
    assert state["status"] == "ended"
    turns = state["turns"]
    assert [t["seq"] for t in turns] == list(range(1, len(turns) + 1))
    answers = [t for t in turns if t["kind"] == "answer"]
    assert [t["text"] for t in answers] == acknowledged
    assert all(t["score"] is not None for t in answers)

    report = httpx.get(f"{a.url}/api/sessions/{sid}/report", timeout=REQUEST_CEILING)
    assert report.status_code == 200, report.text
    questions = report.json()["questions"]
    answered = {t["question_number"] for t in answers}
    assert len(questions) >= len(answered) > 0
    assert all(q["grader"] for q in questions if q["status"] == "done")

    # 6. The database itself holds exactly what the API shows.
    engine = create_engine(cluster.database_url)
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT seq, text, grade IS NOT NULL FROM turns WHERE session_id = :s ORDER BY seq"
            ),
            {"s": sid},
        ).all()
        status = conn.execute(
            text("SELECT status FROM interview_sessions WHERE id = :s"), {"s": sid}
        ).scalar_one()
    engine.dispose()
    assert [r[0] for r in rows] == [t["seq"] for t in turns]
    assert [r[1] for r in rows] == [t["text"] for t in turns]
    assert all(r[2] for r, t in zip(rows, turns, strict=True) if t["kind"] == "answer")
    assert status == "ended"
    print(
        f"\ncluster: {len(turns)} turns, {len(answers)} answers graded, {len(questions)} questions "
        f"in the report; api-b SIGKILLed {'before' if killed_before_commit else 'after'} its "
        f"commit ({'answer resent to a' if killed_before_commit else 'answer kept'}); "
        f"client saw {type(outcome.get('error', outcome.get('response'))).__name__}"
    )
