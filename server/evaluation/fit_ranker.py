"""Fit search v3's ranker (server/retrieval/ranker.py) on the TRAIN split of the retrieval sets.

One row per (query, candidate entry) with label "this entry answers the query"; queries the bank
cannot answer contribute only negatives, which is what teaches the top relevance to fall for them.
The `match` thresholds come from out-of-fold predictions (5-fold, grouped by query), so they are not
fitted on the very predictions they judge. Test cases are never read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold

from server.corpus.bank import QuestionBank
from server.evaluation.retrieval import RetrievalCase, auc
from server.retrieval.ranker import FEATURES, RankerModel
from server.retrieval.search import QuestionSearcher

# Top-1 precision a "strong" match must reach on out-of-fold training predictions.
STRONG_PRECISION = 0.9
# Share of answerable training queries (out of fold) whose match must be weak or strong, not none.
ANSWERABLE_KEPT = 0.92
REGULARISATION_C = 1.0


@dataclass
class FitReport:
    model: RankerModel
    queries: int
    rows: int
    cv_auc: float | None
    cv_recall_at_5: float


def _rows(searcher: QuestionSearcher, bank: QuestionBank, cases: list[RetrievalCase]):
    xs, ys, groups = [], [], []
    for g, case in enumerate(cases):
        relevant = case.relevant(bank)
        ids, _, features, _ = searcher.candidates(case.query)
        xs.append(features)
        ys.append(np.asarray([i in relevant for i in ids], dtype=int))
        groups.append(np.full(len(ids), g))
    return np.vstack(xs), np.concatenate(ys), np.concatenate(groups)


def _logistic(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    clf = LogisticRegression(C=REGULARISATION_C, max_iter=2000)
    clf.fit((x - mean) / scale, y)
    return clf.coef_[0], float(clf.intercept_[0]), mean, scale


def _thresholds(top: np.ndarray, has_match: np.ndarray, top_correct: np.ndarray):
    """weak_at: the highest cut that still keeps ANSWERABLE_KEPT of the answerable training queries
    at weak or better (telling a user the bank lacks a question it has is the costlier mistake, and a
    quantile is stable where a balanced-accuracy optimum is flat); strong_at: the lowest cut above
    which the top hit is right at least STRONG_PRECISION of the time."""
    matched = top[has_match]
    weak_at = float(np.quantile(matched, 1.0 - ANSWERABLE_KEPT)) if matched.size else 0.5
    strong_at = 1.0
    for t in sorted(np.unique(top), reverse=True):
        sel = top >= t
        if sel.sum() >= 10 and top_correct[sel].mean() >= STRONG_PRECISION:
            strong_at = float(t)
    return max(strong_at, weak_at), weak_at


def fit(searcher: QuestionSearcher, bank: QuestionBank, cases: list[RetrievalCase]) -> FitReport:
    train = [c for c in cases if c.split == "train"]
    x, y, groups = _rows(searcher, bank, train)

    # Out-of-fold relevance for every training row.
    oof = np.zeros(len(y))
    for fit_idx, held_idx in GroupKFold(n_splits=5).split(x, y, groups):
        w, b, m, s = _logistic(x[fit_idx], y[fit_idx])
        oof[held_idx] = 1.0 / (1.0 + np.exp(-(((x[held_idx] - m) / s) @ w + b)))
    top, has_match, top_correct, in5, at1 = [], [], [], [], []
    for g, case in enumerate(train):
        rows = np.flatnonzero(groups == g)
        order = rows[np.argsort(-oof[rows], kind="stable")]
        top.append(oof[order[0]])
        has_match.append(not case.no_match)
        top_correct.append(bool(y[order[0]]))
        if not case.no_match:
            in5.append(bool(y[order[:5]].any()))
            at1.append(bool(y[order[0]]))
    top_a, has_a, correct_a = np.asarray(top), np.asarray(has_match), np.asarray(top_correct)
    strong_at, weak_at = _thresholds(top_a, has_a, correct_a)
    cv_auc = auc(list(top_a[has_a]), list(top_a[~has_a]))

    w, b, m, s = _logistic(x, y)
    meta = {
        "fitted": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "train_queries": len(train),
        "train_no_match_queries": int((~has_a).sum()),
        "rows": len(y),
        "cv_no_match_auc": None if cv_auc is None else round(cv_auc, 4),
        "cv_recall_at_1": round(float(np.mean(at1)), 4) if at1 else None,
        "cv_recall_at_5": round(float(np.mean(in5)), 4) if in5 else None,
        "cv_answerable_said_none": round(float((top_a[has_a] < weak_at).mean()), 4)
        if has_a.any()
        else None,
        "cv_no_match_said_none": round(float((top_a[~has_a] < weak_at).mean()), 4)
        if (~has_a).any()
        else None,
    }
    model = RankerModel(w, b, m, s, strong_at, weak_at, meta)
    return FitReport(model, len(train), len(y), cv_auc, float(np.mean(in5)) if in5 else 0.0)


__all__ = ["FEATURES", "FitReport", "fit"]
