"""Which questions a session asks: filters, company weighting, a mix of difficulties, no repeats."""

from __future__ import annotations

import random
from collections.abc import Callable

from server.corpus.bank import QuestionBank
from server.corpus.schema import QuestionEntry
from server.interview.schemas import SessionRequest
from server.retrieval.search import SearchHit

DIFFICULTY_PATTERN = (2, 1, 3)
PLAN_LENGTH = 60


def matches(entry: QuestionEntry, req: SessionRequest) -> bool:
    if entry.rubric is None:
        return False
    if req.companies and not any(c in ec for c in req.companies for ec in entry.companies):
        return False
    if req.topics:
        wanted = {t.lower() for t in req.topics}
        if entry.topic.lower() not in wanted and entry.area.value not in wanted:
            return False
    if req.difficulty and entry.difficulty not in req.difficulty:
        return False
    return not (req.types and entry.type not in req.types)


def company_weight(entry: QuestionEntry, companies: list[str]) -> float:
    """More weight for entries asked by more of the chosen companies."""
    if not companies:
        return 1.0
    hits = sum(any(c in ec for ec in entry.companies) for c in companies)
    return 1.0 + 2.0 * hits


def plan(
    bank: QuestionBank,
    req: SessionRequest,
    rng: random.Random,
    preferred: list[str] | None = None,
) -> list[str]:
    """Entry ids in asking order. `preferred` ids (review mode) come first, in their order."""
    candidates = [e for e in bank if matches(e, req)]
    first = [eid for eid in (preferred or []) if any(e.id == eid for e in candidates)]
    rest = [e for e in candidates if e.id not in first]
    # Weighted shuffle without replacement (key u^(1/w)).
    keyed = sorted(rest, key=lambda e: -(rng.random() ** (1.0 / company_weight(e, req.companies))))
    buckets: dict[int, list[str]] = {1: [], 2: [], 3: []}
    for e in keyed:
        buckets[e.difficulty].append(e.id)
    mixed: list[str] = []
    while any(buckets.values()):
        for level in DIFFICULTY_PATTERN:
            if buckets[level]:
                mixed.append(buckets[level].pop(0))
    return (first + mixed)[:PLAN_LENGTH]


def pick_related(
    hits: list[SearchHit],
    usable: Callable[[QuestionEntry], bool],
    weak_areas: set[str],
    min_relevance: float,
) -> QuestionEntry | None:
    """The follow-up to ask among search hits for the current question's text: a usable entry
    that search judges at least a weak match (relevance >= min_relevance), the candidate's weak
    areas first, then by relevance. Only when no hit is that close does a loosely related one do,
    so an unrelated question is never passed off as a follow-up while a related one exists."""
    fresh = [h for h in hits if usable(h.entry)]
    close = [h for h in fresh if h.relevance is None or h.relevance >= min_relevance]
    pool = close or fresh
    if not pool:
        return None
    pool.sort(key=lambda h: (h.entry.area.value not in weak_areas, -(h.relevance or 0.0)))
    return pool[0].entry
