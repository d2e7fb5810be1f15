"""Search's learned ranker: per (query, entry) features -> calibrated relevance in [0, 1].

A logistic regression over a handful of features (dense cosine with and without glossary expansion,
BM25 over each entry's parts, glossary concept overlap, ...). Its probability is both the ranking
score and the `relevance` shown to users; the query's `match` comes from the top relevance and two
thresholds. Weights and thresholds live in `ranker.json` next to this file and are refitted by
`sparring eval fit-ranker` (server/evaluation/fit_ranker.py) on the training split only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import numpy as np

MODEL_PATH = Path(__file__).with_name("ranker.json")  # v3, the served pipeline
MODEL_PATH_V2 = Path(__file__).with_name("ranker_v2.json")  # v2, kept for comparison

FEATURES_V2 = (
    "dense",  # best cosine between the query and any of the entry's documents (parts included)
    "dense_expanded",  # the same for the query with glossary names appended
    "dense_gap",  # dense_expanded minus the best dense_expanded of any entry (0 for the top one)
    "bm25_part",  # best BM25 over the entry's parts / the query's best such score
    "bm25_coverage",  # idf share of the query's own tokens found in the entry's best part
    "bm25_lexical",  # BM25 of the whole entry incl. rubric vocabulary / the query's best
    "concept_overlap",  # share of the query's specific glossary concepts in the entry's best part
    "concept_overlap_entry",  # the same over the whole entry incl. its rubric vocabulary
    "concept_missing",  # the query names a glossary concept that no bank entry names (0/1)
    "no_concepts",  # the query names no specific glossary concept (0/1)
    "dense_rank",  # 1 / rank by dense_expanded
    "bm25_rank",  # 1 / rank by bm25_part
    "breadth",  # log(1 + number of parts): breadth alone should not win
)
# v3 adds what tells a question from a neighbouring field apart from an RL one: the query's words
# the bank never uses, and its specific concepts no entry (or not this entry) names.
FEATURES_ALL = (
    *FEATURES_V2,
    "unknown_share",  # share of the query's content tokens that occur nowhere in the bank
    "coverage_strict",  # bm25_coverage with unknown tokens weighted like the rarest known token
    "concepts_missing_share",  # share of the query's specific concepts that no bank entry names
    "concepts_uncovered",  # number of the query's specific concepts this entry does not name
    "top_dense",  # the best dense_expanded of any entry: how close the bank gets at all
    "concept_focus",  # best share, over the entry's parts, of a part's specific concepts the query
    # names: a short question about exactly the query's concepts beats one that names them among
    # others (DDPG's actor and critic updates for "what is the critic for")
    # English and Chinese queries reach different cosines with the same encoder (the bank is mostly
    # Chinese): the language, and dense_expanded for Chinese queries, let one model fit both.
    "zh_query",  # the query has Chinese characters (0/1)
    "dense_expanded_zh",  # dense_expanded × zh_query
    "coverage_rest",  # idf share of the query's words outside its glossary terms (what it asks
    # about the concepts: 作用, 为什么, 怎么训练) found in the entry's best part
    "probe_dense",  # best cosine between the query and the follow-up question of one of the
    # entry's rubric key points: asked the way candidates ask about one point
    "probe_count",  # log(1 + number of those follow-up questions): the best of many is higher by
    # chance alone, so an entry with many key points should not win on probe_dense alone
    "phrasing_dense",  # best cosine between the query and one of the entry's search phrasings
    # (the question as candidates word it: terse, colloquial, mixed zh/en)
    "phrasing_bm25",  # BM25 of the entry's best search phrasing / the query's best such score
)
# v3 leaves out v2's rank features: 1/rank jumps between ranks 1 and 2 on a cosine difference of
# 0.01, which made the relevance of a clear answer depend on which near-tie came first (without
# them the out-of-fold fit on the train split is better on every measure; docs/search.md).
RANK_FEATURES = ("dense_rank", "bm25_rank")
FEATURES = tuple(f for f in FEATURES_ALL if f not in RANK_FEATURES)


class Match(StrEnum):
    strong = "strong"
    weak = "weak"
    none = "none"


@dataclass(frozen=True)
class RankerModel:
    weights: np.ndarray
    bias: float
    mean: np.ndarray
    scale: np.ndarray
    strong_at: float  # top relevance at or above this: "strong"
    weak_at: float  # at or above this (and below strong_at): "weak"; below: "none"
    meta: dict

    def relevance(self, features: np.ndarray) -> np.ndarray:
        z = ((features - self.mean) / self.scale) @ self.weights + self.bias
        return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))

    def match(self, top_relevance: float | None) -> Match:
        if top_relevance is None or top_relevance < self.weak_at:
            return Match.none
        return Match.strong if top_relevance >= self.strong_at else Match.weak

    def to_json(self) -> dict:
        return {
            "features": list(FEATURES if len(self.weights) == len(FEATURES) else FEATURES_V2),
            "weights": [round(float(w), 6) for w in self.weights],
            "bias": round(self.bias, 6),
            "mean": [round(float(m), 6) for m in self.mean],
            "scale": [round(float(s), 6) for s in self.scale],
            "strong_at": round(self.strong_at, 4),
            "weak_at": round(self.weak_at, 4),
            "meta": self.meta,
        }

    def save(self, path: Path = MODEL_PATH) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: Path = MODEL_PATH, features: tuple[str, ...] = FEATURES) -> RankerModel:
        data = json.loads(path.read_text())
        if tuple(data["features"]) != features:
            raise ValueError(
                f"{path.name} was fitted on other features; refit: sparring eval fit-ranker"
            )
        return cls(
            weights=np.asarray(data["weights"], dtype=float),
            bias=float(data["bias"]),
            mean=np.asarray(data["mean"], dtype=float),
            scale=np.asarray(data["scale"], dtype=float),
            strong_at=float(data["strong_at"]),
            weak_at=float(data["weak_at"]),
            meta=dict(data.get("meta") or {}),
        )

    @classmethod
    def untrained(cls, features: tuple[str, ...] = FEATURES) -> RankerModel:
        """Hand weights used only to produce the first training features (never served)."""
        w = np.zeros(len(features))
        w[features.index("dense_expanded")] = 3.0
        w[features.index("bm25_part")] = 1.0
        return cls(w, 0.0, np.zeros(len(features)), np.ones(len(features)), 0.9, 0.5, {})


def breadth(parts: int) -> float:
    return math.log1p(parts)
