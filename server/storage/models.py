"""Tables: interview sessions, the questions asked in them, every turn, and review cards."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import JSON, DateTime, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


def utcnow() -> datetime:
    return datetime.now(UTC)


def aware(dt: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; everything stored here is UTC."""
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=UTC)


class Base(DeclarativeBase):
    type_annotation_map: ClassVar = {dict[str, Any]: JSON, list[Any]: JSON}


class InterviewSession(Base):
    __tablename__ = "interview_sessions"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user: Mapped[str] = mapped_column(String(100), index=True)
    mode: Mapped[str] = mapped_column(String(20))
    language: Mapped[str] = mapped_column(String(5))
    grader: Mapped[str] = mapped_column(String(10))
    filters: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    num_questions: Mapped[int] = mapped_column(Integer)
    duration_minutes: Mapped[int | None] = mapped_column(Integer, nullable=True)
    plan: Mapped[list[Any]] = mapped_column(JSON, default=list)  # entry ids still to ask
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    deadline: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    status: Mapped[str] = mapped_column(String(10), default="active")  # active | ended
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    end_reason: Mapped[str | None] = mapped_column(String(20), nullable=True)

    questions: Mapped[list[AskedQuestion]] = relationship(
        back_populates="session", order_by="AskedQuestion.position", cascade="all, delete-orphan"
    )
    turns: Mapped[list[Turn]] = relationship(
        back_populates="session", order_by="Turn.seq", cascade="all, delete-orphan"
    )


class AskedQuestion(Base):
    __tablename__ = "asked_questions"
    __table_args__ = (UniqueConstraint("session_id", "position"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("interview_sessions.id"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    entry_id: Mapped[str] = mapped_column(String(100))
    kind: Mapped[str] = mapped_column(String(10))  # question | followup
    asked_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    budget_seconds: Mapped[int | None] = mapped_column(Integer, nullable=True)
    status: Mapped[str] = mapped_column(String(10), default="open")  # open | done | skipped
    probes: Mapped[list[Any]] = mapped_column(JSON, default=list)  # key point ids probed
    hints: Mapped[list[Any]] = mapped_column(JSON, default=list)  # key point ids revealed
    score: Mapped[float | None] = mapped_column(nullable=True)
    grader: Mapped[str | None] = mapped_column(String(100), nullable=True)
    result: Mapped[dict[str, Any]] = mapped_column(
        JSON, default=dict
    )  # merged grade of all answers
    answered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    session: Mapped[InterviewSession] = relationship(back_populates="questions")


class Turn(Base):
    __tablename__ = "turns"
    __table_args__ = (UniqueConstraint("session_id", "seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("interview_sessions.id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    question_id: Mapped[int | None] = mapped_column(ForeignKey("asked_questions.id"), nullable=True)
    role: Mapped[str] = mapped_column(String(12))  # interviewer | candidate
    kind: Mapped[str] = mapped_column(
        String(12)
    )  # question | probe | followup | hint | answer | skip | end
    text: Mapped[str] = mapped_column(Text)
    key_point_id: Mapped[str | None] = mapped_column(String(100), nullable=True)
    grade: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    late: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    session: Mapped[InterviewSession] = relationship(back_populates="turns")


class ReviewCard(Base):
    """Spaced-repetition state (fsrs) of one question for one user."""

    __tablename__ = "review_cards"
    __table_args__ = (UniqueConstraint("user", "entry_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user: Mapped[str] = mapped_column(String(100), index=True)
    entry_id: Mapped[str] = mapped_column(String(100))
    card: Mapped[dict[str, Any]] = mapped_column(JSON)
    due: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    last_score: Mapped[float] = mapped_column()
    reviews: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class ChatExchange(Base):
    """One request/reply of the OpenAI-compatible chat endpoint, kept so that a client resending
    the same history gets the same reply instead of a second grading (server/interview/chat.py)."""

    __tablename__ = "chat_exchanges"
    __table_args__ = (UniqueConstraint("session_id", "seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("interview_sessions.id"), index=True)
    seq: Mapped[int] = mapped_column(Integer)  # 0 = the message that started the session
    user_text: Mapped[str] = mapped_column(Text)
    reply: Mapped[str] = mapped_column(Text)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
