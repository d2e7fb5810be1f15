"""Which bank entries a user may not see the rubric of right now (issue #24, item 4).

Session replies name the entry being asked, and the bank serves every entry's rubric (reference
answer and its code, key points, aliases). While an interview runs, its current question and the
questions still planned are withheld from the user who is taking it, so the answer cannot be
looked up mid-interview. Everything is read from the database (sessions keep no state in memory),
so every process agrees."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from server.storage.models import InterviewSession, aware

WITHHELD_MESSAGE = (
    "question {id!r} is part of the interview you are taking (session {session}): its rubric and "
    "grading are withheld until that interview ends, so the answer cannot be looked up "
    "mid-interview; end the session (POST /api/sessions/{session}/end) or finish it first"
)


def withheld_entries(db: Session, user: str) -> dict[str, str]:
    """Entry id -> the running session that withholds it, for `user`'s running interviews.

    A session whose time is up still takes a late answer to its open question, so that question
    stays withheld; its plan will never be asked, so the rest is released."""
    running = db.scalars(
        select(InterviewSession)
        .where(InterviewSession.user == user, InterviewSession.status == "active")
        .options(selectinload(InterviewSession.questions))
    ).all()
    now = datetime.now(UTC)
    withheld: dict[str, str] = {}
    for session in running:
        deadline = aware(session.deadline)
        time_up = deadline is not None and now >= deadline
        ids = [q.entry_id for q in session.questions if q.status == "open"]
        if not time_up:
            ids += [str(eid) for eid in session.plan or []]
        for eid in ids:
            withheld.setdefault(eid, session.id)
    return withheld


def withholding_session(db: Session, user: str, entry_id: str) -> str | None:
    """The id of `user`'s running session that withholds `entry_id`, or None."""
    return withheld_entries(db, user).get(entry_id)
