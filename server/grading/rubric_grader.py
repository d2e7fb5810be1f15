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

from server.corpus.schema import QuestionEntry
from server.grading.evidence import AnswerReader, AnswerReading
from server.grading.feedback import write_feedback
from server.grading.models import Grade, KeyPointResult, MisconceptionHit
from server.grading.scoring import COVERED_AT, score_from

READER_CACHE = 256


class RubricGrader:
    name = "rubric"

    def __init__(self) -> None:
        # Compiled readers per entry (rubric patterns and vocabularies): a cache, not session state.
        self._readers: OrderedDict[str, AnswerReader] = OrderedDict()
        self._lock = Lock()

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
        return self.reader(entry).read(answer)

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
            MisconceptionHit(id=w.id, text=w.text, correction=w.correction, evidence=w.evidence)
            for w in reading.wrong
        ]
        score = score_from(results, len(wrong), reading.flags, signals=reading.signals)
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
