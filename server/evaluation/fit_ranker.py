"""Fit search v3's ranker (server/retrieval/ranker.py) on the TRAIN split of the retrieval sets.

One row per (query, candidate entry) with label "this entry answers the query"; queries the bank
cannot answer contribute only negatives, which is what teaches the top relevance to fall for them.
The weights minimise the rows' logistic loss plus a listwise term per answerable query (see
`_ranker_weights`).
Then the verdict (server/retrieval/ranker.py), one row per query: P(answerable) and P(top right |
answerable), fitted on the ranker's out-of-fold logits, which is how a new query's logits look.
The `match` thresholds come from out-of-fold predictions of both stages (5 folds), so they are not
fitted on the very predictions they judge. Test cases are never read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
from scipy.optimize import minimize
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GroupKFold, StratifiedKFold

from server.corpus.bank import QuestionBank
from server.evaluation.retrieval import RetrievalCase, auc
from server.retrieval.ranker import (
    ANSWERABLE_FEATURES,
    FEATURES,
    TOP_RIGHT_FEATURES,
    LogisticPart,
    RankerModel,
    Verdict,
    query_features,
    shifted,
    sigmoid,
)
from server.retrieval.search import QuestionSearcher

# Top-1 precision a "strong" match must reach on out-of-fold training predictions.
STRONG_PRECISION = 0.9
# Share of answerable training queries (out of fold) whose match must be weak or strong, not none.
# 0.92 with the ranker's own top relevance; the verdict separates well enough to keep 0.95 and still
# tell more no-match queries `none` (out of fold, real wording: 0.69 of them at 0.92 before, 0.79
# at 0.95 with it; docs/search.md).
ANSWERABLE_KEPT = 0.95
REGULARISATION_C = 1.0
# Weight of the listwise (softmax over a query's candidates) term against the pointwise one: 1.0
# gained hardly more recall@1 out of fold and told fewer no-match queries `none` (docs/search.md).
LISTWISE_WEIGHT = 0.3
# The weak cut is counted over the answerable training queries in real candidates' words when
# the sets have at least this many (else over all of them).
MIN_REAL = 50
# The strong cut is the median over bootstrap resamples of the training queries (fixed seed: a
# refit of the same rows gives the same cut).
BOOTSTRAP_ROUNDS = 200
BOOTSTRAP_SEED = 0
# The verdict's two regressions: L2 strength, and the seed of its out-of-fold split (by query,
# stratified on answerable / no-match).
VERDICT_C = 1.0
VERDICT_FOLDS = 5
VERDICT_SEED = 0


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


def _standardise(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    return mean, scale


def _joint_loss(
    params: np.ndarray,
    z: np.ndarray,
    y: np.ndarray,
    listed: np.ndarray,
    segment: np.ndarray,
    listwise_weight: float = LISTWISE_WEIGHT,
) -> tuple[float, np.ndarray]:
    """Pointwise logistic loss over every row, plus `listwise_weight` x the softmax (listwise) loss of
    each answerable query (-log of the softmax mass on its right entries), plus an L2 penalty on
    the weights; and its gradient. `listed` are the rows of answerable queries, `segment` each
    one's query number (0..k-1)."""
    w, b = params[:-1], params[-1]
    s = z @ w
    p = 1.0 / (1.0 + np.exp(-np.clip(s + b, -30, 30)))
    eps = 1e-12
    loss = -float(np.sum(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps)))
    grad_s = p - y  # d loss / d score, pointwise part
    grad_b = float(np.sum(p - y))
    k = int(segment.max()) + 1 if segment.size else 0
    if k:
        sl, yl = s[listed], y[listed]
        top = np.full(k, -np.inf)
        np.maximum.at(top, segment, sl)
        e = np.exp(sl - top[segment])
        total, right = np.bincount(segment, e, k), np.bincount(segment, e * yl, k)
        loss -= listwise_weight * float(np.sum(np.log(right) - np.log(total)))
        grad_list = e / total[segment] - e * yl / right[segment]
        np.add.at(grad_s, listed, listwise_weight * grad_list)
    loss += 0.5 / REGULARISATION_C * float(w @ w)
    grad_w = z.T @ grad_s + w / REGULARISATION_C
    return loss, np.append(grad_w, grad_b)


def _ranker_weights(
    x: np.ndarray, y: np.ndarray, groups: np.ndarray, listwise_weight: float = LISTWISE_WEIGHT
) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """Weights fitted on the joint pointwise + listwise objective, then recalibrated (Platt: one
    scale and one offset, fitted on the same rows) so that the relevance is a probability again.

    The pointwise loss alone fits "is this entry right" row by row, which is what the match
    verdict needs; the listwise term fits what users see, the right entry above the others of the
    same query. Out of fold on the train split the listwise term moved recall@1 from 0.751 to
    0.757 (real wording 0.598 to 0.608) at the same no-match AUC: a small gain (docs/search.md;
    `sparring eval ranker-cv` measures it)."""
    mean, scale = _standardise(x)
    z = (x - mean) / scale
    listed = np.flatnonzero(np.isin(groups, groups[y == 1]))  # rows of answerable queries
    _, segment = np.unique(groups[listed], return_inverse=True)
    start = np.zeros(z.shape[1] + 1)
    fitted = minimize(
        _joint_loss,
        start,
        args=(z, y, listed, segment, listwise_weight),
        jac=True,
        method="L-BFGS-B",
    ).x
    w = fitted[:-1]
    platt = LogisticRegression(C=1e4, max_iter=1000).fit((z @ w)[:, None], y)
    a, c = float(platt.coef_[0][0]), float(platt.intercept_[0])
    return a * w, c, mean, scale


def _strong_cut(top: np.ndarray, top_correct: np.ndarray) -> float:
    """The lowest cut above which the top hit is right at least STRONG_PRECISION of the time
    (and that holds for at least 10 queries); 1.0 when no cut does."""
    order = np.argsort(-top, kind="stable")
    ranked = top[order]
    right = np.cumsum(top_correct[order])
    # a cut at value t keeps every query scoring >= t: the last of each run of equal values
    last = np.flatnonzero(np.append(ranked[1:] != ranked[:-1], True))
    kept = last + 1
    ok = (kept >= 10) & (right[last] >= STRONG_PRECISION * kept)
    return float(ranked[last][ok].min()) if ok.any() else 1.0


def _thresholds(
    top: np.ndarray,
    has_match: np.ndarray,
    top_correct: np.ndarray,
    real: np.ndarray | None = None,
):
    """weak_at: the highest cut that still keeps ANSWERABLE_KEPT of the answerable training queries
    at weak or better (telling a user the bank lacks a question it has is the costlier mistake, and a
    quantile is stable where a balanced-accuracy optimum is flat); strong_at: the median, over
    bootstrap resamples of the queries, of the lowest cut above which the top hit is right at least
    STRONG_PRECISION of the time. The plain lowest cut jumped with a few rows (0.626 vs 0.665 for
    two fits of the same sets): precision above a cut is not monotone in the cut, so the lowest
    passing cut can move far on one query.
    Both are counted over the queries in real candidates' words (`real`: public notes and threads)
    when at least MIN_REAL of them are answerable: the team's own wordings reach higher relevances
    and set both cuts wrong for real ones (out of fold on the train split, 17% of the real
    answerable queries were told none with cuts counted over all queries, 3% of the team's)."""
    if real is not None and (has_match & real).sum() >= MIN_REAL:
        top, has_match, top_correct = top[real], has_match[real], top_correct[real]
    matched = top[has_match]
    weak_at = float(np.quantile(matched, 1.0 - ANSWERABLE_KEPT)) if matched.size else 0.5
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    n = len(top)
    cuts = [
        _strong_cut(top[idx], top_correct[idx])
        for idx in (rng.integers(0, n, n) for _ in range(BOOTSTRAP_ROUNDS))
    ]
    strong_at = float(np.median(cuts)) if n else 1.0
    return max(strong_at, weak_at), weak_at


def _rounded_auc(top: np.ndarray, has_match: np.ndarray) -> float | None:
    area = auc(list(top[has_match]), list(top[~has_match]))
    return None if area is None else round(area, 4)


def _share(flags: np.ndarray) -> float | None:
    return round(float(flags.mean()), 4) if flags.size else None


def _logits_of(
    weights: tuple[np.ndarray, float, np.ndarray, np.ndarray], x: np.ndarray
) -> np.ndarray:
    w, b, m, s = weights
    return RankerModel(w, b, m, s, strong_at=1.0, weak_at=0.0, meta={}).logits(x)


def relevance_of(
    weights: tuple[np.ndarray, float, np.ndarray, np.ndarray], x: np.ndarray
) -> np.ndarray:
    return sigmoid(_logits_of(weights, x))


def out_of_fold_logits(
    x: np.ndarray, y: np.ndarray, groups: np.ndarray, listwise_weight: float = LISTWISE_WEIGHT
) -> np.ndarray:
    """Each training row's ranker logit from a model fitted without its query (5 folds, grouped
    by query)."""
    oof = np.zeros(len(y))
    for fit_idx, held_idx in GroupKFold(n_splits=5).split(x, y, groups):
        weights = _ranker_weights(x[fit_idx], y[fit_idx], groups[fit_idx], listwise_weight)
        oof[held_idx] = _logits_of(weights, x[held_idx])
    return oof


def out_of_fold(
    x: np.ndarray, y: np.ndarray, groups: np.ndarray, listwise_weight: float = LISTWISE_WEIGHT
) -> np.ndarray:
    """Each training row's ranker relevance from a model fitted without its query."""
    return sigmoid(out_of_fold_logits(x, y, groups, listwise_weight))


def query_rows(logits: np.ndarray, x: np.ndarray, groups: np.ndarray) -> list[dict[str, float]]:
    """The verdict's features of each query (groups 0..n-1) from its rows' ranker logits."""
    count = int(groups.max()) + 1 if len(groups) else 0
    return [
        query_features(logits[mine], x[mine])
        for mine in (np.flatnonzero(groups == g) for g in range(count))
    ]


def _logistic_part(
    names: tuple[str, ...], rows: list[dict[str, float]], target: np.ndarray
) -> LogisticPart:
    x = np.asarray([[r[n] for n in names] for r in rows], dtype=float).reshape(len(rows), -1)
    mean, scale = _standardise(x)
    if len(set(target.tolist())) < 2:  # one class only (tiny sets): a constant rate
        rate = min(max(float(target.mean()) if target.size else 0.5, 0.01), 0.99)
        bias = float(np.log(rate / (1 - rate)))
        return LogisticPart(names, np.zeros(len(names)), bias, mean, scale)
    model = LogisticRegression(C=VERDICT_C, max_iter=5000).fit((x - mean) / scale, target)
    return LogisticPart(names, model.coef_[0], float(model.intercept_[0]), mean, scale)


def fit_verdict(
    rows: list[dict[str, float]], has_match: np.ndarray, top_correct: np.ndarray
) -> Verdict:
    """P(answerable) over every query; P(top right) over the answerable ones."""
    answerable = [r for r, h in zip(rows, has_match, strict=True) if h]
    return Verdict(
        _logistic_part(ANSWERABLE_FEATURES, rows, has_match.astype(int)),
        _logistic_part(TOP_RIGHT_FEATURES, answerable, top_correct[has_match].astype(int)),
    )


def verdict_out_of_fold(
    rows: list[dict[str, float]], has_match: np.ndarray, top_correct: np.ndarray
) -> np.ndarray | None:
    """Each query's top relevance from a verdict fitted without it; None when the sets are too
    small to split (fewer than two queries of a kind)."""
    folds = min(VERDICT_FOLDS, int(has_match.sum()), int((~has_match).sum()))
    if folds < 2:
        return None
    top = np.zeros(len(rows))
    split = StratifiedKFold(n_splits=folds, shuffle=True, random_state=VERDICT_SEED)
    for fit_idx, held_idx in split.split(np.zeros(len(rows)), has_match):
        verdict = fit_verdict([rows[i] for i in fit_idx], has_match[fit_idx], top_correct[fit_idx])
        top[held_idx] = [verdict.top_relevance(rows[i]) for i in held_idx]
    return top


def served_relevance(logits: np.ndarray, groups: np.ndarray, top: np.ndarray) -> np.ndarray:
    """Per row, the relevance search serves: the ranker's logits shifted so that each query's
    best equals its verdict's top relevance."""
    out = np.zeros(len(logits))
    for g, value in enumerate(top):
        mine = np.flatnonzero(groups == g)
        out[mine] = shifted(logits[mine], float(value))
    return out


@dataclass
class QueryOutcomes:
    """Per query, from a relevance for every candidate row: the top relevance, whether the query
    is answerable and whether its top hit is right; and per answerable query, hit@1, hit@5 and
    reciprocal rank within 10."""

    top: np.ndarray
    has_match: np.ndarray
    top_correct: np.ndarray
    at1: np.ndarray
    in5: np.ndarray
    rr: np.ndarray


def query_outcomes(
    cases: list[RetrievalCase], y: np.ndarray, groups: np.ndarray, relevance: np.ndarray
) -> QueryOutcomes:
    top, has_match, top_correct, in5, at1, rr = [], [], [], [], [], []
    for g, case in enumerate(cases):
        rows = np.flatnonzero(groups == g)
        order = rows[np.argsort(-relevance[rows], kind="stable")]
        top.append(relevance[order[0]])
        has_match.append(not case.no_match)
        top_correct.append(bool(y[order[0]]))
        if not case.no_match:
            in5.append(bool(y[order[:5]].any()))
            at1.append(bool(y[order[0]]))
            hits = np.flatnonzero(y[order[:10]])
            rr.append(1.0 / (hits[0] + 1) if hits.size else 0.0)
    return QueryOutcomes(
        np.asarray(top),
        np.asarray(has_match, dtype=bool),
        np.asarray(top_correct, dtype=bool),
        np.asarray(at1, dtype=bool),
        np.asarray(in5, dtype=bool),
        np.asarray(rr, dtype=float),
    )


def fit(searcher: QuestionSearcher, bank: QuestionBank, cases: list[RetrievalCase]) -> FitReport:
    train = [c for c in cases if c.split == "train"]
    x, y, groups = _rows(searcher, bank, train)
    logits = out_of_fold_logits(x, y, groups)
    real = np.asarray([case.origin == "notes" for case in train], dtype=bool)
    alone = query_outcomes(train, y, groups, sigmoid(logits))  # the ranker's own top relevance
    rows = query_rows(logits, x, groups)
    verdict_top = verdict_out_of_fold(rows, alone.has_match, alone.top_correct)
    oof = sigmoid(logits) if verdict_top is None else served_relevance(logits, groups, verdict_top)
    q = query_outcomes(train, y, groups, oof)
    top_a, has_a, correct_a, at1, in5, rr = q.top, q.has_match, q.top_correct, q.at1, q.in5, q.rr
    strong_at, weak_at = _thresholds(top_a, has_a, correct_a, real)
    cv_auc = auc(list(top_a[has_a]), list(top_a[~has_a]))
    real_answerable = real[has_a]  # aligned with in5 / at1 / rr

    w, b, m, s = _ranker_weights(x, y, groups)
    meta = {
        "fitted": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "train_queries": len(train),
        "train_no_match_queries": int((~has_a).sum()),
        "rows": len(y),
        "cv_no_match_auc": None if cv_auc is None else round(cv_auc, 4),
        # the same with the ranker's own top relevance (no verdict), for comparison
        "cv_ranker_alone_no_match_auc": _rounded_auc(alone.top, alone.has_match),
        "cv_ranker_alone_real_no_match_auc": _rounded_auc(alone.top[real], alone.has_match[real]),
        "cv_real_no_match_auc": _rounded_auc(top_a[real], has_a[real]),
        "cv_recall_at_1": round(float(np.mean(at1)), 4) if at1.size else None,
        "cv_recall_at_5": round(float(np.mean(in5)), 4) if in5.size else None,
        "cv_answerable_said_none": round(float((top_a[has_a] < weak_at).mean()), 4)
        if has_a.any()
        else None,
        "cv_no_match_said_none": round(float((top_a[~has_a] < weak_at).mean()), 4)
        if (~has_a).any()
        else None,
        # the same on the queries in real candidates' words (public notes and threads)
        "real_queries": int(real.sum()),
        "cv_real_recall_at_1": _share(at1[real_answerable]),
        "cv_real_recall_at_5": _share(in5[real_answerable]),
        "cv_real_mrr_at_10": _share(rr[real_answerable]),
        "cv_real_answerable_said_none": _share(top_a[has_a & real] < weak_at),
        "cv_real_no_match_said_none": _share(top_a[~has_a & real] < weak_at),
        "cv_real_strong_precision": _share(correct_a[real & (top_a >= strong_at)]),
        "cv_strong_precision": _share(correct_a[top_a >= strong_at]),
    }
    verdict = None if verdict_top is None else fit_verdict(rows, alone.has_match, alone.top_correct)
    meta["verdict"] = verdict is not None
    model = RankerModel(w, b, m, s, strong_at, weak_at, meta, verdict)
    return FitReport(model, len(train), len(y), cv_auc, float(np.mean(in5)) if in5.size else 0.0)


__all__ = ["FEATURES", "FitReport", "fit"]
