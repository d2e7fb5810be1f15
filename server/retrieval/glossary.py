"""The bilingual RL glossary (corpus/glossary.yaml): which concepts a text names, and query expansion."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from server.retrieval.tokenize import normalise

_LATIN = re.compile(r"[a-z0-9]")


@dataclass(frozen=True)
class Concept:
    id: str
    forms: tuple[str, ...]  # normalised surface forms, zh + en + abbreviations
    canonical: str  # "ABBR / english name / 中文名", embedded to move the dense query
    generic: bool = False  # names a kind of question or a basic notion, not what a query is about
    english: str = ""  # abbreviation or English name, "" when the concept has neither


@dataclass(frozen=True)
class Expansion:
    concepts: frozenset[str]  # ids of the concepts the text names
    extra_text: str  # surface forms of those concepts that the text does not contain (for BM25)


class Glossary:
    def __init__(self, concepts: list[Concept]) -> None:
        self.concepts = {c.id: c for c in concepts}
        # Longest forms first, so 重要性采样 wins over 采样 and "ppo-clip" over "ppo".
        forms = sorted(
            {(f, c.id) for c in concepts for f in c.forms}, key=lambda fc: (-len(fc[0]), fc[0])
        )
        self._patterns = [(self._pattern(f), f, cid) for f, cid in forms]

    @staticmethod
    def _pattern(form: str) -> re.Pattern[str]:
        body = re.escape(form).replace(r"\ ", r"[\s_-]?")
        # Latin edges must not run into other Latin letters/digits ("rl" is not inside "url").
        left = r"(?<![a-z0-9])" if _LATIN.match(form[0]) else ""
        right = r"(?![a-z0-9])" if _LATIN.match(form[-1]) else ""
        return re.compile(left + body + right)

    @classmethod
    def load(cls, path: Path) -> Glossary:
        rows = yaml.safe_load(path.read_text(encoding="utf-8")) or []
        concepts = []
        seen: set[str] = set()
        for row in rows:
            cid = str(row["id"])
            if cid in seen:
                raise ValueError(f"{path.name}: duplicate glossary id {cid!r}")
            seen.add(cid)
            zh = [str(x) for x in row.get("zh") or []]
            en = [str(x) for x in row.get("en") or []]
            abbr = [str(x) for x in row.get("abbr") or []]
            forms = tuple(dict.fromkeys(normalise(f).strip() for f in zh + en + abbr if f.strip()))
            if not forms:
                raise ValueError(f"{path.name}: glossary entry {cid!r} names no term")
            names = [(abbr or [""])[0], (en or [""])[0], (zh or [""])[0]]
            canonical = " / ".join(dict.fromkeys(n for n in names if n))
            english = (abbr or en or [""])[0]
            concepts.append(
                Concept(cid, forms, canonical, bool(row.get("generic", False)), english)
            )
        return cls(concepts)

    def _matches(self, norm: str) -> list[tuple[int, int, str, str]]:
        """(start, end, form, concept id) of the longest non-overlapping matches, in text order."""
        taken = [False] * len(norm)
        found = []
        for pattern, form, cid in self._patterns:
            if form[0] not in norm and not _LATIN.match(form[0]):
                continue
            for m in pattern.finditer(norm):
                if any(taken[m.start() : m.end()]):
                    continue
                taken[m.start() : m.end()] = [True] * (m.end() - m.start())
                found.append((m.start(), m.end(), form, cid))
        return sorted(found)

    def find(self, text: str) -> dict[str, list[str]]:
        """Concept id -> the forms found, longest non-overlapping matches only."""
        found: dict[str, list[str]] = {}
        for _, _, form, cid in self._matches(normalise(text)):
            found.setdefault(cid, []).append(form)
        return found

    def annotate(self, text: str) -> str:
        """The text with the English name put after each Chinese term of a specific concept
        (演员-评论员 -> 演员-评论员 (actor-critic)): the encoder knows the English terms far better
        than textbook translations."""
        norm = normalise(text)
        # Keep the user's casing (the encoder is cased) unless normalising moved characters.
        base = text if len(norm) == len(text) else norm
        out, last = [], 0
        for _, end, form, cid in self._matches(norm):
            concept = self.concepts[cid]
            if concept.generic or _LATIN.search(form) or not concept.english:
                continue
            out += [base[last:end], f" ({concept.english})"]
            last = end
        return "".join(out) + base[last:]

    def concepts_in(self, text: str) -> frozenset[str]:
        return frozenset(self.find(text))

    def specific(self, concepts: frozenset[str]) -> frozenset[str]:
        """The concepts a text is about: without the generic ones (区别, 原理, reward, ...)."""
        return frozenset(c for c in concepts if not self.concepts[c].generic)

    def expand(self, text: str) -> Expansion:
        """The concepts a text names, and their canonical names it does not already contain.
        Only the canonical names (not every variant) are added: variants such as "value head" for
        critic would add common words that match unrelated questions."""
        found = self.find(text)
        norm = normalise(text)
        extra: list[str] = []
        for cid in found:
            names = normalise(self.concepts[cid].canonical).split(" / ")
            extra += [n for n in names if n not in norm]
        return Expansion(frozenset(found), " ; ".join(extra))
