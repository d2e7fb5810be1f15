"""Search's learned ranker: per (query, entry) features -> calibrated relevance in [0, 1].

Two stages. The ranker, a logistic regression over per-candidate features (dense cosine with and
without glossary expansion, BM25 over each entry's parts, glossary concept overlap, ...), orders a
query's candidates. The verdict, two small logistic regressions over one row per *query* (the
ranker's top logit and its lead over the runner-up, the query's unknown-word share, ...), says how
likely the bank answers the query at all and, if it does, how likely the top candidate is the
answer; their product is the top result's `relevance`, and every other result keeps its logit gap
to the top (so the order is the ranker's). The query's `match` comes from the top relevance and
two thresholds. Weights and thresholds live in `ranker.json` next to this file and are refitted by
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


# The verdict's per-query features: the ranker's logits over the query's candidates, and features
# that are the same for every candidate of a query (read off its top candidate's row). Fitted one
# row per query, each query weighs the same; in the ranker they are lost among ~75 rows per query.
ANSWERABLE_FEATURES = (
    "top_logit",  # the ranker's best logit
    "logsumexp10",  # log of the summed exp of the 10 best logits: several good candidates
    "unknown_share",
    "concepts_missing_share",
    "top_dense",
    "no_concepts",
    "concept_missing",
    "zh_query",
)
TOP_RIGHT_FEATURES = (
    "top_logit",
    "top_gap",  # the best logit minus the runner-up's: how clearly the top candidate leads
)
_LOGIT_CLIP = 30.0
_NO_RUNNER_UP_GAP = 10.0


def sigmoid(z: np.ndarray | float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -_LOGIT_CLIP, _LOGIT_CLIP)))


def query_features(logits: np.ndarray, features: np.ndarray) -> dict[str, float]:
    """One query's verdict features from its candidates' ranker logits and feature rows."""
    order = np.argsort(-logits, kind="stable")
    best = logits[order[:10]]
    top = float(best[0])
    row = features[order[0]]
    named = {name: float(row[FEATURES.index(name)]) for name in ANSWERABLE_FEATURES[2:]}
    return {
        "top_logit": top,
        "top_gap": float(top - best[1]) if len(best) > 1 else _NO_RUNNER_UP_GAP,
        "logsumexp10": top + float(np.log(np.exp(best - top).sum())),
        **named,
    }


@dataclass(frozen=True)
class LogisticPart:
    """A logistic regression over named, standardised features."""

    names: tuple[str, ...]
    weights: np.ndarray
    bias: float
    mean: np.ndarray
    scale: np.ndarray

    def logit(self, values: dict[str, float]) -> float:
        x = np.asarray([values[n] for n in self.names], dtype=float)
        return float(((x - self.mean) / self.scale) @ self.weights + self.bias)

    def to_json(self) -> dict:
        return {
            "features": list(self.names),
            "weights": [round(float(w), 6) for w in self.weights],
            "bias": round(float(self.bias), 6),
            "mean": [round(float(m), 6) for m in self.mean],
            "scale": [round(float(s), 6) for s in self.scale],
        }

    @classmethod
    def from_json(cls, data: dict) -> LogisticPart:
        return cls(
            tuple(data["features"]),
            np.asarray(data["weights"], dtype=float),
            float(data["bias"]),
            np.asarray(data["mean"], dtype=float),
            np.asarray(data["scale"], dtype=float),
        )


@dataclass(frozen=True)
class Verdict:
    """P(the bank answers the query) × P(the top candidate is the answer | it does)."""

    answerable: LogisticPart
    top_right: LogisticPart

    def top_relevance(self, values: dict[str, float]) -> float:
        return float(sigmoid(self.answerable.logit(values)) * sigmoid(self.top_right.logit(values)))

    def to_json(self) -> dict:
        return {"answerable": self.answerable.to_json(), "top_right": self.top_right.to_json()}

    @classmethod
    def from_json(cls, data: dict) -> Verdict:
        return cls(
            LogisticPart.from_json(data["answerable"]), LogisticPart.from_json(data["top_right"])
        )


def shifted(logits: np.ndarray, top_relevance: float) -> np.ndarray:
    """Relevances whose best equals `top_relevance`, each candidate keeping its logit gap to the
    best (so the ranker's order stands)."""
    top = min(max(top_relevance, 1e-9), 1 - 1e-9)
    return sigmoid(logits - logits.max() + math.log(top / (1 - top)))


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
    verdict: Verdict | None = None  # None: the top relevance is the ranker's own (v2, first fits)

    def logits(self, features: np.ndarray) -> np.ndarray:
        return ((features - self.mean) / self.scale) @ self.weights + self.bias

    def relevance(self, features: np.ndarray) -> np.ndarray:
        """The ranker's own probability per candidate row (rows of any number of queries)."""
        return sigmoid(self.logits(features))

    def query_relevance(self, features: np.ndarray) -> np.ndarray:
        """The relevance served for ONE query's candidate rows: the ranker's, with the top one set
        by the verdict when the model has one."""
        logits = self.logits(features)
        if self.verdict is None or not len(logits):
            return sigmoid(logits)
        top = self.verdict.top_relevance(query_features(logits, features))
        return shifted(logits, top)

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
            **({"verdict": self.verdict.to_json()} if self.verdict is not None else {}),
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
            verdict=Verdict.from_json(data["verdict"]) if data.get("verdict") else None,
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
