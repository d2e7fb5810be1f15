"""Retrieval evaluation: recall@1, recall@5 and MRR@10 for BM25-only, dense-only and hybrid."""

from __future__ import annotations

import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from server.retrieval.search import QuestionSearcher, SearchMode


@dataclass(frozen=True)
class RetrievalCase:
    query: str
    expect: list[str]


@dataclass(frozen=True)
class RetrievalScores:
    mode: str
    recall_at_1: float
    recall_at_5: float
    mrr_at_10: float
    misses: list[str]


def _norm(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).lower().split())


def load_cases(path: Path) -> list[RetrievalCase]:
    cases = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        if not row.get("q") or not row.get("expect"):
            raise ValueError(f"{path.name}:{n}: each case needs 'q' and a non-empty 'expect'")
        cases.append(RetrievalCase(row["q"], list(row["expect"])))
    return cases


def first_relevant_rank(texts: list[str], expect: list[str]) -> int | None:
    wanted = [_norm(x) for x in expect]
    for rank, text in enumerate(texts, start=1):
        t = _norm(text)
        if any(w in t for w in wanted):
            return rank
    return None


def evaluate(
    searcher: QuestionSearcher, cases: list[RetrievalCase], mode: SearchMode
) -> RetrievalScores:
    r1 = r5 = mrr = 0.0
    misses = []
    for case in cases:
        hits = searcher.search(case.query, k=10, mode=mode)
        rank = first_relevant_rank([h.entry.text for h in hits], case.expect)
        if rank == 1:
            r1 += 1
        if rank is not None and rank <= 5:
            r5 += 1
        else:
            misses.append(case.query)
        if rank is not None:
            mrr += 1.0 / rank
    n = max(len(cases), 1)
    return RetrievalScores(mode.value, r1 / n, r5 / n, mrr / n, misses)
