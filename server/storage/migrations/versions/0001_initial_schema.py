"""Initial schema: sessions, asked questions, turns, review cards (as `create_all` made them).

Databases created before migrations existed (by `Base.metadata.create_all`) already hold some or
all of these tables: each table and index is created only when it is missing, so such a database
is adopted at this revision without touching its rows.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _missing(table: str) -> bool:
    return not sa.inspect(op.get_bind()).has_table(table)


def _index(table: str, name: str, columns: list[str]) -> None:
    existing = {ix["name"] for ix in sa.inspect(op.get_bind()).get_indexes(table)}
    if name not in existing:
        op.create_index(name, table, columns, unique=False)


def upgrade() -> None:
    if _missing("interview_sessions"):
        op.create_table(
            "interview_sessions",
            sa.Column("id", sa.String(length=32), nullable=False),
            sa.Column("user", sa.String(length=100), nullable=False),
            sa.Column("mode", sa.String(length=20), nullable=False),
            sa.Column("language", sa.String(length=5), nullable=False),
            sa.Column("grader", sa.String(length=10), nullable=False),
            sa.Column("filters", sa.JSON(), nullable=False),
            sa.Column("num_questions", sa.Integer(), nullable=False),
            sa.Column("duration_minutes", sa.Integer(), nullable=True),
            sa.Column("plan", sa.JSON(), nullable=False),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("deadline", sa.DateTime(timezone=True), nullable=True),
            sa.Column("status", sa.String(length=10), nullable=False),
            sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
            sa.Column("end_reason", sa.String(length=20), nullable=True),
            sa.PrimaryKeyConstraint("id"),
        )
    _index("interview_sessions", "ix_interview_sessions_user", ["user"])
    if _missing("review_cards"):
        op.create_table(
            "review_cards",
            sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("user", sa.String(length=100), nullable=False),
            sa.Column("entry_id", sa.String(length=100), nullable=False),
            sa.Column("card", sa.JSON(), nullable=False),
            sa.Column("due", sa.DateTime(timezone=True), nullable=False),
            sa.Column("last_score", sa.Double(), nullable=False),
            sa.Column("reviews", sa.Integer(), nullable=False),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            sa.PrimaryKeyConstraint("id"),
            sa.UniqueConstraint("user", "entry_id"),
        )
    _index("review_cards", "ix_review_cards_due", ["due"])
    _index("review_cards", "ix_review_cards_user", ["user"])
    if _missing("asked_questions"):
        op.create_table(
            "asked_questions",
            sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("session_id", sa.String(length=32), nullable=False),
            sa.Column("position", sa.Integer(), nullable=False),
            sa.Column("entry_id", sa.String(length=100), nullable=False),
            sa.Column("kind", sa.String(length=10), nullable=False),
            sa.Column("asked_at", sa.DateTime(timezone=True), nullable=False),
            sa.Column("budget_seconds", sa.Integer(), nullable=True),
            sa.Column("status", sa.String(length=10), nullable=False),
            sa.Column("probes", sa.JSON(), nullable=False),
            sa.Column("hints", sa.JSON(), nullable=False),
            sa.Column("score", sa.Double(), nullable=True),
            sa.Column("grader", sa.String(length=100), nullable=True),
            sa.Column("result", sa.JSON(), nullable=False),
            sa.Column("answered_at", sa.DateTime(timezone=True), nullable=True),
            sa.ForeignKeyConstraint(
                ["session_id"],
                ["interview_sessions.id"],
            ),
            sa.PrimaryKeyConstraint("id"),
            sa.UniqueConstraint("session_id", "position"),
        )
    _index("asked_questions", "ix_asked_questions_session_id", ["session_id"])
    if _missing("turns"):
        op.create_table(
            "turns",
            sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
            sa.Column("session_id", sa.String(length=32), nullable=False),
            sa.Column("seq", sa.Integer(), nullable=False),
            sa.Column("question_id", sa.Integer(), nullable=True),
            sa.Column("role", sa.String(length=12), nullable=False),
            sa.Column("kind", sa.String(length=12), nullable=False),
            sa.Column("text", sa.Text(), nullable=False),
            sa.Column("key_point_id", sa.String(length=100), nullable=True),
            sa.Column("grade", sa.JSON(), nullable=True),
            sa.Column("late", sa.Boolean(), nullable=False),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.ForeignKeyConstraint(
                ["question_id"],
                ["asked_questions.id"],
            ),
            sa.ForeignKeyConstraint(
                ["session_id"],
                ["interview_sessions.id"],
            ),
            sa.PrimaryKeyConstraint("id"),
            sa.UniqueConstraint("session_id", "seq"),
        )
    _index("turns", "ix_turns_session_id", ["session_id"])


def downgrade() -> None:
    for table in ("turns", "asked_questions", "review_cards", "interview_sessions"):
        op.drop_table(table)
