"""Out-of-fold comparisons of the search ranker's fit, on the TRAIN split only
(`sparring eval ranker-cv`).

Questions docs/search.md answers with it:
- which objective: the fit's listwise weight (0 = the plain pointwise logistic regression), each
  weight scored out of fold (5 folds grouped by query) on the same candidate rows, each alone and
  with the verdict (the per-query stage that sets the top relevance, itself out of fold);
- does a labelled set teach the ranker anything: that set's train rows scored by a model fitted
  without them (as a brand-new set of wordings meets the ranker) against out of fold with the
  set's other rows in the fit.
Test cases are never read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from server.corpus.bank import QuestionBank
from server.evaluation.fit_ranker import (
    ANSWERABLE_KEPT,
    LISTWISE_WEIGHT,
    _ranker_weights,
    _rows,
    out_of_fold,
    out_of_fold_logits,
    query_outcomes,
    query_rows,
    relevance_of,
    served_relevance,
    verdict_out_of_fold,
)
from server.evaluation.retrieval import RetrievalCase, auc, load_cases
from server.retrieval.ranker import sigmoid
from server.retrieval.search import QuestionSearcher


@dataclass(frozen=True)
class CvLine:
    label: str
    queries: int  # answerable + no-match queries the figures are over
    answerable: int
    recall_at_1: float | None
    recall_at_5: float | None
    mrr_at_10: float | None
    no_match_auc: float | None
    # share of no-match queries whose top relevance is under the cut that keeps ANSWERABLE_KEPT of
    # the answerable ones: how well the verdict separates at the fit's own operating point
    no_match_said_none: float | None


def _mean(values: np.ndarray) -> float | None:
    return round(float(values.mean()), 4) if values.size else None


def _line(
    label: str, cases: list[RetrievalCase], y: np.ndarray, groups: np.ndarray, relevance: np.ndarray
) -> CvLine:
    q = query_outcomes(cases, y, groups, relevance)
    answerable_top, no_match_top = q.top[q.has_match], q.top[~q.has_match]
    said_none = None
    if answerable_top.size and no_match_top.size:
        cut = float(np.quantile(answerable_top, 1.0 - ANSWERABLE_KEPT))
        said_none = _mean(no_match_top < cut)
    area = auc(list(answerable_top), list(no_match_top))
    return CvLine(
        label,
        len(cases),
        int(q.has_match.sum()),
        _mean(q.at1),
        _mean(q.in5),
        _mean(q.rr),
        None if area is None else round(area, 4),
        said_none,
    )


def _subset(
    keep: np.ndarray, cases: list[RetrievalCase], y: np.ndarray, groups: np.ndarray
) -> tuple[list[RetrievalCase], np.ndarray, np.ndarray]:
    """The cases where `keep` holds, their rows' mask, and those rows' groups renumbered 0..k-1."""
    kept = np.flatnonzero(keep)
    rows = np.isin(groups, kept)
    renumber = {int(g): i for i, g in enumerate(kept)}
    return [cases[g] for g in kept], rows, np.asarray([renumber[int(g)] for g in groups[rows]])


def compare(
    searcher: QuestionSearcher,
    bank: QuestionBank,
    cases: list[RetrievalCase],
    weights: list[float] | None = None,
    held_out: Path | None = None,
) -> list[CvLine]:
    """Out-of-fold lines, each over all train queries and over those in real candidates' words
    (origin "notes"); with `held_out`, also that set's train rows fitted without and with them."""
    train = [c for c in cases if c.split == "train"]
    x, y, groups = _rows(searcher, bank, train)
    real = np.asarray([c.origin == "notes" for c in train], dtype=bool)
    real_cases, real_rows, real_groups = _subset(real, train, y, groups)
    lines = []
    oofs: dict[float, np.ndarray] = {}
    for weight in weights if weights is not None else [0.0, LISTWISE_WEIGHT]:
        logits = out_of_fold_logits(x, y, groups, weight)
        oof = oofs[weight] = sigmoid(logits)
        name = "pointwise (weight 0)" if weight == 0 else f"listwise weight {weight:g}"
        scored = [(name, oof)]
        # the same ranker with the verdict setting each query's top relevance (what is served)
        alone = query_outcomes(train, y, groups, oof)
        top = verdict_out_of_fold(query_rows(logits, x, groups), alone.has_match, alone.top_correct)
        if top is not None:
            scored.append((f"{name} + verdict", served_relevance(logits, groups, top)))
        for label, relevance in scored:
            lines.append(_line(f"{label}: all", train, y, groups, relevance))
            if real_cases:
                lines.append(
                    _line(
                        f"{label}: real wording",
                        real_cases,
                        y[real_rows],
                        real_groups,
                        relevance[real_rows],
                    )
                )
    if held_out is not None:
        queries = {c.query for c in load_cases(held_out) if c.split == "train"}
        inside = np.asarray([c.query in queries for c in train], dtype=bool)
        if inside.any() and (~inside).any():
            set_cases, set_rows, set_groups = _subset(inside, train, y, groups)
            without = _ranker_weights(x[~set_rows], y[~set_rows], groups[~set_rows])
            lines.append(
                _line(
                    f"{held_out.name} train rows, fit without them",
                    set_cases,
                    y[set_rows],
                    set_groups,
                    relevance_of(without, x[set_rows]),
                )
            )
            oof = oofs.get(LISTWISE_WEIGHT)
            if oof is None:
                oof = out_of_fold(x, y, groups)
            lines.append(
                _line(
                    f"{held_out.name} train rows, out of fold with the rest of the set",
                    set_cases,
                    y[set_rows],
                    set_groups,
                    oof[set_rows],
                )
            )
    return lines
