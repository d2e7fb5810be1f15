"""The interviewer: runs a session turn by turn. Every turn is committed before the reply goes out,
and nothing about a session is kept in memory, so any process can serve any turn.

Rules after each answer (documented in docs/interview.md):
1. Time is up (timed mode)            -> the answer is recorded late, graded, and the interview ends.
2. A key point is still missing, fewer than `max_probes` probes were asked on this question and the
   merged score is below `probe_below`  -> probe the heaviest missing point (its rubric `probe`).
3. Enough questions were asked        -> end.
4. The merged score is at least `followup_from` and a related question exists
                                      -> ask it (rubric `related` edges first, then retrieval).
5. Otherwise                          -> the next planned question (or a retrieved one when the plan is empty).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from server.corpus.bank import QuestionBank
from server.corpus.schema import QuestionEntry, QuestionType, Relation
from server.grading.feedback import write_feedback
from server.grading.models import (
    Grade,
    GraderChoice,
    KeyPointResult,
    MisconceptionHit,
    TestResult,
)
from server.grading.scoring import analytic_score, score_from
from server.grading.service import GradingService
from server.interview import labels, progress, selection
from server.interview.phrasing import (
    ClarifyContext,
    Line,
    Phrasing,
    PhrasingInfo,
    ProbeContext,
    TransitionContext,
    secrets_of,
)
from server.interview.schemas import (
    AnswerResponse,
    AskedOut,
    HintResponse,
    Mode,
    NextStep,
    SessionCreated,
    SessionRequest,
    SessionState,
    TurnOut,
)
from server.retrieval.search import QuestionSearcher, SearchFilters
from server.storage.models import AskedQuestion, InterviewSession, Turn, aware

HINT_CAP_STEP = 2.5


class InterviewError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass(frozen=True)
class EngineRules:
    max_probes: int = 2
    probe_below: float = 8.5
    followup_from: float = 6.0


CODE_FLAGS = ("no_code", "code_error", "code_not_run", "signature_mismatch")


def now() -> datetime:
    return datetime.now(UTC)


class InterviewEngine:
    def __init__(
        self,
        bank: QuestionBank,
        grading: GradingService,
        searcher: QuestionSearcher,
        phrasing: Phrasing,
        rules: EngineRules | None = None,
    ) -> None:
        self.bank = bank
        self.grading = grading
        self.searcher = searcher
        self.phrasing = phrasing
        self.rules = rules or EngineRules()

    # ---------- session lifecycle ----------

    def start(self, db: Session, user: str, req: SessionRequest) -> SessionCreated:
        if req.grader == GraderChoice.llm and not self.grading.llm_configured:
            raise InterviewError(
                422, "grader_unavailable", "no LLM is configured; choose grader 'rubric' or 'auto'"
            )
        session_id = uuid.uuid4().hex
        rng = random.Random(req.seed if req.seed is not None else session_id)
        preferred: list[str] = []
        if req.mode == Mode.review:
            preferred = progress.review_candidates(db, self.bank, user)
            if not preferred:
                raise InterviewError(
                    422,
                    "nothing_to_review",
                    "nothing to review yet: finish an interview or practice session first",
                )
        order = selection.plan(self.bank, req, rng, preferred)
        if not order:
            raise InterviewError(
                422,
                "no_questions",
                "no question matches these filters (companies, topics, difficulty, types); "
                "widen them and try again" + self._available_hint(req),
            )
        created = now()
        timed = req.mode == Mode.interview
        length = (
            timedelta(seconds=req.duration_seconds)
            if req.duration_seconds
            else timedelta(minutes=req.duration_minutes)
        )
        session = InterviewSession(
            id=session_id,
            user=user,
            mode=req.mode.value,
            language=req.language,
            grader=req.grader.value,
            filters=req.model_dump(
                mode="json", include={"companies", "topics", "difficulty", "types"}
            ),
            num_questions=min(req.num_questions, len(order)),
            duration_minutes=max(1, round(length.total_seconds() / 60)) if timed else None,
            plan=order,
            created_at=created,
            deadline=created + length if timed else None,
        )
        db.add(session)
        first = self._ask_from_plan(db, session, kind="question")
        assert first is not None
        db.flush()
        return SessionCreated(
            id=session.id,
            mode=req.mode,
            deadline=session.deadline,
            question=self._asked_out(session, first),
        )

    def _available_hint(self, req: SessionRequest) -> str:
        """What the chosen companies do have, so an empty combination says where to go."""
        if not req.companies:
            return ""
        only_companies = SessionRequest(companies=req.companies)
        counts: dict[str, int] = {}
        for e in self.bank:
            if selection.matches(e, only_companies):
                counts[e.topic] = counts.get(e.topic, 0) + 1
        if not counts:
            return f"; the bank has no question from {', '.join(req.companies)}"
        top = sorted(counts.items(), key=lambda kv: -kv[1])[:8]
        listed = ", ".join(f"{t} ({n})" for t, n in top)
        return f"; for {', '.join(req.companies)} the bank has: {listed}"

    def load(self, db: Session, user: str, session_id: str) -> InterviewSession:
        # The row lock (PostgreSQL; SQLite has one writer anyway) makes two requests for one
        # session, from any two processes, take turns: the second sees the first's committed turn.
        session = db.get(InterviewSession, session_id, with_for_update=True)
        if session is None or session.user != user:
            raise InterviewError(404, "not_found", f"session {session_id!r} does not exist")
        return session

    def time_up(self, session: InterviewSession) -> bool:
        deadline = aware(session.deadline)
        return deadline is not None and now() >= deadline

    def _require_active(self, session: InterviewSession) -> AskedQuestion:
        if session.status == "ended":
            raise InterviewError(
                409,
                "session_ended",
                "this interview has ended; fetch its report or start a new one",
            )
        if self.time_up(session):
            # Past the deadline only an answer is taken (graded late); anything else sees the end.
            raise InterviewError(
                409, "time_up", "the interview's time is up; fetch its report or start a new one"
            )
        current = self._current(session)
        if current is None:  # defensive: an active session always has an open question
            raise InterviewError(409, "no_open_question", "there is no open question")
        return current

    # ---------- candidate actions ----------

    def answer(self, db: Session, user: str, session_id: str, text: str) -> AnswerResponse:
        session = self.load(db, user, session_id)
        late = self.time_up(session)
        current = self._require_active_or_late(session, late)
        entry = self._entry(current.entry_id)
        grade = self.grading.grade(entry, text, GraderChoice(session.grader), session.language)
        self._add_turn(db, session, "candidate", "answer", text, current, grade=grade, late=late)
        merged = self._merge(entry, current, grade, session.language, late=late)
        current.answered_at = now()
        nxt = self._decide(db, session, current, entry, merged, late)
        if nxt.kind == "probe":
            # The reference answer would give the probe away: revealed once the question is finished.
            merged = merged.model_copy(update={"reference_answer": ""})
        return self._graded(session, current, merged, nxt, late)

    def _require_active_or_late(self, session: InterviewSession, late: bool) -> AskedQuestion:
        if not late:
            return self._require_active(session)
        if session.status == "ended" or self._current(session) is None:
            return self._require_active(session)
        return self._current(session)  # type: ignore[return-value]

    def _graded(
        self,
        session: InterviewSession,
        asked: AskedQuestion,
        grade: Grade,
        nxt: NextStep,
        late: bool,
    ) -> AnswerResponse:
        number = labels.question_numbers(session)[asked.id]
        return AnswerResponse(
            grade=grade,
            next=nxt,
            late=late,
            question_number=number,
            labels=labels.question_label(number, asked.kind),
        )

    def skip(self, db: Session, user: str, session_id: str) -> AnswerResponse:
        session = self.load(db, user, session_id)
        current = self._require_active(session)
        entry = self._entry(current.entry_id)
        self._add_turn(db, session, "candidate", "skip", "", current)
        if current.result:
            # Answered and graded, a probe pending: only the probe is skipped; the question keeps
            # the grade its answers earned (capped by any hint taken since).
            grade = self._probe_skipped(entry, current, session.language)
            current.status = "done"
        else:
            grade = self.grading.zero(entry, "skipped", session.language)
            current.status, current.score, current.grader = "skipped", 0.0, grade.grader
            current.answered_at = now()
        current.result = grade.model_dump(mode="json")
        self._say(db, session, "skip", current, {})
        nxt = self._next_question(db, session, current, entry, merged_score=0.0)
        return self._graded(session, current, grade, nxt, self.time_up(session))

    def _probe_skipped(self, entry: QuestionEntry, asked: AskedQuestion, language: str) -> Grade:
        assert entry.rubric is not None
        kept = Grade.model_validate(asked.result)
        extra = ["hint_used"] if asked.hints else []
        flags = list(dict.fromkeys([*kept.flags, *extra, "probe_skipped"]))
        score = min(kept.score, self._cap(asked))
        return kept.model_copy(
            update={
                "score": score,
                "flags": flags,
                "feedback": write_feedback(
                    entry, kept.key_points, kept.misconceptions, flags, language, kept.tests
                ),
                "reference_answer": entry.rubric.reference_answer,
            }
        )

    def hint(self, db: Session, user: str, session_id: str) -> HintResponse:
        session = self.load(db, user, session_id)
        current = self._require_active(session)
        entry = self._entry(current.entry_id)
        assert entry.rubric is not None
        covered = {kp["id"] for kp in current.result.get("key_points", []) if kp.get("covered")}
        missing = [
            kp
            for kp in sorted(entry.rubric.key_points, key=lambda kp: -kp.weight)
            if kp.id not in covered and kp.id not in current.hints
        ]
        en = session.language == "en"
        if not missing:
            text = self.phrasing.say(session.language, "no_hint")
            self._add_turn(db, session, "interviewer", "hint", text, current)
            return HintResponse(hint=text, key_point_id=None, score_cap=self._cap(current))
        kp = missing[0]
        current.hints = [*current.hints, kp.id]
        text = self.phrasing.say(session.language, "hint", point=kp.text_en if en else kp.text)
        self._add_turn(db, session, "interviewer", "hint", text, current, key_point_id=kp.id)
        if current.result:
            current.score = min(current.score or 0.0, self._cap(current))
        return HintResponse(hint=text, key_point_id=kp.id, score_cap=self._cap(current))

    def followup(self, db: Session, user: str, session_id: str) -> NextStep:
        """The candidate asks for a related question now; an unanswered current question is dropped."""
        session = self.load(db, user, session_id)
        current = self._require_active(session)
        entry = self._entry(current.entry_id)
        related = self._related_entry(session, entry)
        if related is None:
            raise InterviewError(409, "no_followup", "no related question is left to ask")
        if current.answered_at is None:
            current.status = "dropped"
        else:
            current.status = "done"
        asked = self._ask(db, session, related, kind="followup")
        return NextStep(
            kind="followup",
            question=self._asked_out(session, asked),
            prompt=self._last_prompt(session),
            phrasing=self._opening_phrasing(asked),
        )

    def clarify(self, db: Session, user: str, session_id: str, text: str) -> Line:
        """The candidate asks about the question (scope, notation) instead of answering: the
        interviewer answers without giving the answer away. Nothing is graded; the clock runs."""
        session = self.load(db, user, session_id)
        current = self._require_active(session)
        entry = self._entry(current.entry_id)
        on_question = [t for t in session.turns if t.question_id == current.id]
        probe = None
        last_said = next((t for t in reversed(on_question) if t.role == "interviewer"), None)
        if last_said is not None and last_said.kind == "probe" and entry.rubric is not None:
            kp = next((k for k in entry.rubric.key_points if k.id == last_said.key_point_id), None)
            if kp is not None:
                probe = kp.probe_en if session.language == "en" else kp.probe
        self._add_turn(db, session, "candidate", "ask", text, current)
        line = self.phrasing.clarify(
            ClarifyContext(
                language=session.language,
                question=self._question_text(entry, session.language),
                asked=text,
                probe=probe,
                secrets=secrets_of(entry),
            )
        )
        self._add_turn(db, session, "interviewer", "clarify", line.text, current)
        return line

    def end(self, db: Session, user: str, session_id: str) -> None:
        session = self.load(db, user, session_id)
        if session.status != "ended":
            self._finish(db, session, "manual")

    def close_if_time_up(self, db: Session, session: InterviewSession) -> None:
        if session.status == "active" and self.time_up(session):
            self._finish(db, session, "time")

    def close_expired(self, db: Session, user: str) -> None:
        """End every running session of `user` whose deadline has passed (history, progress)."""
        running = db.scalars(
            select(InterviewSession).where(
                InterviewSession.user == user,
                InterviewSession.status == "active",
                InterviewSession.deadline.is_not(None),
            )
        ).all()
        for session in running:
            self.close_if_time_up(db, session)

    # ---------- state ----------

    def state(self, db: Session, user: str, session_id: str) -> SessionState:
        session = self.load(db, user, session_id)
        deadline = aware(session.deadline)
        remaining = max(0.0, (deadline - now()).total_seconds()) if deadline else None
        status = "ended" if session.status == "ended" or self.time_up(session) else "active"
        current = self._current(session) if status == "active" else None
        numbers = labels.question_numbers(session)
        turn_labels = labels.turn_labels(session)
        lang = "en" if session.language == "en" else "zh"
        return SessionState(
            id=session.id,
            mode=Mode(session.mode),
            status=status,
            end_reason=session.end_reason or ("time" if status == "ended" else None),
            language=session.language,
            grader=session.grader,
            created_at=aware(session.created_at),
            deadline=deadline,
            remaining_seconds=remaining,
            num_questions=session.num_questions,
            current=self._asked_out(session, current) if current else None,
            turns=[
                TurnOut(
                    seq=t.seq,
                    role=t.role,
                    kind=t.kind,
                    text=t.text,
                    question_number=numbers.get(t.question_id) if t.question_id else None,
                    late=t.late,
                    created_at=aware(t.created_at),
                    score=(t.grade or {}).get("score") if t.grade else None,
                    label=label[lang],
                    labels=label,
                )
                for t, label in zip(session.turns, turn_labels, strict=True)
            ],
        )

    # ---------- internals ----------

    def _entry(self, entry_id: str) -> QuestionEntry:
        entry = self.bank.get(entry_id)
        if entry is None:  # the bank changed under a running session
            raise InterviewError(
                409, "question_removed", f"question {entry_id!r} is no longer in the bank"
            )
        return entry

    @staticmethod
    def _current(session: InterviewSession) -> AskedQuestion | None:
        open_questions = [q for q in session.questions if q.status == "open"]
        return open_questions[-1] if open_questions else None

    def _cap(self, asked: AskedQuestion) -> float:
        return max(0.0, 10.0 - HINT_CAP_STEP * len(asked.hints))

    def _merge(
        self, entry: QuestionEntry, asked: AskedQuestion, grade: Grade, language: str, late: bool
    ) -> Grade:
        """Combine every answer to this question (first answer plus probe answers) into one grade."""
        assert entry.rubric is not None
        before = {kp["id"]: kp for kp in asked.result.get("key_points", [])}
        points = []
        for kp in grade.key_points:
            prev = before.get(kp.id)
            if prev and prev.get("confidence", 0) > kp.confidence:
                points.append(KeyPointResult.model_validate(prev))
            else:
                points.append(kp)
        misconceptions = {
            m["id"]: MisconceptionHit.model_validate(m)
            for m in asked.result.get("misconceptions", [])
        }
        for m in grade.misconceptions:
            misconceptions.setdefault(m.id, m)
        # The code's verdict (its tests and flags) is that of the latest answer whose code ran: a
        # later answer with working code supersedes an earlier one without code or with a bug,
        # while a prose answer to a probe keeps the verdict of the code already run.
        earlier_tests = [TestResult.model_validate(t) for t in asked.result.get("tests", [])]
        prose_after_code = bool(earlier_tests) and not grade.tests
        new_flags = [f for f in grade.flags if not (prose_after_code and f in CODE_FLAGS)]
        earlier_flags = [
            f for f in asked.result.get("flags", []) if prose_after_code or f not in CODE_FLAGS
        ]
        flags = list(dict.fromkeys([*earlier_flags, *new_flags]))
        tests = grade.tests or earlier_tests
        # Off-topic describes the whole question only while no answer to it was on topic.
        if "off_topic" in flags and asked.result and "off_topic" not in earlier_flags:
            flags.remove("off_topic")
        if "off_topic" in flags and "off_topic" not in grade.flags:
            flags.remove("off_topic")
        # "Code only" holds only while no answer to the question has explained anything.
        if "code_only" in flags and "code_only" not in grade.flags:
            flags.remove("code_only")
        if late and "late" not in flags:
            flags.append("late")
        if asked.hints and "hint_used" not in flags:
            flags.append("hint_used")
        cap = self._cap(asked)
        if not asked.result:
            score = min(cap, grade.score)  # the first answer's grade stands as graded
        elif grade.grader.startswith("llm"):
            score = analytic_score(points, len(misconceptions), flags, cap=cap)
        else:
            score = score_from(points, len(misconceptions), flags, cap=cap)
        if prose_after_code:
            # Code that was run and graded stays graded: explaining it in prose cannot cost it.
            score = max(score, min(cap, float(asked.result.get("score") or 0.0)))
        elif grade.tests and asked.result:
            # A later answer whose code ran carries its code share in its own grade (judge v2,
            # `code_grader.combined_score`); the merged prose score cannot drop it.
            score = max(score, min(cap, grade.score))
        merged = Grade(
            score=score,
            grader=grade.grader,
            key_points=points,
            misconceptions=list(misconceptions.values()),
            feedback=write_feedback(
                entry, points, list(misconceptions.values()), flags, language, tests
            ),
            flags=flags,
            reference_answer=entry.rubric.reference_answer,
            tests=tests,
            # the latest grade's fallback, if the LLM could not grade it (issue #18)
            fallback_reason=grade.fallback_reason,
            fallback_detail=grade.fallback_detail,
        )
        asked.result = merged.model_dump(mode="json")
        asked.score = merged.score
        asked.grader = merged.grader
        return merged

    def _decide(
        self,
        db: Session,
        session: InterviewSession,
        asked: AskedQuestion,
        entry: QuestionEntry,
        merged: Grade,
        late: bool,
    ) -> NextStep:
        if late:
            asked.status = "done"
            return self._finish(db, session, "time")
        assert entry.rubric is not None
        covered = {kp.id for kp in merged.key_points if kp.covered}
        missing = [
            kp
            for kp in sorted(entry.rubric.key_points, key=lambda kp: -kp.weight)
            if kp.id not in covered and kp.id not in asked.probes and kp.id not in asked.hints
        ]
        substantive = "injection" not in merged.flags or merged.score > 0
        if (
            missing
            and substantive
            and len(asked.probes) < self.rules.max_probes
            and merged.score < self.rules.probe_below
        ):
            kp = missing[0]
            asked.probes = [*asked.probes, kp.id]
            probe = kp.probe_en if session.language == "en" else kp.probe
            line = self.phrasing.probe(
                ProbeContext(
                    language=session.language,
                    question=self._question_text(entry, session.language),
                    answer=self._last_answer(session, asked),
                    probe=probe,
                    secrets=secrets_of(entry),
                )
            )
            self._add_turn(
                db, session, "interviewer", "probe", line.text, asked, key_point_id=kp.id
            )
            return NextStep(
                kind="probe", prompt=line.text, key_point_id=kp.id, phrasing=line.phrasing
            )
        asked.status = "done"
        return self._next_question(db, session, asked, entry, merged.score)

    def _next_question(
        self,
        db: Session,
        session: InterviewSession,
        asked: AskedQuestion,
        entry: QuestionEntry,
        merged_score: float,
    ) -> NextStep:
        if self.time_up(session):
            return self._finish(db, session, "time")
        if self._counted(session) >= session.num_questions:
            return self._finish(db, session, "done")
        if merged_score >= self.rules.followup_from:
            related = self._related_entry(session, entry)
            if related is not None:
                new = self._ask(db, session, related, kind="followup")
                return NextStep(
                    kind="followup",
                    question=self._asked_out(session, new),
                    prompt=self._last_prompt(session),
                    phrasing=self._opening_phrasing(new),
                )
        new = self._ask_from_plan(db, session, kind="question")
        if new is None:
            related = self._related_entry(session, entry)
            if related is None:
                return self._finish(db, session, "exhausted")
            new = self._ask(db, session, related, kind="followup")
        return NextStep(
            kind=new.kind,
            question=self._asked_out(session, new),
            prompt=self._last_prompt(session),
            phrasing=self._opening_phrasing(new),
        )

    def _counted(self, session: InterviewSession) -> int:
        return sum(q.status != "dropped" for q in session.questions)

    def _asked_ids(self, session: InterviewSession) -> set[str]:
        return {q.entry_id for q in session.questions}

    def _filters_accept(self, session: InterviewSession, entry: QuestionEntry) -> bool:
        req = SessionRequest(**session.filters)
        return selection.matches(entry, req)

    def _related_entry(
        self, session: InterviewSession, entry: QuestionEntry
    ) -> QuestionEntry | None:
        """A related, not yet asked question: rubric edges first (follow-up, contrast), then retrieval,
        preferring the candidate's weak areas in this session."""
        asked = self._asked_ids(session)
        order = {Relation.follow_up: 0, Relation.contrast: 1, Relation.prerequisite: 2}
        for edge in sorted(entry.related, key=lambda e: order[e.relation]):
            candidate = self.bank.get(edge.id)
            if candidate and candidate.id not in asked and self._filters_accept(session, candidate):
                return candidate
        hits = self.searcher.search(entry.text, k=15, filters=SearchFilters())
        return selection.pick_related(
            hits,
            lambda e: (
                e.id not in asked and e.rubric is not None and self._filters_accept(session, e)
            ),
            self._weak_areas(session),
            self.searcher.ranker.weak_at,
        )

    def _weak_areas(self, session: InterviewSession) -> set[str]:
        scores: dict[str, list[float]] = {}
        for q in session.questions:
            if q.score is not None:
                area = self.bank.get(q.entry_id)
                if area is not None:
                    scores.setdefault(area.area.value, []).append(q.score)
        return {a for a, s in scores.items() if sum(s) / len(s) < 6.0}

    def _ask_from_plan(
        self, db: Session, session: InterviewSession, kind: str
    ) -> AskedQuestion | None:
        asked = self._asked_ids(session)
        remaining = [
            eid for eid in session.plan if eid not in asked and self.bank.get(eid) is not None
        ]
        if not remaining:
            return None
        session.plan = remaining[1:]
        return self._ask(db, session, self._entry(remaining[0]), kind=kind)

    def _ask(
        self, db: Session, session: InterviewSession, entry: QuestionEntry, kind: str
    ) -> AskedQuestion:
        position = len(session.questions) + 1
        budget = None
        deadline, created = aware(session.deadline), aware(session.created_at)
        if deadline is not None and created is not None:
            budget = int((deadline - created).total_seconds() / max(session.num_questions, 1))
        asked = AskedQuestion(
            session_id=session.id,
            position=position,
            entry_id=entry.id,
            kind=kind,
            asked_at=now(),
            budget_seconds=budget,
            probes=[],
            hints=[],
            result={},
        )
        session.questions.append(asked)
        db.flush()
        number = self._counted(session)
        key = (
            "followup" if kind == "followup" else ("first_question" if number == 1 else "question")
        )
        values = {
            "number": number,
            "topic": entry.topic,
            "text": self._question_text(entry, session.language),
        }
        if key == "followup":
            line = self.phrasing.transition(self._transition_context(session, entry, values))
        else:
            line = Line(text=self.phrasing.say(session.language, key, **values))
        self._add_turn(db, session, "interviewer", kind, line.text, asked)
        # Not a column: how this request worded the opening line, for the NextStep it returns.
        asked.opening_phrasing = line.phrasing  # type: ignore[attr-defined]
        return asked

    @staticmethod
    def _opening_phrasing(asked: AskedQuestion) -> PhrasingInfo:
        return getattr(asked, "opening_phrasing", None) or PhrasingInfo()

    @staticmethod
    def _last_answer(session: InterviewSession, asked: AskedQuestion) -> str:
        answers = [
            t.text
            for t in session.turns
            if t.question_id == asked.id and t.role == "candidate" and t.kind == "answer"
        ]
        return answers[-1] if answers else ""

    def _transition_context(
        self, session: InterviewSession, entry: QuestionEntry, values: dict
    ) -> TransitionContext:
        """Why the new question follows the one before it: the rubric edge, else retrieval."""
        previous = session.questions[-2] if len(session.questions) >= 2 else None
        before = self.bank.get(previous.entry_id) if previous is not None else None
        relation = "retrieved"
        if before is not None:
            relation = next(
                (e.relation.value for e in before.related if e.id == entry.id), "retrieved"
            )
        return TransitionContext(
            language=session.language,
            previous_question=Phrasing.question_text(before, session.language) if before else "",
            answer=self._last_answer(session, previous) if previous is not None else "",
            relation=relation,
            values=values,
            secrets=secrets_of(entry) + (secrets_of(before) if before else []),
        )

    def _say(
        self,
        db: Session,
        session: InterviewSession,
        key: str,
        asked: AskedQuestion | None,
        values: dict,
        kind: str | None = None,
    ) -> str:
        text = self.phrasing.say(session.language, key, **values)
        self._add_turn(db, session, "interviewer", kind or key, text, asked)
        return text

    def _last_prompt(self, session: InterviewSession) -> str:
        return session.turns[-1].text if session.turns else ""

    def _add_turn(
        self,
        db: Session,
        session: InterviewSession,
        role: str,
        kind: str,
        text: str,
        asked: AskedQuestion | None,
        grade: Grade | None = None,
        late: bool = False,
        key_point_id: str | None = None,
    ) -> Turn:
        seq = (session.turns[-1].seq + 1) if session.turns else 1
        turn = Turn(
            session_id=session.id,
            seq=seq,
            question_id=asked.id if asked else None,
            role=role,
            kind=kind,
            text=text,
            key_point_id=key_point_id,
            grade=grade.model_dump(mode="json") if grade else None,
            late=late,
            created_at=now(),
        )
        session.turns.append(turn)
        return turn

    def _finish(self, db: Session, session: InterviewSession, reason: str) -> NextStep:
        for q in session.questions:
            if q.status == "open":
                if q.answered_at is None:
                    q.status, q.score = "unanswered", 0.0
                else:
                    q.status = "done"
        session.status = "ended"
        session.end_reason = reason
        session.ended_at = now()
        key = {"time": "end_time", "done": "end_done", "exhausted": "end_done"}.get(
            reason, "end_manual"
        )
        text = self._say(db, session, key, None, {}, kind="end")
        progress.record_session(db, self.bank, session)
        return NextStep(kind="end", prompt=text)

    def _question_text(self, entry: QuestionEntry, language: str) -> str:
        """The question as asked; a coding question also states the function its tests will call."""
        text = Phrasing.question_text(entry, language)
        contract = self.grading.coding_contract(entry.id)
        if contract is not None and entry.type == QuestionType.coding:
            text += "\n\n" + (contract.contract_en if language == "en" else contract.contract)
        return text

    def _asked_out(self, session: InterviewSession, asked: AskedQuestion) -> AskedOut:
        entry = self._entry(asked.entry_id)
        prompt = next(
            (
                t.text
                for t in session.turns
                if t.question_id == asked.id and t.role == "interviewer"
            ),
            "",
        )
        return AskedOut(
            number=sum(
                q.status != "dropped" for q in session.questions if q.position <= asked.position
            ),
            entry_id=entry.id,
            kind=asked.kind,
            text=entry.text,
            text_en=entry.text_en,
            topic=entry.topic,
            area=entry.area.value,
            difficulty=entry.difficulty,
            type=entry.type.value,
            asked_at=aware(asked.asked_at),
            budget_seconds=asked.budget_seconds,
            prompt=prompt,
            coding=self.grading.coding_contract(entry.id),
        )
