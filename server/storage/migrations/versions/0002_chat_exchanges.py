"""Chat exchanges of the OpenAI-compatible endpoint (server/interview/chat.py): one row per reply,
so a client that resends its history gets the stored reply instead of a second grading.

Revision ID: 0002_chat
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002_chat"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("chat_exchanges"):
        return
    op.create_table(
        "chat_exchanges",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(length=32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("user_text", sa.Text(), nullable=False),
        sa.Column("reply", sa.Text(), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["session_id"], ["interview_sessions.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("session_id", "seq"),
    )
    op.create_index("ix_chat_exchanges_session_id", "chat_exchanges", ["session_id"])


def downgrade() -> None:
    op.drop_index("ix_chat_exchanges_session_id", table_name="chat_exchanges")
    op.drop_table("chat_exchanges")
