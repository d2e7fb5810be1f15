"""Hybrid question search: BM25 over jieba/Latin tokens plus dense Chroma, fused by reciprocal rank."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np
from rank_bm25 import BM25Okapi
from scipy.sparse import csc_matrix

from server.corpus.bank import QuestionBank
from server.corpus.schema import QuestionEntry
from server.retrieval.documents import SearchDocument, lexical_text
from server.retrieval.tokenize import tokenize
from server.retrieval.vector_store import VectorStore

# How many documents each retriever contributes before fusion.
CANDIDATES = 80
# Reciprocal-rank-fusion weights: dense retrieval is the stronger signal on paraphrases.
DENSE_WEIGHT = 1.0
BM25_WEIGHT = 0.7


class _Bm25Matrix:
    """Okapi BM25 (rank-bm25's scoring) precomputed as a sparse doc × term weight matrix, so a
    query costs one column sum instead of a Python loop over every document."""

    def __init__(self, corpus: list[list[str]]) -> None:
        bm25 = BM25Okapi(corpus)
        self._vocab = {term: i for i, term in enumerate(bm25.idf)}
        rows, cols, vals = [], [], []
        for d, freqs in enumerate(bm25.doc_freqs):
            norm = bm25.k1 * (1 - bm25.b + bm25.b * bm25.doc_len[d] / bm25.avgdl)
            for term, tf in freqs.items():
                rows.append(d)
                cols.append(self._vocab[term])
                vals.append(bm25.idf[term] * tf * (bm25.k1 + 1) / (tf + norm))
        self._matrix = csc_matrix((vals, (rows, cols)), shape=(len(corpus), len(self._vocab)))

    def scores(self, tokens: list[str]) -> np.ndarray:
        ids = [self._vocab[t] for t in tokens if t in self._vocab]
        if not ids:
            return np.zeros(self._matrix.shape[0])
        return np.asarray(self._matrix[:, ids].sum(axis=1)).ravel()


class SearchMode(StrEnum):
    hybrid = "hybrid"
    bm25 = "bm25"
    dense = "dense"


@dataclass(frozen=True)
class SearchFilters:
    topic: str | None = None
    company: str | None = None
    type: str | None = None
    area: str | None = None

    def accepts(self, e: QuestionEntry) -> bool:
        if self.topic and self.topic.lower() not in (e.topic.lower(), e.area.value):
            return False
        if self.company and not any(self.company in c for c in e.companies):
            return False
        if self.type and e.type.value != self.type:
            return False
        return not (self.area and e.area.value != self.area)


@dataclass(frozen=True)
class SearchHit:
    entry: QuestionEntry
    subquestion_id: str  # the sub-question that matched best, "" for the entry itself
    score: float


class QuestionSearcher:
    def __init__(
        self,
        bank: QuestionBank,
        docs: list[SearchDocument],
        store: VectorStore,
        rrf_k: int = 60,
    ) -> None:
        self._bank = bank
        self._docs = docs
        self._by_id = {d.doc_id: d for d in docs}
        self._store = store
        self._rrf_k = rrf_k
        # BM25 also sees each entry's full text and rubric vocabulary (no embedding cost).
        self._lexical = docs + [
            SearchDocument(f"{e.id}#lex", e.id, "", lexical_text(e)) for e in bank
        ]
        self._by_id.update({d.doc_id: d for d in self._lexical})
        self._bm25 = _Bm25Matrix([list(tokenize(d.text)) or ["∅"] for d in self._lexical])

    def _bm25_ranking(self, query: str) -> list[tuple[str, float]]:
        tokens = list(tokenize(query))
        if not tokens:
            return []
        scores = self._bm25.scores(tokens)
        order = np.argsort(-scores, kind="stable")[:CANDIDATES]
        return [(self._lexical[i].doc_id, float(scores[i])) for i in order if scores[i] > 0]

    def _entry_ranking(self, doc_ranking: list[tuple[str, float]]) -> list[tuple[str, str, float]]:
        """Collapse documents to entries, keeping each entry's best document."""
        seen: dict[str, tuple[str, float]] = {}
        order: list[str] = []
        for doc_id, score in doc_ranking:
            doc = self._by_id.get(doc_id)
            if doc is None or doc.entry_id in seen:
                continue
            seen[doc.entry_id] = (doc.subquestion_id, score)
            order.append(doc.entry_id)
        return [(eid, seen[eid][0], seen[eid][1]) for eid in order]

    def search(
        self,
        query: str,
        k: int = 5,
        filters: SearchFilters | None = None,
        mode: SearchMode = SearchMode.hybrid,
    ) -> list[SearchHit]:
        filters = filters or SearchFilters()
        rankings: list[list[tuple[str, str, float]]] = []
        if mode in (SearchMode.hybrid, SearchMode.bm25):
            rankings.append(self._entry_ranking(self._bm25_ranking(query)))
        if mode in (SearchMode.hybrid, SearchMode.dense):
            rankings.append(self._entry_ranking(self._store.query(query, CANDIDATES)))
        if mode != SearchMode.hybrid:
            fused = [(eid, sub, score) for eid, sub, score in rankings[0]]
        else:
            fused = self._fuse(rankings)
        hits = []
        for entry_id, sub_id, score in fused:
            entry = self._bank.get(entry_id)
            if entry is not None and filters.accepts(entry):
                hits.append(SearchHit(entry, sub_id, round(score, 6)))
            if len(hits) >= k:
                break
        return hits

    def _fuse(self, rankings: list[list[tuple[str, str, float]]]) -> list[tuple[str, str, float]]:
        """rankings = [bm25, dense]; weighted reciprocal rank fusion."""
        scores: dict[str, float] = {}
        best_sub: dict[str, tuple[int, str]] = {}
        for ranking, weight in zip(rankings, (BM25_WEIGHT, DENSE_WEIGHT), strict=False):
            for rank, (entry_id, sub_id, _) in enumerate(ranking, start=1):
                scores[entry_id] = scores.get(entry_id, 0.0) + weight / (self._rrf_k + rank)
                if entry_id not in best_sub or rank < best_sub[entry_id][0]:
                    best_sub[entry_id] = (rank, sub_id)
        order = sorted(scores, key=lambda eid: -scores[eid])
        return [(eid, best_sub[eid][1], scores[eid]) for eid in order]
