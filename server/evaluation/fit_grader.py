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

FOLDS = 5


def signals_for(
    cases: list[GradingCase],
    grader: RubricGrader | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list[dict[str, float]]:
    grader = grader or RubricGrader()
    out = []
    for n, case in enumerate(cases, start=1):
        out.append(grader.read(case.entry, case.answer).signals)
        if progress:
            progress(n, len(cases))
    return out


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
        model = fit([signals[i] for i in train_idx], list(labels[train_idx]))
        for i in held_idx:
            scores[i] = round(model.score(signals[i]), 1)
    return list(scores)


def fit_and_save(
    cases: list[GradingCase], signals: list[dict[str, float]], path: Path = CALIBRATION_FILE
) -> Calibration:
    if any(c.split != "train" for c in cases):
        raise ValueError("the calibration is fitted on the training split only")
    model = fit(signals, [c.label for c in cases])
    path.write_text(json.dumps(model.to_json(), indent=1) + "\n", encoding="utf-8")
    return model
