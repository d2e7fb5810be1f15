"""Fit the rubric grader's calibration on the training split, with out-of-fold figures.

Only training-split questions (`grading.split_of`) are read; folds are grouped by question, so an
out-of-fold score never comes from a model that saw another answer to the same question."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from server.evaluation.grading import GradingCase
from server.grading.calibration import CALIBRATION_FILE, Calibration, fit
from server.grading.rubric_grader import RubricGrader
from server.grading.scoring import bounded_score

FOLDS = 5
CLEAN = "clean:"


def signals_for(
    cases: list[GradingCase],
    grader: RubricGrader | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, float]]:
    """Each answer's grading signals; the same answer read without its wrong claims rides along
    under `clean:` keys, so out-of-fold scores apply the grader's bounded loss too."""
    grader = grader or RubricGrader()
    out = []
    for n, case in enumerate(cases, start=1):
        reading = grader.read(case.entry, case.answer)
        row = dict(reading.signals)
        row.update({f"{CLEAN}{k}": v for k, v in reading.clean_signals.items()})
        out.append(row)
        if progress:
            progress(n, len(cases))
    return out


def _actual(row: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in row.items() if not k.startswith(CLEAN)}


def out_of_fold(
    cases: list[GradingCase], signals: list[dict[str, float]], folds: int = FOLDS
) -> list[float]:
    """Each case scored by a calibration fitted on the other folds' questions."""
    from sklearn.model_selection import GroupKFold

    if any(c.split != "train" for c in cases):
        raise ValueError("out-of-fold fitting reads the training split only")
    groups = [c.entry.id for c in cases]
    labels = np.array([c.label for c in cases])
    scores = np.zeros(len(cases))
    for train_idx, held_idx in GroupKFold(n_splits=folds).split(signals, labels, groups):
        model = fit([_actual(signals[i]) for i in train_idx], list(labels[train_idx]))
        for i in held_idx:
            scores[i] = score_signals(model, signals[i])
    return list(scores)


def score_signals(model: Calibration, row: dict[str, float]) -> float:
    """What the rubric grader gives for these signals (`rubric_grader.grade`): the fitted score,
    kept within the bounded loss a wrong claim may cost against the clean reading."""
    score = round(model.score(row), 1)
    clean = {k[len(CLEAN) :]: v for k, v in row.items() if k.startswith(CLEAN)}
    if not clean:
        return score
    clean["wrong_claims"] = 0.0
    wrong = row.get("wrong_clauses", row.get("wrong_claims", 0.0))
    return bounded_score(score, round(model.score(clean), 1), int(wrong))


def fit_and_save(
    cases: list[GradingCase], signals: list[dict[str, float]], path: Path = CALIBRATION_FILE
) -> Calibration:
    if any(c.split != "train" for c in cases):
        raise ValueError("the calibration is fitted on the training split only")
    model = fit([_actual(s) for s in signals], [c.label for c in cases])
    path.write_text(json.dumps(model.to_json(), indent=1) + "\n", encoding="utf-8")
    return model
