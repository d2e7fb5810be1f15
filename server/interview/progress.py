"""Across sessions: per-topic mastery and an fsrs spaced-repetition review queue."""

from __future__ import annotations

from datetime import UTC, datetime

from fsrs import Card, Rating, Scheduler
from sqlalchemy import select
from sqlalchemy.orm import Session

from server.corpus.bank import QuestionBank
from server.interview.schemas import Mastery, Progress, ReviewItem
from server.storage.models import AskedQuestion, InterviewSession, ReviewCard, aware

SCORED_STATUSES = ("done", "skipped", "unanswered")


def rating_for(score: float) -> Rating:
    """A 0–10 interview score as an fsrs recall rating."""
    if score < 3:
        return Rating.Again
    if score < 6:
        return Rating.Hard
    if score < 8.5:
        return Rating.Good
    return Rating.Easy


def record_session(db: Session, bank: QuestionBank, session: InterviewSession) -> None:
    """Review every scored question of an ended session (once per question and session)."""
    scheduler = Scheduler(enable_fuzzing=False)
    when = datetime.now(UTC)
    for q in session.questions:
        if q.status not in SCORED_STATUSES or q.score is None or bank.get(q.entry_id) is None:
            continue
        row = db.scalars(
            select(ReviewCard).where(
                ReviewCard.user == session.user, ReviewCard.entry_id == q.entry_id
            )
        ).first()
        card = Card.from_dict(row.card) if row else Card()
        card, _ = scheduler.review_card(card, rating_for(q.score), review_datetime=when)
        data = card.to_dict()
        if row is None:
            row = ReviewCard(
                user=session.user,
                entry_id=q.entry_id,
                card=data,
                due=card.due,
                last_score=q.score,
                reviews=1,
                updated_at=when,
            )
            db.add(row)
        else:
            row.card, row.due, row.last_score = data, card.due, q.score
            row.reviews += 1
            row.updated_at = when
        db.flush()


def review_candidates(db: Session, bank: QuestionBank, user: str) -> list[str]:
    """Due cards first (earliest due), then the weakest scores."""
    rows = db.scalars(select(ReviewCard).where(ReviewCard.user == user)).all()
    now = datetime.now(UTC)
    due = sorted((r for r in rows if aware(r.due) <= now), key=lambda r: aware(r.due))
    weak = sorted(
        (r for r in rows if aware(r.due) > now and r.last_score < 6), key=lambda r: r.last_score
    )
    return [r.entry_id for r in [*due, *weak] if bank.get(r.entry_id) is not None]


def user_progress(db: Session, bank: QuestionBank, user: str) -> Progress:
    sessions = db.scalars(
        select(InterviewSession)
        .where(InterviewSession.user == user)
        .order_by(InterviewSession.created_at)
    ).all()
    by_area: dict[str, list[tuple[datetime, float]]] = {}
    summaries = []
    for s in sessions:
        scored = [q for q in s.questions if q.status in SCORED_STATUSES and q.score is not None]
        summaries.append(
            {
                "id": s.id,
                "mode": s.mode,
                "status": s.status,
                "created_at": aware(s.created_at).isoformat(),
                "questions": len(scored),
                "average": round(sum(q.score for q in scored) / len(scored), 1) if scored else None,
                "ended_at": aware(s.ended_at).isoformat() if s.ended_at else None,
                "end_reason": s.end_reason,
                "language": s.language,
                **_title(bank, s),
            }
        )
        for q in scored:
            entry = bank.get(q.entry_id)
            if entry is not None:
                by_area.setdefault(entry.area.value, []).append((aware(s.created_at), q.score))
    mastery = []
    for area, points in sorted(by_area.items()):
        recent = [score for _, score in points[-10:]]
        history = [{"at": at.isoformat(), "score": score} for at, score in points]
        mastery.append(
            Mastery(
                area=area,
                mastery=round(sum(recent) / len(recent), 1),
                answered=len(points),
                history=history,
            )
        )
    now = datetime.now(UTC)
    cards = db.scalars(select(ReviewCard).where(ReviewCard.user == user)).all()
    queue = []
    for r in sorted(cards, key=lambda r: aware(r.due)):
        entry = bank.get(r.entry_id)
        if entry is None:
            continue
        queue.append(
            ReviewItem(
                entry_id=r.entry_id,
                text=entry.text,
                text_en=entry.text_en,
                area=entry.area.value,
                due=aware(r.due),
                is_due=aware(r.due) <= now,
                last_score=r.last_score,
                reviews=r.reviews,
            )
        )
    return Progress(user=user, sessions=summaries, mastery=mastery, review_queue=queue)


def _title(bank: QuestionBank, session: InterviewSession) -> dict[str, str]:
    """The first question's text names a session for people (its id is for machines)."""
    first = min(session.questions, key=lambda q: q.position, default=None)
    entry = bank.get(first.entry_id) if first else None
    if entry is None:
        return {"title": "", "title_en": ""}
    return {"title": entry.text, "title_en": entry.text_en}


def scored_questions(session: InterviewSession) -> list[AskedQuestion]:
    return [q for q in session.questions if q.status in SCORED_STATUSES]
