"""Storage on real engines: Alembic migrations on SQLite and PostgreSQL, an old `create_all`
database adopted without losing rows, and one session's concurrent answers from two servers
(separate connection pools, as two processes have) never committing twice."""

from __future__ import annotations

import itertools
import threading
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, inspect, select

from server.config import Settings
from server.storage.db import Database
from server.storage.migrate import current_revision, head_revision
from server.storage.models import Base, InterviewSession, Turn
from tests.conftest import token_for
from tests.support.engines import postgres_server
from tests.support.servers import derived_services, serve_services

TABLES = {"interview_sessions", "asked_questions", "turns", "review_cards", "alembic_version"}
ANSWER = "对同一个 prompt 采样一组回答，用组内奖励均值做 baseline，再除以标准差，不需要 critic。"
HEADERS = {"Authorization": f"Bearer {token_for('alice')}"}


@pytest.fixture(scope="module")
def pg_url() -> str:
    with postgres_server() as url:
        yield url


def _tables(db: Database) -> set[str]:
    return set(inspect(db.engine).get_table_names())


def test_fresh_sqlite_migrates_to_head(tmp_path: Path) -> None:
    db = Database(Settings(data_dir=tmp_path))
    assert current_revision(db.engine) == head_revision()
    assert _tables(db) >= TABLES
    lock = tmp_path / "sparring.db.migrate.lock"  # the cross-process lock of the upgrade
    assert lock.exists() and lock.stat().st_mode & 0o777 == 0o600


def test_fresh_postgres_migrates_to_head(pg_url: str) -> None:
    db = Database(Settings(database_url=pg_url))
    assert db.engine.dialect.name == "postgresql"
    assert current_revision(db.engine) == head_revision()
    assert _tables(db) >= TABLES
    Database(Settings(database_url=pg_url))  # a second process starting: nothing to do, no error
    assert current_revision(db.engine) == head_revision()


def test_plain_postgresql_url_uses_psycopg3(pg_url: str) -> None:
    plain = pg_url.replace("postgresql+psycopg://", "postgresql://", 1)
    assert Database(Settings(database_url=plain)).engine.dialect.driver == "psycopg"


def test_database_made_before_migrations_is_adopted_with_its_rows(tmp_path: Path) -> None:
    db_file = tmp_path / "sparring.db"
    legacy = create_engine(f"sqlite:///{db_file}")
    Base.metadata.create_all(legacy)  # how every database was made before Alembic
    from sqlalchemy.orm import Session

    with Session(legacy) as s:
        s.add(
            InterviewSession(
                id="old1",
                user="alice",
                mode="practice",
                language="zh",
                grader="rubric",
                filters={"topics": ["ppo"]},
                num_questions=2,
                plan=["a", "b"],
                deadline=datetime(2030, 1, 1, tzinfo=UTC),
            )
        )
        s.add(Turn(session_id="old1", seq=1, role="interviewer", kind="question", text="问题"))
        s.commit()
    legacy.dispose()
    assert "alembic_version" not in inspect(create_engine(f"sqlite:///{db_file}")).get_table_names()

    db = Database(Settings(data_dir=tmp_path))
    assert current_revision(db.engine) == head_revision()
    with db.session() as s:
        old = s.get(InterviewSession, "old1")
        assert old is not None and old.filters == {"topics": ["ppo"]} and old.plan == ["a", "b"]
        assert [t.text for t in old.turns] == ["问题"]


def _run_interview(url: str) -> dict:
    with httpx.Client(base_url=url, headers=HEADERS, timeout=120) as c:
        s = c.post("/api/sessions", json={"mode": "interview", "num_questions": 2, "seed": 7})
        assert s.status_code == 201, s.text
        sid = s.json()["id"]
        for n in range(8):
            r = c.post(f"/api/sessions/{sid}/answers", json={"answer": f"[{n}] {ANSWER}"})
            assert r.status_code == 200, r.text
            if r.json()["next"]["kind"] == "end":
                break
        state = c.get(f"/api/sessions/{sid}").json()
        report = c.get(f"/api/sessions/{sid}/report")
        assert report.status_code == 200, report.text
        return {"state": state, "report": report.json()}


def test_whole_interview_on_postgres(services, pg_url: str) -> None:
    pg = derived_services(services, database_url=pg_url)
    with serve_services(pg) as (url, _):
        got = _run_interview(url)
    state = got["state"]
    assert state["status"] == "ended"
    answers = [t for t in state["turns"] if t["kind"] == "answer"]
    assert answers and all(t["score"] is not None for t in answers)
    assert got["report"]["questions"]
    assert all(q["grader"] for q in got["report"]["questions"] if q["status"] == "done")
    with pg.database.session() as s:
        row = s.get(InterviewSession, state["id"])
        assert row is not None and row.created_at.tzinfo is not None  # timestamptz round trip
        assert isinstance(row.filters, dict)
        graded = s.scalars(select(Turn).where(Turn.session_id == row.id, Turn.kind == "answer"))
        assert all(isinstance(t.grade, dict) and "key_points" in t.grade for t in graded)
        seqs = list(s.scalars(select(Turn.seq).where(Turn.session_id == row.id).order_by(Turn.seq)))
        assert seqs == list(range(1, len(seqs) + 1))


def _race(urls: list[str], sid: str, tag: str) -> list[httpx.Response]:
    """Post one answer to the same session from each server at the same moment."""
    start = threading.Barrier(len(urls))
    results: list[httpx.Response | None] = [None] * len(urls)

    def post(i: int) -> None:
        start.wait()
        results[i] = httpx.post(
            f"{urls[i]}/api/sessions/{sid}/answers",
            json={"answer": f"[{tag} from {i}] {ANSWER}"},
            headers=HEADERS,
            timeout=120,
        )

    threads = [threading.Thread(target=post, args=(i,)) for i in range(len(urls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in results if r is not None]


@pytest.mark.parametrize("engine", ["postgresql", "sqlite"])
def test_concurrent_answers_from_two_servers_commit_once_each(
    services, pg_url: str, tmp_path: Path, engine: str
) -> None:
    url = pg_url if engine == "postgresql" else f"sqlite:///{tmp_path / 'race.db'}"
    # Two Services, two engines and pools: what two API processes on one database have.
    a = derived_services(services, database_url=url)
    b = derived_services(services, database_url=url)
    with serve_services(a) as (url_a, _), serve_services(b) as (url_b, _):
        created = httpx.post(
            f"{url_a}/api/sessions",
            json={"mode": "practice", "num_questions": 5, "seed": 11},
            headers=HEADERS,
        )
        sid = created.json()["id"]
        ok = 0
        for n in range(3):
            responses = _race([url_a, url_b], sid, f"round {n}")
            assert {r.status_code for r in responses} <= {200, 409, 503}, [
                r.text for r in responses
            ]
            ok += sum(r.status_code == 200 for r in responses)
            if engine == "postgresql":  # the row lock queues the second: both land, in order
                assert [r.status_code for r in responses] == [200, 200]
        state = httpx.get(f"{url_b}/api/sessions/{sid}", headers=HEADERS).json()
    turns = state["turns"]
    assert [t["seq"] for t in turns] == list(range(1, len(turns) + 1))
    answers = [t["text"] for t in turns if t["kind"] == "answer"]
    assert len(answers) == len(set(answers))  # no answer committed twice
    assert len(answers) == ok  # every 200 stored, nothing else
    # Each answer follows the interviewer's prompt it answered: never two answers in a row.
    kinds = [t["role"] for t in turns]
    assert all(not (x == y == "candidate") for x, y in itertools.pairwise(kinds))


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_models_and_migrations_agree(pg_url: str, tmp_path: Path, engine: str) -> None:
    """A model change without its migration fails here (write one: docs/deploy.md)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    url = pg_url if engine == "postgresql" else f"sqlite:///{tmp_path / 'm.db'}"
    db = Database(Settings(database_url=url, data_dir=tmp_path))
    with db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []
