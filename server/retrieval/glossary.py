"""The bilingual RL glossary (corpus/glossary.yaml): which concepts a text names, and query expansion."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from server.retrieval.tokenize import normalise
from server.yaml_files import read_yaml

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
        owners: dict[str, str] = {}
        for c in concepts:
            for f in c.forms:
                if owners.setdefault(f, c.id) != c.id:
                    # Which concept a shared form named depended on a set's order, i.e. on the
                    # process's hash seed: search ranked differently from one start to the next.
                    raise ValueError(f"glossary form {f!r} names both {owners[f]!r} and {c.id!r}")
        # Longest forms first, so 重要性采样 wins over 采样 and "ppo-clip" over "ppo".
        forms = sorted(owners.items(), key=lambda fc: (-len(fc[0]), fc[0]))
        # The form's first word must occur literally (only spaces between words are flexible):
        # a substring test skips almost every pattern before any regex runs.
        self._patterns = [(self._pattern(f), f.split(" ")[0], f, cid) for f, cid in forms]

    @staticmethod
    def _pattern(form: str) -> re.Pattern[str]:
        body = re.escape(form).replace(r"\ ", r"[\s_-]?")
        # Latin edges must not run into other Latin letters/digits ("rl" is not inside "url").
        left = r"(?<![a-z0-9])" if _LATIN.match(form[0]) else ""
        right = r"(?![a-z0-9])" if _LATIN.match(form[-1]) else ""
        return re.compile(left + body + right)

    @classmethod
    def load(cls, path: Path) -> Glossary:
        rows = read_yaml(path) or []
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
        for pattern, head, form, cid in self._patterns:
            if head not in norm:
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

    def annotate_v3(self, text: str, bank_zh: dict[str, str]) -> str:
        """`annotate`, and also the bank's own Chinese word after each Latin term of a specific
        concept ("GRPO 为什么不需要 critic" -> "... critic (价值模型)"): a Latin term inside a
        Chinese question then reaches the Chinese entries that name the concept another way."""
        norm = normalise(text)
        base = text if len(norm) == len(text) else norm
        out, last = [], 0
        for _, end, form, cid in self._matches(norm):
            concept = self.concepts[cid]
            if concept.generic:
                continue
            if _LATIN.search(form):
                extra = bank_zh.get(cid, "")
                if not extra or extra in norm:
                    continue
            elif concept.english:
                extra = concept.english
            else:
                continue
            out += [base[last:end], f" ({extra})"]
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


# ---- the rule that a synonym group never merges two things the bank sets against each other ----

# Between two terms: words that set them against each other ("A 而不是 B", "A vs B", "not A but B").
_AGAINST = re.compile(
    r"而不是|而非|不是|不同于|区别于|相比|相对于|对比|还是|混淆|混为|≠|!=|\bvs\b\.?|\bversus\b|"
    r"\brather than\b|\binstead of\b|\bas opposed to\b|\bunlike\b|\bnot\b|\bconfus"
)
# "A 和 B 的区别": a conjunction between them and a word of difference right after the second.
_JOIN = re.compile(r"^\s*(?:和|与|跟|、|/|及|\band\b|\bor\b|&)\s*$")
_DIFFERENCE = re.compile(r"区别|不同|差异|异同|分不清|\bdiffer|\bdistinct|\bcontrast|\bconfus")
_AGAINST_OR_EQUAL = re.compile(
    _AGAINST.pattern + r"|就是|即是|等于|等同|相同|一样|一回事|\bis\b|\bequals?\b|\bsame\b"
)


@dataclass(frozen=True)
class Conflict:
    concept: str
    forms: tuple[str, str]
    where: str  # entry id (and the text kind) or the contrast edge


def contrasted_forms(
    glossary: Glossary, text: str, equates: bool = False
) -> list[tuple[str, str, str]]:
    """(concept, form, other form) for two different forms of one concept that the text sets
    against each other within a few words (only generic terms between them): the synonym group
    would merge what the text contrasts. With `equates` (a misconception: a wrong statement the
    bank corrects), "A 就是 B" / "A is B" counts too, since the bank says they differ."""
    norm = normalise(text)
    found = glossary._matches(norm)
    cue = _AGAINST_OR_EQUAL if equates else _AGAINST
    out = []
    for i, (_, end1, form1, cid) in enumerate(found):
        if glossary.concepts[cid].generic:
            continue
        for start2, end2, form2, cid2 in found[i + 1 :]:
            if start2 - end1 > 24:
                break
            if cid2 != cid:
                if glossary.concepts[cid2].generic:
                    continue
                break  # another specific term in between: these two are not set side by side
            if form2 == form1:
                break
            gap = norm[end1:start2]
            if cue.search(gap) or (_JOIN.match(gap) and _DIFFERENCE.search(norm[end2 : end2 + 12])):
                out.append((cid, form1, form2))
            break
    return out


def contrast_conflicts(glossary: Glossary, entries) -> list[Conflict]:
    """Where a glossary group merges two concepts the bank contrasts:
    - a bank text (question, part, key point, misconception) sets two forms of one group against
      each other ("梯度裁剪而不是 PPO 的 clip", "KL penalty vs KL loss");
    - the two entries of a `contrast` edge name a specific concept only in forms the other entry
      never uses anywhere (question, parts or rubric): each side has its own word for its side.
    Generic groups (kinds of question, basic notions) are exempt from the second check."""
    by_id = {e.id: e for e in entries}
    conflicts: list[Conflict] = []
    for e in entries:
        texts = [("question", t) for t in (e.topic, e.text, e.text_en)]
        texts += [("part", t) for sq in e.subquestions for t in (sq.text, sq.text_en)]
        if e.rubric is not None:
            texts += [("key point", t) for kp in e.rubric.key_points for t in (kp.text, kp.text_en)]
            texts += [("correction", m.correction) for m in e.rubric.misconceptions]
            texts += [
                ("misconception", t)
                for m in e.rubric.misconceptions
                for t in (m.text, m.text_en, *m.aliases)
            ]
        for kind, text in texts:
            for cid, a, b in contrasted_forms(glossary, text, equates=kind == "misconception"):
                conflicts.append(Conflict(cid, (a, b), f"{e.id} ({kind})"))

    def question_forms(e) -> dict[str, set[str]]:
        parts = [e.topic, e.text, e.text_en] + [f"{s.text}\n{s.text_en}" for s in e.subquestions]
        return {c: set(f) for c, f in glossary.find("\n".join(parts)).items()}

    seen: set[tuple[str, str]] = set()
    for a in entries:
        for edge in a.related:
            b = by_id.get(edge.id)
            if edge.relation.value != "contrast" or b is None:
                continue
            if (b.id, a.id) in seen:
                continue
            seen.add((a.id, b.id))
            fa, fb = question_forms(a), question_forms(b)
            all_a, all_b = glossary.find(_entry_text(a)), glossary.find(_entry_text(b))
            for cid in set(fa) & set(fb):
                if glossary.concepts[cid].generic:
                    continue
                if set(all_a.get(cid, ())) & fb[cid] or set(all_b.get(cid, ())) & fa[cid]:
                    continue  # the two entries share a word for it: synonyms, not two sides
                pair = (min(fa[cid]), min(fb[cid]))
                conflicts.append(Conflict(cid, pair, f"contrast edge {a.id} <-> {b.id}"))
    return conflicts


def _entry_text(e) -> str:
    parts = [e.topic, e.text, e.text_en] + [f"{s.text}\n{s.text_en}" for s in e.subquestions]
    if e.rubric is not None:
        parts += [e.rubric.reference_answer, e.rubric.reference_answer_en or ""]
        parts += [f"{k.text}\n{k.text_en}\n{' '.join(k.aliases)}" for k in e.rubric.key_points]
        parts += [f"{m.text}\n{m.text_en}\n{m.correction}" for m in e.rubric.misconceptions]
    return "\n".join(parts)
