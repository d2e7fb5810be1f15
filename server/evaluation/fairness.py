"""Fairness checks of the rubric grader (grader v3): what a candidate could argue with.

- **One wrong clause**: an honest answer plus one wrong statement (a misconception of its own
  entry, as a sentence of its own or as a clause inside the answer's first sentence). The clause
  should be found, cost a bounded amount, and uncover no point the answer states other than the one
  it contradicts.
- **True statements** (`corpus/true_statements.yaml`): graded against the entries of their field,
  none may be listed as a wrong claim.
- **Cross-question credit**: an honest answer graded against the related questions of its entry
  (a neighbouring question shares terms, not the answer) should score low."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from server.corpus.bank import QuestionBank
from server.corpus.phrase_check import load_true_statements
from server.evaluation.grading import GradingCase
from server.grading.models import Grade
from server.grading.rubric_grader import RubricGrader

HONEST_FOR_FAIRNESS = ("excellent", "good", "english", "bullets", "mixed")
MISMATCH_CEILING = 3.0
_FIRST_SENTENCE = re.compile(r"[。！？!?\n]|(?<=[a-z)\]])\.\s")

Grader = Callable[[object, str], Grade]


@dataclass
class WrongClauseResult:
    cases: int = 0
    detected: int = 0
    losses: list[float] = field(default_factory=list)
    uncovered: list[int] = field(default_factory=list)  # stated points lost besides their own
    worst: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        losses = np.array(self.losses or [0.0])
        return {
            "cases": float(self.cases),
            "detected": self.detected / max(1, self.cases),
            "loss_mean": float(losses.mean()),
            "loss_p95": float(np.percentile(losses, 95)),
            "loss_max": float(losses.max()),
            "over_3_points": float(np.mean(losses > 3.0)),
            "uncovered_over_1": float(np.mean(np.array(self.uncovered or [0]) > 1)),
            "uncovered_max": float(max(self.uncovered or [0])),
        }


def _with_clause(answer: str, clause: str, inside: bool) -> str:
    if not inside:
        return (
            f"{answer.rstrip()}\n另外，{clause}。"
            if _is_zh(answer)
            else f"{answer.rstrip()}\nAlso, {clause}."
        )
    m = _FIRST_SENTENCE.search(answer)
    cut = m.start() if m else len(answer)
    joiner = "，而且" if _is_zh(answer) else ", and "
    return answer[:cut] + joiner + clause + answer[cut:]


def _is_zh(text: str) -> bool:
    return sum("\u4e00" <= c <= "\u9fff" for c in text) > len(text) * 0.1


def wrong_clause(cases: list[GradingCase], grader: RubricGrader) -> WrongClauseResult:
    """Every honest answer (one per question and kind) with each misconception of its entry."""
    grade = grader.grade
    out = WrongClauseResult()
    seen: set[tuple[str, str]] = set()
    for case in cases:
        rubric = case.entry.rubric
        if (
            case.kind not in HONEST_FOR_FAIRNESS
            or rubric is None
            or (case.entry.id, case.kind) in seen
        ):
            continue
        seen.add((case.entry.id, case.kind))
        clean = grade(case.entry, case.answer)
        covered = {k.id for k in clean.key_points if k.covered}
        zh = _is_zh(case.answer)
        for m in rubric.misconceptions:
            for inside in (False, True):
                claim = (m.text if zh else m.text_en).rstrip("。.")
                graded = grade(case.entry, _with_clause(case.answer, claim, inside))
                out.cases += 1
                if graded.misconceptions:
                    out.detected += 1
                loss = round(clean.score - graded.score, 1)
                out.losses.append(loss)
                lost = covered - {k.id for k in graded.key_points if k.covered}
                own = {w.id.removeprefix("contradicts:") for w in graded.misconceptions}
                mapped = grader.reader(case.entry).misconception_point.get(m.id)
                own |= {mapped} & lost if mapped else set()
                out.uncovered.append(len(lost - own))
                if loss > 3.0 or len(lost - own) > 1:
                    out.worst.append(
                        f"{case.entry.id} [{case.kind}+{m.id}{' inside' if inside else ''}] "
                        f"{clean.score:.1f}→{graded.score:.1f}, uncovered {sorted(lost - own)}"
                    )
    return out


@dataclass
class TrueStatementResult:
    statements: int = 0
    gradings: int = 0
    flagged: list[str] = field(default_factory=list)


def true_statements(bank: QuestionBank, grade: Grader) -> TrueStatementResult:
    """Each curated true statement graded against every entry: no wrong claim may be listed."""
    out = TrueStatementResult()
    statements = load_true_statements()
    out.statements = len(statements)
    for text in statements:
        for entry in bank:
            if entry.rubric is None:
                continue
            graded = grade(entry, text)
            out.gradings += 1
            if graded.misconceptions:
                out.flagged.append(f"{entry.id}: {graded.misconceptions[0].id} ← {text[:50]}")
    return out


@dataclass
class CrossQuestionResult:
    pairs: int = 0
    scores: list[float] = field(default_factory=list)
    over: list[str] = field(default_factory=list)


def cross_question(
    cases: list[GradingCase], bank: QuestionBank, grade: Grader
) -> CrossQuestionResult:
    """Honest answers graded against the related questions of their entry."""
    out = CrossQuestionResult()
    seen: set[tuple[str, str]] = set()
    for case in cases:
        if case.kind not in ("excellent", "good") or (case.entry.id, case.kind) in seen:
            continue
        seen.add((case.entry.id, case.kind))
        for edge in case.entry.related:
            other = bank.get(edge.id)
            if other is None or other.rubric is None:
                continue
            s = grade(other, case.answer).score
            out.pairs += 1
            out.scores.append(s)
            if s > MISMATCH_CEILING:
                out.over.append(f"{case.entry.id}[{case.kind}] as {other.id}: {s:.1f}")
    return out
