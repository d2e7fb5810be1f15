"""The offline rubric grader (v2): what the answer asserts, point by point, scored by a fitted map.

`evidence.AnswerReader` reads every sentence of the answer: which key points it states (a statement,
not a term), which it denies, which wrong claims (contradictions, misconceptions) it makes, and
answer-level signals (keyword salad, repetition, hedging, injections, relevance to this question's
own rubric). `calibration.json` maps those signals to 0–10; it was fitted on labelled answers
(`sparring eval fit-grader`). No gate erases coverage: the signals enter the fitted score, and only
the ceilings in `calibration.CEILINGS` cap it."""

from __future__ import annotations

from collections import OrderedDict
from threading import Lock

from server.corpus.bank import QuestionBank
from server.corpus.schema import QuestionEntry
from server.grading.affinity import BankAffinity
from server.grading.evidence import AnswerReader, AnswerReading
from server.grading.feedback import write_feedback
from server.grading.models import Grade, KeyPointResult, MisconceptionHit
from server.grading.normalize import normal_form
from server.grading.scoring import COVERED_AT, bounded_score, score_from

READER_CACHE = 512
# Another entry's rubric is read only when the answer is lexically closer to it than to this one.
AFFINITY_CHECK_BELOW = 0.9
OTHER_QUESTION_SHARE = 0.5  # this question's coverage under half the other's: flag it


class RubricGrader:
    name = "rubric"

    def __init__(self, bank: QuestionBank | None = None) -> None:
        # Compiled readers per entry (rubric patterns and vocabularies): a cache, not session state.
        self._readers: OrderedDict[str, AnswerReader] = OrderedDict()
        self._lock = Lock()
        self.bank = bank
        self._affinity: BankAffinity | None = None

    @property
    def affinity(self) -> BankAffinity | None:
        """Which entry an answer reads closest to (built on first use; needs the bank)."""
        if self.bank is None:
            return None
        if self._affinity is None:
            built = BankAffinity([e for e in self.bank if e.rubric is not None])
            with self._lock:
                self._affinity = self._affinity or built
        return self._affinity

    def reader(self, entry: QuestionEntry) -> AnswerReader:
        with self._lock:
            cached = self._readers.get(entry.id)
            if cached is not None and cached.entry is entry:
                self._readers.move_to_end(entry.id)
                return cached
        reader = AnswerReader(entry)
        with self._lock:
            self._readers[entry.id] = reader
            while len(self._readers) > READER_CACHE:
                self._readers.popitem(last=False)
        return reader

    def read(self, entry: QuestionEntry, answer: str) -> AnswerReading:
        reading = self.reader(entry).read(answer)
        relevance = self._relevance(entry, answer, reading)
        reading.signals.update(relevance)
        reading.clean_signals.update(relevance)
        if relevance["own_share"] < OTHER_QUESTION_SHARE and "off_topic" not in reading.flags:
            reading.flags.append("other_question")
        return reading

    def _relevance(self, entry: QuestionEntry, answer: str, reading: AnswerReading) -> dict:
        """`affinity`: the answer's closeness to this entry over its closeness to the closest
        entry; `own_share`: this entry's coverage over the closest other entry's coverage, read
        only when another entry is closer (an answer to a neighbouring question collects a point
        or two here through shared terms, and far more there)."""
        out = {"affinity": 1.0, "own_share": 1.0}
        affinity = self.affinity
        if affinity is None or self.bank is None:
            return out
        found = affinity.of(entry.id, normal_form(answer))
        if found is None:
            return out
        out["affinity"] = found.ratio
        other = self.bank.get(found.best_id)
        if found.ratio >= AFFINITY_CHECK_BELOW or other is None or other.id == entry.id:
            return out
        own = reading.signals.get("coverage", 0.0)
        theirs = self.reader(other).read(answer).signals.get("coverage", 0.0)
        out["own_share"] = 1.0 if theirs <= own else own / theirs
        return out

    def grade(self, entry: QuestionEntry, answer: str, language: str = "zh") -> Grade:
        rubric = entry.rubric
        if rubric is None:
            raise ValueError(f"entry {entry.id} has no rubric")
        if not answer.strip():
            return self.zero(entry, ["empty"], language)
        reading = self.read(entry, answer)
        if not any(s.asserted_text.strip() or s.injection for s in reading.sentences):
            return self.zero(entry, ["empty"], language)
        results = [
            KeyPointResult(
                id=p.point.id,
                text=p.point.text,
                text_en=p.point.text_en,
                weight=p.point.weight,
                covered=p.credit >= COVERED_AT,
                evidence=p.evidence if p.credit >= COVERED_AT else None,
                confidence=round(p.credit, 3),
            )
            for p in reading.points
        ]
        wrong = [
            MisconceptionHit(
                id=w.id,
                text=w.text,
                correction=w.correction,
                evidence=w.evidence,
                text_en=w.text_en,
                correction_en=w.correction_en,
            )
            for w in reading.wrong
        ]
        score = bounded_score(
            score_from(results, len(wrong), reading.flags, signals=reading.signals),
            score_from(
                results, 0, reading.flags, signals=reading.clean_signals | {"wrong_claims": 0.0}
            ),
            int(reading.signals.get("wrong_clauses", len(wrong))),
        )
        return Grade(
            score=score,
            grader=self.name,
            key_points=results,
            misconceptions=wrong,
            feedback=write_feedback(entry, results, wrong, reading.flags, language),
            flags=reading.flags,
            reference_answer=rubric.reference_answer,
        )

    def zero(self, entry: QuestionEntry, flags: list[str], language: str = "zh") -> Grade:
        """A zero grade for an empty, skipped or timed-out answer (no model is called)."""
        rubric = entry.rubric
        assert rubric is not None
        results = [
            KeyPointResult(
                id=kp.id, text=kp.text, text_en=kp.text_en, weight=kp.weight, covered=False
            )
            for kp in rubric.key_points
        ]
        return Grade(
            score=0.0,
            grader=self.name,
            key_points=results,
            misconceptions=[],
            feedback=write_feedback(entry, results, [], flags, language),
            flags=flags,
            reference_answer=rubric.reference_answer,
        )
