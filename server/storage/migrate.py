"""Schema migrations (Alembic), applied on start for SQLite and PostgreSQL alike.

Every process that opens the database runs `upgrade_to_head`; several API workers or replicas may
start at once, so the upgrade runs under a lock that spans processes (a PostgreSQL advisory lock,
or an exclusive file lock beside a SQLite file). A database made before migrations existed is
adopted by revision 0001, which creates only what is missing."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# Any fixed 64-bit key: PostgreSQL advisory locks are per database, named by a number.
ADVISORY_LOCK_KEY = 0x5350_4152_5249_4E47  # "SPARRING"


def alembic_config(connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


@contextmanager
def _migration_lock(engine: Engine) -> Iterator[None]:
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": ADVISORY_LOCK_KEY})
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": ADVISORY_LOCK_KEY})
                conn.commit()
        return
    database = engine.url.database
    if engine.dialect.name == "sqlite" and database not in (None, "", ":memory:"):
        # Private like the database beside it (0600); it holds nothing, only the lock.
        fd = os.open(f"{database}.migrate.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock
        return
    yield  # in-memory SQLite or another engine: one process owns it


def upgrade_to_head(engine: Engine) -> None:
    """Bring the schema to the newest revision; a no-op when it is there already."""
    head = head_revision()
    if current_revision(engine) == head:  # the common start: no lock, no DDL
        return
    with _migration_lock(engine), engine.begin() as conn:
        command.upgrade(alembic_config(conn), "head")
