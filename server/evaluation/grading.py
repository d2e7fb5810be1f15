"""Grading evaluation against human labels, with a length-only and a TF-IDF baseline in the same run."""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau, spearmanr

from server.corpus.bank import QuestionBank
from server.corpus.schema import QuestionEntry
from server.grading.models import Grade
from server.retrieval.tokenize import tokenize

ADVERSARIAL_DEFAULT_TARGET = {
    "padded": "good",
    "salad": "good",
    "inject": "weak",
    "offtopic": "weak",
    "longwrong": "good",
}
HONEST_KINDS = ("excellent", "good", "concise", "english", "weak")


@dataclass(frozen=True)
class GradingCase:
    q: str
    kind: str
    label: float
    answer: str
    entry: QuestionEntry
    imitates: str | None = None
    max_ok: float | None = None  # an attack's ceiling: a score above it is an adversarial failure
    author: str = ""

    @property
    def split(self) -> str:
        return split_of(self.entry.id)


def split_of(question_id: str) -> str:
    """Held-out by question: a quarter of the questions, chosen by a hash of the id, are the test
    split. Nothing is fitted or tuned on them; `fit-grader` refuses to see them."""
    digest = hashlib.sha1(question_id.encode("utf-8")).hexdigest()
    return "test" if int(digest, 16) % 4 == 0 else "train"


@dataclass
class GradingReport:
    name: str
    spearman: float
    kendall: float
    mae: float
    mean_by_kind: dict[str, float]
    adversarial_failures: list[str] = field(default_factory=list)
    blank_scores: list[float] = field(default_factory=list)


def _norm(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).lower().split())


def resolve_question(bank: QuestionBank, q: str) -> QuestionEntry:
    key = _norm(q)
    exact = [e for e in bank if _norm(e.text) == key]
    if exact:
        return exact[0]
    found = [e for e in bank if key in _norm(e.text)]
    if not found:
        found = [e for e in bank if key in _norm(e.text_en)]
    if len(found) != 1:
        raise ValueError(f"question locator {q!r} matches {len(found)} entries")
    return found[0]


def load_cases(path: Path, bank: QuestionBank) -> list[GradingCase]:
    cases = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        try:
            if "question_id" in row:
                entry = bank.get(row["question_id"])
                if entry is None:
                    raise ValueError(f"unknown question id {row['question_id']!r}")
            else:
                entry = resolve_question(bank, row["q"])
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{path.name}:{n}: {exc}") from exc
        cases.append(
            GradingCase(
                q=row.get("q") or entry.id,
                kind=row["kind"],
                label=float(row["label"]),
                answer=row["answer"],
                entry=entry,
                imitates=row.get("imitates"),
                max_ok=row.get("max_ok"),
                author=row.get("author", ""),
            )
        )
    return cases


def load_datasets(paths: list[Path], bank: QuestionBank) -> list[GradingCase]:
    """Every case of the given files (a directory means its *.jsonl files)."""
    cases: list[GradingCase] = []
    for path in paths:
        files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
        for f in files:
            cases += load_cases(f, bank)
    return cases


def length_baseline(cases: list[GradingCase]) -> list[float]:
    lengths = np.array([len(c.answer.strip()) for c in cases], dtype=float)
    return list(10 * lengths / max(lengths.max(), 1))


def tfidf_baseline(cases: list[GradingCase]) -> list[float]:
    from sklearn.feature_extraction.text import TfidfVectorizer

    refs = [c.entry.rubric.reference_answer if c.entry.rubric else c.entry.text for c in cases]
    vectorizer = TfidfVectorizer(analyzer=lambda t: list(tokenize(t)))
    vectorizer.fit(refs + [c.answer for c in cases])
    a = vectorizer.transform([c.answer for c in cases])
    r = vectorizer.transform(refs)
    sims = np.asarray(a.multiply(r).sum(axis=1)).ravel()
    return list(10 * sims / max(sims.max(), 1e-9))


def _adversarial_failures(cases: list[GradingCase], scores: list[float]) -> list[str]:
    by_question: dict[str, dict[str, float]] = defaultdict(dict)
    for c, s in zip(cases, scores, strict=True):
        by_question[c.entry.id].setdefault(c.kind, s)
    failures = []
    for c, s in zip(cases, scores, strict=True):
        if c.max_ok is not None:
            if s > c.max_ok:
                failures.append(f"{c.entry.id} [{c.kind} {s:.1f} > ceiling {c.max_ok:.1f}]")
            continue
        target_kind = c.imitates or ADVERSARIAL_DEFAULT_TARGET.get(c.kind)
        if target_kind is None:
            continue
        honest = by_question[c.entry.id].get(target_kind)
        if honest is None:
            candidates = [
                by_question[c.entry.id][k] for k in HONEST_KINDS if k in by_question[c.entry.id]
            ]
            honest = min(candidates) if candidates else None
        if honest is not None and s > honest:
            failures.append(f"{c.entry.id} [{c.kind} {s:.1f} > {target_kind} {honest:.1f}]")
    return failures


def report(name: str, cases: list[GradingCase], scores: list[float]) -> GradingReport:
    labels = [c.label for c in cases]
    rho = float(spearmanr(labels, scores).statistic)
    tau = float(kendalltau(labels, scores).statistic)
    mae = float(np.mean(np.abs(np.array(labels) - np.array(scores))))
    by_kind: dict[str, list[float]] = defaultdict(list)
    for c, s in zip(cases, scores, strict=True):
        by_kind[c.kind].append(s)
    return GradingReport(
        name=name,
        spearman=rho,
        kendall=tau,
        mae=mae,
        mean_by_kind={k: float(np.mean(v)) for k, v in sorted(by_kind.items())},
        adversarial_failures=_adversarial_failures(cases, scores),
    )


def evaluate_grader(
    name: str, cases: list[GradingCase], grade: Callable[[GradingCase], float]
) -> GradingReport:
    result = report(name, cases, [grade(c) for c in cases])
    # Blank answers must score exactly 0, whatever the grader.
    result.blank_scores = [grade(GradingCase(c.q, "blank", 0, "   ", c.entry)) for c in cases[:3]]
    return result


# Flags that say how an LLM grade was reached (repairs and trims), counted beside the fallbacks.
LLM_PROCESS_FLAGS = (
    "llm_ids_repaired",
    "llm_rubric_trimmed",
    "llm_answer_cut",
    "unverified_evidence",
    "unsupported_evidence",
    "contradicted_evidence",
    "reused_evidence",
    "short_evidence",
)


@dataclass
class LlmOutcomes:
    """How the grades of an `--grader llm` run came about: by the model, or by the rubric grader
    after a fallback (counted by reason), or with no model call at all (empty answers)."""

    by_model: int = 0
    no_call: int = 0
    fallbacks: Counter[str] = field(default_factory=Counter)
    process: Counter[str] = field(default_factory=Counter)
    details: dict[str, str] = field(default_factory=dict)  # the first detail seen per reason

    def add(self, grade: Grade) -> None:
        if grade.fallback_reason:
            self.fallbacks[grade.fallback_reason] += 1
            self.details.setdefault(grade.fallback_reason, grade.fallback_detail or "")
        elif grade.grader.startswith("llm"):
            self.by_model += 1
            self.process.update(f for f in grade.flags if f in LLM_PROCESS_FLAGS)
        else:
            self.no_call += 1

    @property
    def total(self) -> int:
        return self.by_model + self.no_call + sum(self.fallbacks.values())

    def summary(self) -> str:
        fell = sum(self.fallbacks.values())
        reasons = ", ".join(f"{r} {n}" for r, n in self.fallbacks.most_common()) or "none"
        return (
            f"LLM grades: {self.total} graded; by the model {self.by_model}, "
            f"fell back to the rubric grader {fell} ({reasons}), no model call {self.no_call}"
        )
