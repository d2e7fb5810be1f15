"""Retrieval evaluation: recall@1, recall@5 and MRR@10 per retriever and language, plus how well the
top hit's `relevance` separates queries the bank cannot answer (no-match AUC).

Case files are JSONL, one query a line, in either form:
  {"q": query, "expect": [substrings of the right entry's text]}   (the shared eval format)
  {"q": query, "ids": [entry ids]}      an empty "ids" list marks a query the bank has no entry for
Optional fields: "source" (where a real candidate's wording comes from), "pending" (the query's
topic waits for entries not in the bank yet: such a case is skipped everywhere until labelled).
Every case belongs to a split, "train" or "test", fixed by a hash of its query text (or an explicit
"split" field): about 30% is test. Only train cases may be used to fit or tune anything
(`sparring eval fit-ranker`); test is reported, never tuned on.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from server.corpus.bank import QuestionBank
from server.retrieval.search import QuestionSearcher, SearchMode

TEST_SHARE = 3  # of 10 hash buckets
# The labelled query sets, oldest first (v3–v6: real wordings from public interview notes; v5 and v6
# also practitioners' questions from GitHub issue threads of RL training frameworks; v8 mostly
# out-of-field LLM questions close to the field, the no-match side in candidates' own words).
RETRIEVAL_SETS = [
    Path(__file__).resolve().parents[2] / "tests" / "eval" / f"retrieval{suffix}.jsonl"
    for suffix in ("", "_v2", "_v3", "_v4", "_v5", "_v6", "_v7", "_v8")
]
_CJK = re.compile(r"[\u3400-\u9fff]")


@dataclass(frozen=True)
class RetrievalCase:
    query: str
    expect: list[str] = field(default_factory=list)  # substrings of a right entry's text
    ids: list[str] = field(default_factory=list)  # or the right entries' ids
    split: str = "train"
    # "notes": a question as written in public interview notes or a practitioner's thread (the
    # row has a `source` and is not marked `"wording": "paraphrase"`); "team": worded by the team
    origin: str = "team"

    @property
    def no_match(self) -> bool:
        return not self.expect and not self.ids

    @property
    def language(self) -> str:
        return "zh" if _CJK.search(self.query) else "en"

    def relevant(self, bank: QuestionBank) -> set[str]:
        """Ids of the entries that answer this query."""
        found = set(self.ids)
        if self.expect:
            wanted = [_norm(x) for x in self.expect]
            found |= {e.id for e in bank if any(w in _norm(e.text) for w in wanted)}
        return found


@dataclass(frozen=True)
class RetrievalScores:
    mode: str
    queries: int
    recall_at_1: float
    recall_at_5: float
    mrr_at_10: float
    by_language: dict[str, tuple[int, float, float]]  # lang -> (queries, recall@5, MRR@10)
    no_match_auc: float | None  # ranked modes only, when the set has both kinds of query
    misses: list[str]
    said_none: float | None = None  # ranked modes: share of answerable queries told `none`
    no_match_said_none: float | None = None  # share of no-match queries told `none`
    # every figure by language ("zh", "en") and by origin ("notes", "team")
    by_group: dict[str, dict[str, float | None]] = field(default_factory=dict)


def _norm(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).lower().split())


def split_of(query: str) -> str:
    bucket = int(hashlib.sha1(query.strip().encode()).hexdigest()[:8], 16) % 10
    return "test" if bucket < TEST_SHARE else "train"


def load_cases(path: Path) -> list[RetrievalCase]:
    cases = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        query = str(row.get("q") or "").strip()
        if not query or ("expect" not in row and "ids" not in row):
            raise ValueError(f"{path.name}:{n}: each case needs 'q' and 'expect' or 'ids'")
        if "expect" in row and not row["expect"]:
            raise ValueError(f"{path.name}:{n}: 'expect' must not be empty (use \"ids\": [])")
        if row.get("pending"):
            continue  # its entries are not in the bank yet: neither answerable nor a no-match
        split = row.get("split") or split_of(query)
        if split not in ("train", "test"):
            raise ValueError(f"{path.name}:{n}: split must be train or test")
        origin = "notes" if row.get("source") and row.get("wording") != "paraphrase" else "team"
        cases.append(
            RetrievalCase(
                query,
                list(row.get("expect") or []),
                list(row.get("ids") or []),
                split,
                origin,
            )
        )
    return cases


def load_many(paths: list[Path], split: str | None = None) -> list[RetrievalCase]:
    cases = [c for p in paths for c in load_cases(p)]
    return [c for c in cases if split is None or c.split == split]


def first_relevant_rank(texts: list[str], expect: list[str]) -> int | None:
    wanted = [_norm(x) for x in expect]
    for rank, text in enumerate(texts, start=1):
        t = _norm(text)
        if any(w in t for w in wanted):
            return rank
    return None


def auc(positives: list[float], negatives: list[float]) -> float | None:
    """P(a random positive scores above a random negative), ties counted half."""
    if not positives or not negatives:
        return None
    p = np.asarray(positives)[:, None]
    n = np.asarray(negatives)[None, :]
    return float(((p > n).sum() + 0.5 * (p == n).sum()) / (p.size * n.size))


def evaluate(
    searcher: QuestionSearcher,
    bank: QuestionBank,
    cases: list[RetrievalCase],
    mode: SearchMode,
) -> RetrievalScores:
    per_lang: dict[str, list[tuple[bool, float]]] = {}
    r1 = r5 = mrr = 0.0
    matched = 0
    misses = []
    # each value is tagged with the case's groups: (language, origin)
    top_matched: list[tuple[tuple[str, str], float]] = []
    top_none: list[tuple[tuple[str, str], float]] = []
    said_none: list[tuple[tuple[str, str], bool]] = []  # told none, per answerable query
    none_said_none: list[tuple[tuple[str, str], bool]] = []
    answered: list[tuple[tuple[str, str], bool, bool, float]] = []  # (groups, @1, in top 5, RR)
    ranked = mode in (SearchMode.v2, SearchMode.v3)
    for case in cases:
        if ranked:
            outcome = searcher.find(case.query, k=10, mode=mode)
            hits, verdict = outcome.hits, outcome.match.value
        else:
            hits, verdict = searcher.search(case.query, k=10, mode=mode), None
        top = hits[0].relevance if hits and hits[0].relevance is not None else None
        # a query with no candidate at all is told `none`: it ranks below every scored query
        score = top if top is not None else -1.0
        groups = (case.language, case.origin)
        if case.no_match:
            if ranked:
                top_none.append((groups, score))
                none_said_none.append((groups, verdict == "none"))
            continue
        if ranked:
            top_matched.append((groups, score))
            said_none.append((groups, verdict == "none"))
        matched += 1
        relevant = case.relevant(bank)
        rank = next((n for n, h in enumerate(hits, start=1) if h.entry.id in relevant), None)
        r1 += rank == 1
        in5 = rank is not None and rank <= 5
        r5 += in5
        rr = 1.0 / rank if rank is not None else 0.0
        mrr += rr
        per_lang.setdefault(case.language, []).append((in5, rr))
        answered.append((groups, rank == 1, in5, rr))
        if not in5:
            misses.append(case.query)
    n = max(matched, 1)
    by_language = {
        lang: (len(v), sum(x for x, _ in v) / len(v), sum(y for _, y in v) / len(v))
        for lang, v in sorted(per_lang.items())
    }

    def share(pairs: list[tuple[tuple[str, str], bool]], group: str | None = None) -> float | None:
        xs = [x for g, x in pairs if group is None or group in g]
        return sum(xs) / len(xs) if xs else None

    full: dict[str, dict[str, float | None]] = {}
    labels = {g for gs, *_ in answered for g in gs} | {g for gs, _ in top_none for g in gs}
    for group in sorted(labels):
        v = [(at1, in5, rr) for gs, at1, in5, rr in answered if group in gs]
        full[group] = {
            "queries": float(len(v)),
            "no_match_queries": float(sum(group in gs for gs, _ in top_none)),
            "recall_at_1": sum(x for x, _, _ in v) / len(v) if v else None,
            "recall_at_5": sum(x for _, x, _ in v) / len(v) if v else None,
            "mrr_at_10": sum(x for _, _, x in v) / len(v) if v else None,
            "said_none": share(said_none, group),
            "no_match_auc": auc(
                [s for gs, s in top_matched if group in gs],
                [s for gs, s in top_none if group in gs],
            )
            if ranked
            else None,
        }
    return RetrievalScores(
        mode.value,
        matched,
        r1 / n,
        r5 / n,
        mrr / n,
        by_language,
        auc([s for _, s in top_matched], [s for _, s in top_none]) if ranked else None,
        misses,
        share(said_none) if ranked else None,
        share(none_said_none) if ranked else None,
        full,
    )
