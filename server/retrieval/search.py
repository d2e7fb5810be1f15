"""Question search.

`v3` (the default): glossary query expansion on both sides with the bank's own words for each
concept (a Latin term in a Chinese question reaches the Chinese entries), entries scored by their
best-matching part, a learned ranker giving each result a calibrated `relevance` and the query a
`match` (server/retrieval/ranker.py), with features that recognise questions from neighbouring
fields. `v2` (the previous ranker, frozen in ranker_v2.json), `bm25`, `dense` and `hybrid`
(reciprocal-rank fusion, the v1 search) stay for comparison in `sparring eval retrieval`.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

import numpy as np
from rank_bm25 import BM25Okapi
from scipy.sparse import csc_matrix

from server.corpus.bank import QuestionBank
from server.corpus.schema import QuestionEntry
from server.retrieval.documents import (
    SearchDocument,
    build_phrasing_documents,
    build_probe_documents,
    headline,
    is_phrasing,
    lexical_text,
)
from server.retrieval.glossary import Glossary
from server.retrieval.ranker import (
    FEATURES,
    FEATURES_ALL,
    FEATURES_V2,
    MODEL_PATH_V2,
    Match,
    RankerModel,
    breadth,
)
from server.retrieval.tokenize import normalise, tokenize

if TYPE_CHECKING:  # chromadb loads with the store, when a search first needs it
    from server.retrieval.vector_store import VectorStore

# How many documents each retriever contributes before fusion.
CANDIDATES = 80
# Reciprocal-rank-fusion weights: dense retrieval is the stronger signal on paraphrases.
DENSE_WEIGHT = 1.0
BM25_WEIGHT = 0.7
# v2: entries the ranker scores (the best by dense and the best by BM25), and the BM25 weight of tokens that come from glossary expansion rather than from the query itself.
V2_CANDIDATES = 40
# v3 also ranks the entries whose search phrasings come closest (by cosine, and by BM25): a
# colloquial query can be far from an entry's question text and close to how candidates word it.
PHRASING_CANDIDATES = 20
EXPANSION_WEIGHT = 0.8
# How far a query's vector moves towards the mean embedding of the glossary concepts it names.
CONCEPT_PULL = 0.5
# v3: how many of the bank's own forms of a concept a query is expanded with (besides its
# canonical names), and the least length of a content token (CJK) counted as a word.
BANK_FORMS = 2


V3_SUFFIX = "@v3"
_CJK = re.compile(r"[\u3400-\u9fff]")


def _units(e: QuestionEntry) -> list[tuple[str, str]]:
    """(sub-question id or "", text) of each part an entry is scored by: its headline (the whole
    question when it has no parts) and each sub-question."""
    if e.subquestions:
        head = f"{e.topic} {headline(e.text, 120)} {headline(e.text_en, 300)}"
    else:
        head = f"{e.topic} {e.text} {e.text_en}"
    return [("", head)] + [(sq.id, f"{e.topic} {sq.text} {sq.text_en}") for sq in e.subquestions]


def bank_forms(glossary: Glossary, texts: list[str]) -> dict[str, list[str]]:
    """Concept id -> the forms the bank's questions use for it, most used first."""
    counts: dict[str, Counter] = {}
    for text in texts:
        for cid, forms in glossary.find(text).items():
            counts.setdefault(cid, Counter()).update(forms)
    return {c: [f for f, _ in n.most_common()] for c, n in counts.items()}


def concept_names(glossary: Glossary, forms: dict[str, list[str]] | QuestionBank) -> dict[str, str]:
    """The texts embedded as concept query vectors (at ingest): each concept's canonical name
    (v2) and, under "<id>@v3", that name with the bank's own most used words for it."""
    if isinstance(forms, QuestionBank):
        forms = bank_forms(glossary, [text for e in forms for _, text in _units(e)])
    named = {}
    for c, concept in glossary.concepts.items():
        named[c] = concept.canonical
        extra = forms.get(c, [])[:BANK_FORMS]
        named[c + V3_SUFFIX] = " / ".join(dict.fromkeys([concept.canonical, *extra]))
    return named


class _EntryVectors:
    """Stored vectors grouped by entry (an entry's rows contiguous): each entry's best cosine with
    a query in one matrix product."""

    def __init__(self, matrix: np.ndarray, rows: list[tuple[int, int]], entries: int) -> None:
        rows = sorted(rows)  # (entry position, row of `matrix`)
        self.size = len(rows)
        self._matrix = matrix[[r for _, r in rows]].reshape(len(rows), -1)
        entry_of = np.asarray([e for e, _ in rows], dtype=int)
        self._entries, self._starts, counts = np.unique(
            entry_of, return_index=True, return_counts=True
        )
        self.counts = np.zeros(entries, dtype=int)  # how many vectors each entry has
        self.counts[self._entries] = counts

    def best(self, vector: np.ndarray) -> np.ndarray:
        """Each entry's best cosine with `vector` (0 for an entry without vectors)."""
        best = np.zeros(len(self.counts))
        if self.size:
            cos = self._matrix @ np.asarray(vector, dtype=np.float32)
            best[self._entries] = np.maximum.reduceat(cos, self._starts)
        return best


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
        self._max_weight = self._matrix.max(axis=0).toarray().ravel()

    def scores(self, tokens: list[str], weights: list[float] | None = None) -> np.ndarray:
        pairs = [
            (self._vocab[t], 1.0 if weights is None else weights[i])
            for i, t in enumerate(tokens)
            if t in self._vocab
        ]
        if not pairs:
            return np.zeros(self._matrix.shape[0])
        ids = [p[0] for p in pairs]
        w = np.asarray([p[1] for p in pairs])
        return np.asarray(self._matrix[:, ids] @ w).ravel()

    def idf(self, token: str) -> float:
        """The largest weight the token has in any document: a stand-in for its informativeness."""
        i = self._vocab.get(token)
        return 0.0 if i is None else float(self._max_weight[i])


class SearchMode(StrEnum):
    v3 = "v3"
    v2 = "v2"
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
    score: float  # v1 modes: the fusion / retriever score; v2: the ranker's logit-free score
    relevance: float | None = None  # v2 only: calibrated probability that this entry is asked


@dataclass(frozen=True)
class SearchOutcome:
    hits: list[SearchHit]
    match: Match
    nearest_topics: list[str]  # topics of the best candidates, for "no close match" messages


def _blas_on_one_thread() -> None:
    """Search's matrix products are small (a query against a few thousand stored vectors), but
    numpy's OpenBLAS splits them over every core, and its idle threads then spin, as OpenMP's do,
    beside the encoder's team that needs both cores: HTTP p95 rose from ~41 to ~110 ms once the
    probe matrix (3,340 x 384) crossed OpenBLAS's threading size (benchmarks/search_latency.py).
    One thread does these products in well under a millisecond."""
    from threadpoolctl import ThreadpoolController

    ThreadpoolController().select(internal_api="openblas").limit(limits=1)


class QuestionSearcher:
    def __init__(
        self,
        bank: QuestionBank,
        docs: list[SearchDocument],
        store: VectorStore,
        rrf_k: int = 60,
        glossary: Glossary | None = None,
        ranker: RankerModel | None = None,
        ranker_v2: RankerModel | None = None,
    ) -> None:
        self._bank = bank
        self._docs = docs
        self._by_id = {d.doc_id: d for d in docs}
        self._store = store
        self._rrf_k = rrf_k
        # BM25 also sees each entry's full text and rubric vocabulary (no embedding cost).
        lexical = [SearchDocument(f"{e.id}#lex", e.id, "", lexical_text(e)) for e in bank]
        self._lexical = docs + lexical
        self._by_id.update({d.doc_id: d for d in self._lexical})
        # Tokenised once: the hybrid BM25 and v2's whole-entry BM25 both index these texts.
        self._lex_tokens = [list(tokenize(d.text)) or ["∅"] for d in lexical]
        self._bm25 = _Bm25Matrix([list(tokenize(d.text)) or ["∅"] for d in docs] + self._lex_tokens)
        self.glossary = glossary or Glossary([])
        self.ranker = ranker or RankerModel.load()
        self.ranker_v2 = ranker_v2 or RankerModel.load(MODEL_PATH_V2, FEATURES_V2)
        self._concept_vecs: dict[tuple[str, bool], np.ndarray] | None = None
        self._doc_matrix: tuple[np.ndarray, np.ndarray, list[str]] | None = None
        # Probe / phrasing document id -> its entry: what the stored vectors are matched against (a
        # vector whose id is not here, e.g. of a key point since removed, is not read).
        side = build_probe_documents(bank) + build_phrasing_documents(bank)
        self._probe_entry = {d.doc_id: d.entry_id for d in side}
        self._probes: _EntryVectors | None = None
        self._phrasings: _EntryVectors | None = None
        _blas_on_one_thread()
        self._setup_v2()
        self._concept_vectors()  # at start-up, not in the first user's search
        self._document_matrix()
        self._probe_vectors()

    def _setup_v2(self) -> None:
        """v2 indexes: BM25 over each entry's parts (headline / sub-questions / the whole of a
        single-part entry) and over its whole lexical text, and the glossary concepts of each part."""
        self._entries = list(self._bank)
        self._entry_pos = {e.id: i for i, e in enumerate(self._entries)}
        unit_entry, unit_sub, unit_texts = [], [], []
        for i, e in enumerate(self._entries):
            for sub_id, text in _units(e):
                unit_entry.append(i), unit_sub.append(sub_id), unit_texts.append(text)
        self._unit_entry = np.asarray(unit_entry)
        self._entry_units = [
            np.flatnonzero(self._unit_entry == i) for i in range(len(self._entries))
        ]
        self._unit_sub = unit_sub
        unit_tokens = [list(tokenize(t)) or ["∅"] for t in unit_texts]
        self._unit_tokens = [frozenset(t) for t in unit_tokens]
        self._unit_bm25 = _Bm25Matrix(unit_tokens)
        self._unit_concepts = [self.glossary.concepts_in(t) for t in unit_texts]
        self._unit_specific = [self.glossary.specific(c) for c in self._unit_concepts]
        self._entry_concepts = [self.glossary.concepts_in(lexical_text(e)) for e in self._entries]
        self._bank_concepts = frozenset().union(*self._entry_concepts)
        self._entry_parts = np.asarray([len(e.subquestions) for e in self._entries])
        self._lex_bm25 = _Bm25Matrix(self._lex_tokens)  # self._entries is the bank's order
        phrasings = build_phrasing_documents(self._bank)
        self._phrasing_entry = np.asarray([self._entry_pos[d.entry_id] for d in phrasings], int)
        self._phrasing_bm25 = _Bm25Matrix([list(tokenize(d.text)) or ["∅"] for d in phrasings])
        self._bank_vocab = frozenset(t for toks in self._lex_tokens for t in toks)
        self._max_idf = max((self._unit_bm25.idf(t) for t in self._bank_vocab), default=1.0)
        # The bank's own words for each concept, most used first: what a query's concept is
        # expanded with, whatever form the query used (critic -> 价值模型, value model).
        self._bank_forms = bank_forms(self.glossary, unit_texts)
        self._expansion_forms = {
            c: [f for f in forms if f.isascii()][:BANK_FORMS]
            + [f for f in forms if not f.isascii()][:BANK_FORMS]
            for c, forms in self._bank_forms.items()
        }
        self._bank_zh = {
            c: next((f for f in forms if not any("a" <= ch <= "z" for ch in f)), "")
            for c, forms in self._bank_forms.items()
        }

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
        mode: SearchMode = SearchMode.v3,
    ) -> list[SearchHit]:
        if mode in (SearchMode.v3, SearchMode.v2):
            return self.find(query, k, filters, mode).hits
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

    # ---- v2 ------------------------------------------------------------------------------

    def candidates(
        self, query: str, filters: SearchFilters | None = None, v3: bool = True
    ) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
        """The entries worth scoring for a query, among those the filters accept: (entry ids, best
        sub-question ids, the ranker's feature matrix in FEATURES order (FEATURES_V2 for v2),
        each one's rank-fusion score)."""
        expansion = self.glossary.expand(query)
        q_tokens = list(tokenize(query))
        own = set(q_tokens)
        extra_text = expansion.extra_text
        if v3:  # also the bank's own words for the query's concepts, in both scripts
            norm = normalise(query)
            bank_words = [
                f
                for c in sorted(expansion.concepts)
                for f in self._expansion_forms.get(c, [])
                if f not in norm
            ]
            extra_text = " ; ".join([extra_text, *bank_words])
        extra = [t for t in dict.fromkeys(tokenize(extra_text)) if t not in own]
        tokens = q_tokens + extra
        weights = [1.0] * len(q_tokens) + [EXPANSION_WEIGHT] * len(extra)
        n = len(self._entries)

        # BM25: each entry's best part, and which part that is.
        unit_scores = self._unit_bm25.scores(tokens, weights)
        order = np.argsort(unit_scores, kind="stable")
        best_unit = np.zeros(n, dtype=int)
        best_unit[self._unit_entry[order]] = order  # later (higher) scores overwrite
        part = unit_scores[best_unit]
        lexical = self._lex_bm25.scores(tokens, weights)
        # v3: BM25 over each search phrasing alone; an entry scores by its best one.
        phrasing_bm25 = np.zeros(n)
        if v3:
            np.maximum.at(
                phrasing_bm25, self._phrasing_entry, self._phrasing_bm25.scores(tokens, weights)
            )
            phrasing_bm25 /= float(phrasing_bm25.max()) or 1.0

        # Dense: the query with English names after its Chinese terms, and that vector moved
        # towards the embeddings of its concepts' bilingual names (precomputed: no second pass
        # through the encoder).
        annotated = (
            self.glossary.annotate_v3(query, self._bank_zh) if v3 else self.glossary.annotate(query)
        )
        vector = self._store.embed_queries([annotated])[0]
        plain, plain_sub = self._dense_by_entry(vector)
        if v3:
            probes, phrasings = self._probe_vectors()
            probe, phrasing = probes.best(vector), phrasings.best(vector)
            probe_counts = probes.counts
        if expansion.concepts:
            names = self._concept_vectors()
            pull = np.mean([names[(c, v3)] for c in sorted(expansion.concepts)], axis=0)
            moved = vector + CONCEPT_PULL * pull
            expanded, expanded_sub = self._dense_by_entry(moved / np.linalg.norm(moved))
        else:
            expanded, expanded_sub = plain, plain_sub

        by_dense = np.argsort(-expanded, kind="stable")
        by_bm25 = np.argsort(-part, kind="stable")
        if filters is not None:
            ok = [filters.accepts(e) for e in self._entries]
            dense_pool = [i for i in by_dense if ok[i]]
            bm25_pool = [i for i in by_bm25 if ok[i]]
        else:
            dense_pool, bm25_pool = list(by_dense), list(by_bm25)
        pools = [dense_pool[:V2_CANDIDATES], bm25_pool[:V2_CANDIDATES]]
        if v3:  # and the entries whose search phrasings are closest, by cosine and by BM25
            for scores in (phrasing, phrasing_bm25):
                best = np.argsort(-scores, kind="stable")
                pools.append([i for i in best if filters is None or ok[i]][:PHRASING_CANDIDATES])
        chosen = list(dict.fromkeys(i for pool in pools for i in pool))
        dense_rank = np.empty(n)
        dense_rank[by_dense] = np.arange(1, n + 1)
        bm25_rank = np.empty(n)
        bm25_rank[by_bm25] = np.arange(1, n + 1)

        idf = {t: self._unit_bm25.idf(t) for t in own}
        idf_total = sum(idf.values()) or 1.0
        q_concepts = self.glossary.specific(expansion.concepts)
        # v3: a query word that belongs to a glossary term counts as covered by a part that names
        # the term's concept in any form (critic is covered by "价值模型").
        token_concepts: dict[str, set[str]] = {}
        if v3:
            for cid, forms in self.glossary.find(query).items():
                for form in forms:
                    for tok in tokenize(form):
                        token_concepts.setdefault(tok, set()).add(cid)
        missing = float(bool(q_concepts - self._bank_concepts))
        # v3: words the bank never uses weigh like its rarest ones (a question about a
        # neighbouring field is mostly such words), and concepts no entry names.
        content = [t for t in own if len(t) >= 2 or t.isascii()]
        unknown = [t for t in content if t not in self._bank_vocab]
        unknown_share = len(unknown) / len(content) if content else 0.0
        strict = {t: (idf[t] if t in self._bank_vocab else self._max_idf) for t in content}
        strict_total = sum(strict.values()) or 1.0
        missing_share = (
            len(q_concepts - self._bank_concepts) / len(q_concepts) if q_concepts else 0.0
        )
        # v3: the query's words outside its glossary terms, which say what it asks about the
        # concepts (作用, 为什么, 怎么训练): "what is the critic for" is the critic's role, not
        # an entry that merely names the critic too.
        rest = {t: w for t, w in idf.items() if t not in token_concepts}
        rest_total = sum(rest.values())
        top_part = float(part.max()) or 1.0
        top_lex = float(lexical.max()) or 1.0
        top_dense = float(expanded.max())
        zh = float(bool(_CJK.search(query)))

        rows = []
        subs = []
        for i in chosen:
            u = int(best_unit[i])
            unit_tokens, unit_concepts = self._unit_tokens[u], self._unit_concepts[u]

            def has(tok: str, unit_tokens=unit_tokens, unit_concepts=unit_concepts) -> bool:
                return tok in unit_tokens or bool(token_concepts.get(tok, set()) & unit_concepts)

            covered = sum(w for t, w in idf.items() if has(t)) / idf_total
            if q_concepts:
                overlap = max(
                    len(q_concepts & self._unit_concepts[j]) for j in self._entry_units[i]
                ) / len(q_concepts)
                overlap_entry = len(q_concepts & self._entry_concepts[i]) / len(q_concepts)
            else:
                overlap = overlap_entry = 0.0
            row = (
                plain[i],
                expanded[i],
                expanded[i] - top_dense,
                part[i] / top_part,
                covered,
                lexical[i] / top_lex,
                overlap,
                overlap_entry,
                missing,
                float(not q_concepts),
                1.0 / dense_rank[i],
                1.0 / bm25_rank[i],
                breadth(int(self._entry_parts[i])),
            )
            if v3:
                strict_cov = sum(w for t, w in strict.items() if has(t))
                row += (
                    unknown_share,
                    strict_cov / strict_total,
                    missing_share,
                    float(len(q_concepts - self._entry_concepts[i])),
                    top_dense,
                    max(
                        (
                            len(q_concepts & self._unit_specific[j]) / len(self._unit_specific[j])
                            for j in self._entry_units[i]
                            if self._unit_specific[j]
                        ),
                        default=0.0,
                    ),
                    zh,
                    expanded[i] * zh,
                    sum(w for t, w in rest.items() if t in unit_tokens) / rest_total
                    if rest_total
                    else 0.0,
                    float(probe[i]),
                    math.log1p(int(probe_counts[i])),
                    float(phrasing[i]),
                    float(phrasing_bm25[i]),
                )
            rows.append(row)
            subs.append(expanded_sub.get(i) or plain_sub.get(i) or self._unit_sub[u])
        width = len(FEATURES_ALL) if v3 else len(FEATURES_V2)
        features = np.asarray(rows, dtype=float).reshape(len(rows), width)
        if v3:
            features = features[:, [FEATURES_ALL.index(f) for f in FEATURES]]
        fusion = np.asarray(
            [
                BM25_WEIGHT / (self._rrf_k + bm25_rank[i])
                + DENSE_WEIGHT / (self._rrf_k + dense_rank[i])
                for i in chosen
            ]
        )
        return [self._entries[i].id for i in chosen], subs, features, fusion

    def _concept_vectors(self) -> dict[tuple[str, bool], np.ndarray]:
        """Each glossary concept's canonical bilingual name (v2) and that name with the bank's own
        words for it (v3), as query vectors: (concept id, v3) -> vector."""
        if self._concept_vecs is None:
            named = concept_names(self.glossary, self._bank_forms)
            # stored at ingest (Services.ingest): no encoder pass at start-up
            vectors = self._store.named_query_vectors(named) if named else {}
            self._concept_vecs = {
                (key.removesuffix(V3_SUFFIX), key.endswith(V3_SUFFIX)): v
                for key, v in vectors.items()
            }
        return self._concept_vecs

    def _document_matrix(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """The stored document vectors, read once: (matrix, entry position of each row, its
        sub-question id). v2/v3 score every document exactly in memory: ~1000 x 384 is a fraction
        of a millisecond, where Chroma's approximate (HNSW) top-k cost two index round trips per
        search and returned slightly different neighbours from one start to the next, which moved
        features and fitted thresholds."""
        if self._doc_matrix is None or len(self._doc_matrix[1]) < len(self._docs):
            # (re-read while the index lacks documents: a searcher built before an ingest)
            ids, matrix = self._store.document_vectors()
            rows = [
                (r, self._entry_pos[doc.entry_id], doc.subquestion_id)
                for r, doc in ((r, self._by_id.get(i)) for r, i in enumerate(ids))
                if doc is not None and doc.entry_id in self._entry_pos
            ]
            self._doc_matrix = (
                matrix[[r for r, _, _ in rows]].reshape(len(rows), -1),
                np.asarray([e for _, e, _ in rows], dtype=int),
                [sub for _, _, sub in rows],
            )
        return self._doc_matrix

    def _probe_vectors(self) -> tuple[_EntryVectors, _EntryVectors]:
        """The key points' follow-up questions and the entries' search phrasings (one stored
        collection), read once and grouped by entry."""
        read = self._probes is not None and self._phrasings is not None
        if not read or self._probes.size + self._phrasings.size < len(self._probe_entry):
            # (re-read while the index lacks some: a searcher built before an ingest)
            ids, matrix = self._store.document_vectors(probes=True)
            kinds: dict[bool, list[tuple[int, int]]] = {False: [], True: []}
            for r, i in enumerate(ids):
                if i in self._probe_entry:
                    kinds[is_phrasing(i)].append((self._entry_pos[self._probe_entry[i]], r))
            self._probes = _EntryVectors(matrix, kinds[False], len(self._entries))
            self._phrasings = _EntryVectors(matrix, kinds[True], len(self._entries))
        return self._probes, self._phrasings

    def _dense_by_entry(self, vector: np.ndarray) -> tuple[np.ndarray, dict[int, str]]:
        """Each entry's best cosine over its documents, and which sub-question that document is."""
        matrix, entry_of, sub_of = self._document_matrix()
        cos = matrix @ np.asarray(vector, dtype=np.float32)
        best = np.full(len(self._entries), -1.0)
        order = np.argsort(cos, kind="stable")  # later (higher) cosines overwrite
        best[entry_of[order]] = cos[order]
        best_doc = np.full(len(self._entries), -1)
        best_doc[entry_of[order]] = order
        sub = {int(i): sub_of[d] for i, d in enumerate(best_doc) if d >= 0}
        return best, sub

    def find(
        self,
        query: str,
        k: int = 5,
        filters: SearchFilters | None = None,
        mode: SearchMode = SearchMode.v3,
    ) -> SearchOutcome:
        """The k most relevant entries the filters accept, each with a calibrated relevance, and
        the query's match (strong / weak / none) judged on the best of them (v3, or v2)."""
        filters = filters or SearchFilters()
        v3 = mode != SearchMode.v2
        ranker = self.ranker if v3 else self.ranker_v2
        ids, subs, features, fusion = self.candidates(query, filters, v3=v3)
        relevance = ranker.query_relevance(features)
        order = np.argsort(-relevance, kind="stable")
        match = ranker.match(float(relevance[order[0]]) if len(order) else None)
        hits: list[SearchHit] = []
        for j in order:
            entry = self._bank.get(ids[j])
            if entry is not None and filters.accepts(entry):
                hits.append(
                    SearchHit(
                        entry, subs[j], round(float(fusion[j]), 6), round(float(relevance[j]), 4)
                    )
                )
            if len(hits) >= k:
                break
        topics = list(dict.fromkeys(self._bank.get(ids[j]).topic for j in order[:5]))[:3]
        return SearchOutcome(hits, match, topics)
