"""Search v3's verdict: the per-query stage that sets the top result's relevance (P(the bank
answers the query) × P(the top candidate is the answer)) while the ranker keeps the order. Pure
functions on synthetic rows, the shipped ranker.json, and the real searcher."""

from __future__ import annotations

import numpy as np
import pytest

from server.evaluation.fit_ranker import (
    fit_verdict,
    query_rows,
    served_relevance,
    verdict_out_of_fold,
)
from server.evaluation.retrieval import auc
from server.retrieval.ranker import (
    ANSWERABLE_FEATURES,
    FEATURES,
    MODEL_PATH,
    TOP_RIGHT_FEATURES,
    RankerModel,
    query_features,
    shifted,
)


def test_shifting_keeps_the_order_and_sets_the_top_exactly():
    logits = np.asarray([0.3, 2.5, -1.0, 2.4])
    out = shifted(logits, 0.2)
    assert list(np.argsort(-out)) == list(np.argsort(-logits))
    assert out.max() == pytest.approx(0.2)
    assert ((out > 0) & (out < 1)).all()
    assert shifted(logits, 1.0).max() < 1.0 and shifted(logits, 0.0).max() > 0.0  # clipped


def test_query_features_read_the_logits_and_the_top_rows_query_level_features():
    features = np.zeros((3, len(FEATURES)))
    features[1, FEATURES.index("unknown_share")] = 0.4  # the top candidate's row
    features[0, FEATURES.index("unknown_share")] = 0.9
    values = query_features(np.asarray([1.0, 3.0, 2.0]), features)
    assert values["top_logit"] == 3.0
    assert values["top_gap"] == pytest.approx(1.0)
    assert values["logsumexp10"] == pytest.approx(np.log(np.exp([1.0, 3.0, 2.0]).sum()))
    assert values["unknown_share"] == pytest.approx(0.4)
    assert set(ANSWERABLE_FEATURES) | set(TOP_RIGHT_FEATURES) <= values.keys()
    single = query_features(np.asarray([0.5]), features[:1])
    assert single["top_gap"] > 0  # no runner-up: the top leads clearly


def _synthetic(n: int, seed: int):
    """Queries whose ranker logits tell answerable from no-match only partly, plus a query-level
    feature (the share of unknown words) that tells them apart too."""
    rng = np.random.default_rng(seed)
    has = rng.random(n) < 0.75
    logits, x, groups, y = [], [], [], []
    for g in range(n):
        k = 12
        z = rng.normal(-3, 1, k)
        row = np.zeros((k, len(FEATURES)))
        row[:, FEATURES.index("unknown_share")] = rng.random() * (0.3 if has[g] else 1.0) + (
            0 if has[g] else 0.2
        )
        label = np.zeros(k, dtype=int)
        if has[g]:
            z[0] += rng.normal(3.0, 1.5)
            label[0] = 1
        logits.append(z)
        x.append(row)
        y.append(label)
        groups.append(np.full(k, g))
    return np.concatenate(logits), np.vstack(x), np.concatenate(y), np.concatenate(groups), has


def test_the_verdict_separates_better_than_the_top_logit_alone_out_of_fold():
    logits, x, y, groups, has = _synthetic(400, seed=3)
    rows = query_rows(logits, x, groups)
    top_logit = np.asarray([r["top_logit"] for r in rows])
    correct = np.asarray(
        [bool(y[groups == g][np.argmax(logits[groups == g])]) for g in range(len(has))]
    )
    top = verdict_out_of_fold(rows, has, correct)
    assert top is not None and ((top > 0) & (top < 1)).all()
    alone = auc(list(top_logit[has]), list(top_logit[~has]))
    with_verdict = auc(list(top[has]), list(top[~has]))
    assert with_verdict > alone + 0.02
    # served relevances: each query's best equals its verdict value, and the order is the ranker's
    served = served_relevance(logits, groups, top)
    for g in (0, 1, 2):
        mine = groups == g
        assert served[mine].max() == pytest.approx(top[g])
        assert np.argmax(served[mine]) == np.argmax(logits[mine])


def test_too_few_queries_of_a_kind_fit_no_verdict_and_one_class_fits_a_constant():
    logits, x, _, groups, has = _synthetic(30, seed=5)
    rows = query_rows(logits, x, groups)
    only_answerable = np.ones(len(rows), dtype=bool)
    assert verdict_out_of_fold(rows, only_answerable, only_answerable) is None
    verdict = fit_verdict(rows, has, has.copy())  # every answerable top is right: one class
    assert not verdict.top_right.weights.any()
    answerable = 1 / (1 + np.exp(-verdict.answerable.logit(rows[0])))
    assert verdict.top_relevance(rows[0]) == pytest.approx(answerable * 0.99)  # the rate, clipped


def test_the_shipped_ranker_has_a_verdict_that_beat_the_ranker_alone_out_of_fold(tmp_path):
    model = RankerModel.load(MODEL_PATH)
    assert model.verdict is not None
    assert model.verdict.answerable.names == ANSWERABLE_FEATURES
    assert model.verdict.top_right.names == TOP_RIGHT_FEATURES
    meta = model.meta
    assert meta["verdict"] is True
    assert meta["cv_no_match_auc"] > meta["cv_ranker_alone_no_match_auc"]
    assert meta["cv_real_no_match_auc"] > meta["cv_ranker_alone_real_no_match_auc"]
    # the JSON round trip keeps it
    path = tmp_path / "ranker.json"
    model.save(path)
    again = RankerModel.load(path)
    values = dict.fromkeys(ANSWERABLE_FEATURES + TOP_RIGHT_FEATURES, 0.5)
    assert again.verdict.top_relevance(values) == pytest.approx(
        model.verdict.top_relevance(values), abs=1e-5
    )


def test_served_search_keeps_the_rankers_order_and_takes_the_top_from_the_verdict(services):
    searcher = services.searcher
    model = searcher.ranker
    for query in ("GRPO 为什么不需要 critic", "LayerNorm 和 BatchNorm 的区别", "what is GAE"):
        ids, _, features, _ = searcher.candidates(query)
        logits = model.logits(features)
        served = model.query_relevance(features)
        assert list(np.argsort(-served, kind="stable")[:5]) == list(
            np.argsort(-logits, kind="stable")[:5]
        )
        expected = model.verdict.top_relevance(query_features(logits, features))
        assert served.max() == pytest.approx(expected)
        outcome = searcher.find(query, k=3)
        assert outcome.hits[0].entry.id == ids[int(np.argmax(logits))]
        assert outcome.hits[0].relevance == pytest.approx(expected, abs=1e-4)
