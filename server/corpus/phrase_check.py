"""Wrong-claim phrases that fire on true statements: the bank-wide cross-check.

Each key point's `contradictions` and each misconception's `aliases` are matched against every
sentence of a candidate's answer; a phrase that also matches a true sentence punishes a correct
answer. So every such phrase is run, through the grader's own matcher (`claims.find_phrases`, loose,
asserted or hedged), over every sentence the bank asserts — every entry's reference answers (zh and
en), key-point texts and corrections — plus `corpus/true_statements.yaml` (true statements written to
catch phrases without a subject). A phrase that fires on one is a problem for
`sparring corpus validate`, unless `corpus/phrase_whitelist.yaml` lists it with a written reason.

A phrase must also name its subject: a bare predicate ("提高温度", "不需要奖励", "裁剪梯度") says
nothing about *what* is claimed. The grader's matcher binds such a phrase to the subject of the
misconception or key point it belongs to (`claims.needs_subject`): it fires only in a sentence that
also names that subject, and this check runs it the same way."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from server.corpus.schema import QuestionEntry
from server.grading.claims import Stance, find_phrases, needs_subject, subject_words
from server.grading.normalize import normal_form
from server.grading.segments import split_segments
from server.retrieval.tokenize import words_in_order
from server.yaml_files import read_yaml

CORPUS_DIR = Path(__file__).resolve().parents[2] / "corpus"
WHITELIST_FILE = CORPUS_DIR / "phrase_whitelist.yaml"
TRUE_STATEMENTS_FILE = CORPUS_DIR / "true_statements.yaml"


@dataclass(frozen=True)
class TrueSentence:
    where: str  # "entry-id:field" or "true_statements:N"
    text: str  # verbatim
    norm: str


@dataclass(frozen=True)
class Phrase:
    entry: str
    owner: str  # "contradiction of <point>" or "misconception <id>"
    text: str
    subject: frozenset[str]  # what the claim is about (the owner's content words)


def _sentences(where: str, text: str) -> list[TrueSentence]:
    return [
        TrueSentence(where, s.text, normal_form(s.text))
        for s in split_segments(text)
        if not s.code and len(s.text) >= 4
    ]


def true_sentences(
    entries: list[QuestionEntry], extra: list[str] | None = None
) -> list[TrueSentence]:
    """Every sentence the bank asserts, and the curated true statements."""
    out: list[TrueSentence] = []
    for e in entries:
        r = e.rubric
        if r is None:
            continue
        out += _sentences(f"{e.id}:reference_answer", r.reference_answer)
        if r.reference_answer_en:
            out += _sentences(f"{e.id}:reference_answer_en", r.reference_answer_en)
        for kp in r.key_points:
            out += _sentences(f"{e.id}:{kp.id}.text", kp.text)
            out += _sentences(f"{e.id}:{kp.id}.text_en", kp.text_en)
        for m in r.misconceptions:
            out += _sentences(f"{e.id}:{m.id}.correction", m.correction)
            if m.correction_en:
                out += _sentences(f"{e.id}:{m.id}.correction_en", m.correction_en)
    for n, text in enumerate(extra if extra is not None else load_true_statements(), start=1):
        out += _sentences(f"true_statements:{n}", text)
    return out


def phrases_of(entries: list[QuestionEntry]) -> list[Phrase]:
    out = []
    for e in entries:
        if e.rubric is None:
            continue
        for kp in e.rubric.key_points:
            subject = subject_words((kp.text, kp.text_en))
            out += [
                Phrase(e.id, f"contradiction of {kp.id}", c, subject) for c in kp.contradictions
            ]
        for m in e.rubric.misconceptions:
            subject = subject_words((m.text, m.text_en))
            out += [Phrase(e.id, f"misconception {m.id}", a, subject) for a in m.aliases]
    return out


def load_true_statements(path: Path = TRUE_STATEMENTS_FILE) -> list[str]:
    if not path.exists():
        return []
    data = read_yaml(path) or {}
    return [str(s) for s in data.get("statements", [])]


def load_whitelist(path: Path = WHITELIST_FILE) -> dict[tuple[str, str], str]:
    """(entry id, phrase) → reason. An entry without a reason is itself a problem."""
    if not path.exists():
        return {}
    data = read_yaml(path) or {}
    return {(w["entry"], w["phrase"]): str(w.get("reason") or "") for w in data.get("allow", [])}


def _grams(text: str) -> set[str]:
    """Characters and character bigrams of each word (spaces removed)."""
    out: set[str] = set()
    for word in text.split():
        out |= set(word)
        out |= {word[i : i + 2] for i in range(len(word) - 1)}
    return out


class SentenceIndex:
    """Bigram postings over the true sentences: only sentences holding every bigram of a phrase's
    words are run through its pattern (the bank has ~10k sentences and ~4k phrases)."""

    def __init__(self, sentences: list[TrueSentence]) -> None:
        self.sentences = sentences
        self.postings: dict[str, set[int]] = defaultdict(set)
        for i, s in enumerate(sentences):
            for g in _grams(s.norm.replace(" ", "")):
                self.postings[g].add(i)

    def candidates(self, phrase_norm: str) -> list[int]:
        grams = set()
        for word in words_in_order(phrase_norm):
            grams |= _grams(word.replace(" ", ""))
        keys = sorted(grams, key=lambda g: len(self.postings.get(g, ())))
        if not keys:
            return []
        found = set(self.postings.get(keys[0], set()))
        for g in keys[1:]:
            if not found:
                break
            found &= self.postings.get(g, set())
        return sorted(found)

    def fires_on(self, phrase: str, subject: frozenset[str] | None = None) -> list[TrueSentence]:
        norm = normal_form(phrase)
        hits = []
        for i in self.candidates(norm):
            s = self.sentences[i]
            if any(
                m.stance in (Stance.asserted, Stance.hedged)
                for m in find_phrases(s.norm, [phrase], True, subject)
            ):
                hits.append(s)
        return hits


def phrase_problems(
    entries: list[QuestionEntry],
    *,
    extra_true: list[str] | None = None,
    whitelist: dict[tuple[str, str], str] | None = None,
    only: set[str] | None = None,
) -> list[str]:
    """Every wrong-claim phrase (of the `only` entries, default all) that fires on a true sentence
    of the whole bank, or names no subject where its owner names none either."""
    index = SentenceIndex(true_sentences(entries, extra_true))
    allowed = load_whitelist() if whitelist is None else whitelist
    problems = [
        f"phrase_whitelist.yaml: {entry}: {phrase!r} has no reason"
        for (entry, phrase), reason in allowed.items()
        if not reason.strip()
    ]
    for p in phrases_of([e for e in entries if only is None or e.id in only]):
        if (p.entry, p.text) in allowed:
            continue
        if needs_subject(p.text) and not p.subject:
            problems.append(
                f"{p.entry}: {p.owner}: {p.text!r} names no subject, nor does its owner"
            )
            continue
        hits = index.fires_on(p.text, p.subject)
        if hits:
            h = hits[0]
            more = f" (+{len(hits) - 1} more)" if len(hits) > 1 else ""
            problems.append(
                f"{p.entry}: {p.owner}: {p.text!r} fires on a true statement in {h.where}: "
                f"{h.text[:80]!r}{more}"
            )
    return problems
