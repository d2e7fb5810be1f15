"""Database engine and sessions: SQLite (WAL) by default, any SQLAlchemy URL by configuration."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from server.config import Settings
from server.storage.migrate import upgrade_to_head

log = logging.getLogger(__name__)
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def secure_dir(path: Path) -> None:
    """Create `path` if needed and keep it private (0700): it holds other users' answers."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if stat.S_IMODE(path.stat().st_mode) != 0o700:
        os.chmod(path, 0o700)


def secure_sqlite_files(db_file: Path) -> None:
    """The database file 0600 before SQLite opens it: SQLite gives its -wal/-shm files the mode
    of the database file, so they are private from the start. Existing files are tightened."""
    secure_dir(db_file.parent)
    fd = os.open(db_file, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)
    for path in [db_file, *(db_file.with_name(db_file.name + s) for s in SQLITE_SIDE_FILES)]:
        try:
            if stat.S_IMODE(path.stat().st_mode) != 0o600:
                os.chmod(path, 0o600)
        except FileNotFoundError:
            pass


def sqlite_file(url: str) -> Path | None:
    parsed = make_url(url)
    if not parsed.drivername.startswith("sqlite") or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)


def database_url(raw: str) -> str:
    """A plain `postgresql://` URL means psycopg 3 (the driver Sparring ships), not psycopg2."""
    parsed = make_url(raw)
    if parsed.drivername in ("postgresql", "postgres"):
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return raw


def make_engine(settings: Settings) -> Engine:
    url = database_url(settings.sqlalchemy_url)
    if url.startswith("sqlite"):
        db_file = sqlite_file(url)
        if db_file is not None:
            secure_sqlite_files(db_file)
        busy_ms = int(settings.db_busy_timeout_seconds * 1000)
        # Every grading worker may hold a connection while it grades; SQLite connections are cheap.
        # pre_ping + recycle: a connection broken by a read-only or locked spell is replaced.
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": settings.db_busy_timeout_seconds},
            pool_size=40,
            max_overflow=40,
            pool_timeout=120,
            pool_pre_ping=True,
            pool_recycle=300,
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
            cur = dbapi_conn.cursor()
            # WAL lets readers and one writer (from any process) work at the same time.
            cur.execute("PRAGMA journal_mode=WAL")
            # A held write lock costs a request this long, then it gets 503 + Retry-After.
            cur.execute(f"PRAGMA busy_timeout={busy_ms}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

    else:
        engine = create_engine(
            url,
            pool_pre_ping=True,
            pool_recycle=300,
            pool_size=20,
            max_overflow=20,
            pool_timeout=120,
        )
    upgrade_to_head(engine)
    return engine


class Database:
    def __init__(self, settings: Settings) -> None:
        self.engine = make_engine(settings)
        self._factory = sessionmaker(self.engine, expire_on_commit=False)

    @contextmanager
    def session(self) -> Iterator[Session]:
        """One unit of work: committed when the block ends, rolled back on error."""
        db = self._factory()
        try:
            yield db
            db.commit()
        except BaseException as exc:
            with suppress(DBAPIError):  # the original error is the one to report
                db.rollback()
            if isinstance(exc, OperationalError | InterfaceError):
                self._recover(exc)
            raise
        finally:
            db.close()

    def _recover(self, exc: DBAPIError) -> None:
        """After a storage fault (lock, read-only, I/O), start the pool afresh: pooled
        connections may keep the broken state after the cause is gone."""
        log.warning("database error, resetting the connection pool: %s", exc.orig or exc)
        self.engine.dispose()
