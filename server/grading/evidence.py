"""Read a whole answer against one rubric: what each sentence asserts, which key points it evidences,
which wrong claims it makes, and the answer-level signals the calibrated score is fitted on.

Every sentence is read by the same rules (no budget, no alias-only tail). A key point is credited
for a statement, not for a term: one specific alias alone stays below the coverage line; an alias
plus the point's own content words, or two specific aliases, reach it. Denied, reported ("很多人以为"),
asked, hedged and "以下都是错的"-framed text earns nothing; a sentence that asserts a contradiction
or a misconception is a wrong claim."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache

from server.corpus.hygiene import GENERIC_TERMS, weak_aliases
from server.corpus.schema import KeyPoint, Misconception, QuestionEntry
from server.grading.claims import (
    _CLAUSE_BREAK,
    _CONTRAST,
    _HEDGE,
    _NEGATION,
    _REPORT,
    NEGATION_REACH_CJK,
    NEGATION_REACH_LATIN,
    Match,
    Stance,
    denies_following,
    denies_preceding,
    find_phrases,
    has_negation,
    is_question,
    phrase_pattern,
    subject_words,
)
from server.grading.injection import code_has_injection, is_injection
from server.grading.normalize import normal_form
from server.grading.roles import MisconceptionParaphrase, MisconceptionRestatement, RoleMap
from server.grading.segments import Segment, split_segments
from server.retrieval.tokenize import tokenize

ALIAS_CREDIT = 0.4  # one specific alias: named, not yet stated
WEAK_ALIAS_CREDIT = 0.1
OVERLAP_CREDIT = 0.7  # share of the point's own content words, in an asserted clause
HEDGE_FACTOR = 0.4
SALAD_FACTOR = 0.2
POINT_CHARS = 30
CONTRADICTED_CREDIT = 0.3  # below the coverage line: the answer says this point wrongly
MISCONCEPTION_POINT_OVERLAP = 0.12  # least word overlap for a misconception to belong to a point
NEGATION_BACK_REACH = 6  # characters before a negation cue that belong to the denied claim
_CONTENT = re.compile(r"[a-z0-9\u4e00-\u9fff]")
_PIECE_SPLIT = re.compile(r"[、;；/|·・]+")
_SPACED = re.compile(r"\s+")
_CJK = re.compile(r"[\u4e00-\u9fff]")
_RELATION = re.compile(r"[=:：→<>≈≤≥]|->|即|是|用|取|为|让|使|\bis\b|\bare\b|\buses?\b")
# Verbs and function words that make a string of terms a statement ("对同一个 prompt 采样一组回答",
# "baseline 取组内均值"): a sentence holding one is not a keyword list.
_VERB = re.compile(
    r"采样|计算|得到|估计|替代|代替|取|减去|除以|乘以|加上|更新|约束|限制|惩罚|衡量|对应|依赖|需要|"
    r"\b(the|an?|for|per|each|from|into|over|under|than|samples?|computes?|estimates?|replaces?|"
    r"subtracts?|divides?|adds?|needs?|penali[sz]es?|measures?|depends?)\b"
)
_MATH = re.compile(r"[=∝≈≤≥<>→∑∇]|->|\d\s*[-+*/^]\s*\d")
_GLUE = re.compile(
    r"是|的|了|在|把|被|会|让|使|就|因为|所以|如果|导致|表示|意味|等于|通过|用来|用于|作为|来|而|则|即|时|"
    r"\b(is|are|was|be|because|so|means|if|when|then|which|that|makes|gives|keeps|uses?|by|to|of|with)\b"
)
_FILLER = re.compile(
    r"非常重要|非常关键|非常核心|十分重要|至关重要|再强调|再说一遍|重复一下|总之就是|总而言之|众所周知|"
    r"毫无疑问|我想强调|it is very important|to reiterate|as i said|needless to say|let me repeat|"
    r"once again|it cannot be overstated|extremely important"
)


@dataclass
class SentenceReading:
    segment: Segment
    norm: str
    asserted_text: str  # the sentence with denied, reported and asked spans cut out
    hedged: bool
    salad: bool
    injection: bool
    repeated: bool
    framed_wrong: bool  # under "以下说法都是错的" or before "以上都是错的"


@dataclass
class PointReading:
    point: KeyPoint
    credit: float = 0.0
    evidence: str | None = None
    contradicted_by: str | None = None  # id of the wrong claim that contradicts it
    denied: bool = False  # its aliases appear only where the answer denies them


@dataclass
class WrongClaim:
    id: str
    text: str
    correction: str
    evidence: str
    text_en: str = ""
    correction_en: str = ""


@dataclass
class AnswerReading:
    sentences: list[SentenceReading]
    points: list[PointReading]
    wrong: list[WrongClaim]
    signals: dict[str, float] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    clean_signals: dict[str, float] = field(default_factory=dict)  # as if no wrong claim were made


@lru_cache(maxsize=8192)
def _content_words(text: str) -> frozenset[str]:
    return frozenset(
        t for t in tokenize(normal_form(text)) if t not in GENERIC_TERMS and _CONTENT.search(t)
    )


def _denied_spans(text: str) -> list[tuple[int, int]]:
    """Spans a negation cue denies and spans a report cue marks as someone else's belief.

    A negation denies the proposition around it, not only what follows: in "β 大不会更保守" the
    subject "β 大" is part of the denied claim. The span runs from a few characters before the cue
    (within its clause) to a contrast ("而是", "but"), the clause end or the cue's reach."""
    spans = []
    for cue in _NEGATION.finditer(text):
        clause_start = 0
        for b in _CLAUSE_BREAK.finditer(text, 0, cue.start()):
            clause_start = b.end()
        start = max(clause_start, cue.start() - NEGATION_BACK_REACH)
        while start > clause_start and text[start - 1].isascii() and text[start - 1].isalnum():
            start -= 1  # do not split a Latin word
        clause_end = _CLAUSE_BREAK.search(text, cue.end())
        end = clause_end.start() if clause_end else len(text)
        contrast = _CONTRAST.search(text, cue.end(), end)
        if contrast:
            end = contrast.start()
        reach = NEGATION_REACH_LATIN if text[cue.end() : end].isascii() else NEGATION_REACH_CJK
        stop = min(end, cue.end() + reach)
        while stop < end and text[stop].isascii() and text[stop].isalnum():
            stop += 1
        spans.append((start, stop))
    for cue in _REPORT.finditer(text):
        contrast = _CONTRAST.search(text, cue.end())
        spans.append((cue.start(), contrast.start() if contrast else len(text)))
    return spans


def _cut(text: str, spans: list[tuple[int, int]]) -> str:
    if not spans:
        return text
    keep = [True] * len(text)
    for a, b in spans:
        for i in range(a, min(b, len(text))):
            keep[i] = False
    # A cut leaves a separator so words on either side are not glued into a new term.
    return "".join(c if k else "|" for c, k in zip(text, keep, strict=True))


def _term_chars(text: str, terms: tuple[str, ...]) -> int:
    covered = [False] * len(text)
    for term in terms:
        pattern = phrase_pattern(term, False)
        if pattern is None:
            continue
        for m in pattern.finditer(text):
            for i in range(m.start(), m.end()):
                covered[i] = True
    return sum(1 for c, k in zip(text, covered, strict=True) if k and _CONTENT.match(c))


_JOIN = re.compile(r"^[\s、,，/·&+]*(与|和|及|以及|或|或者|and|or)?[\s、,，/·&+]*$")


def listed_share(norm: str, terms: tuple[str, ...]) -> float:
    """Share of rubric-term occurrences that stand in a list (joined only by 、 / 和 / and / commas)
    to another term: alias dumps and keyword salads list terms, explanations relate them."""
    spans = sorted(
        (m.start(), m.end())
        for t in terms
        if (pattern := phrase_pattern(t, False)) is not None
        for m in pattern.finditer(norm)
    )
    merged: list[tuple[int, int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
        else:
            merged.append((a, b))
    if len(merged) < 3:
        return 0.0
    listed: set[int] = set()
    for i in range(len(merged) - 1):
        gap = norm[merged[i][1] : merged[i + 1][0]]
        if len(gap) <= 4 and _JOIN.match(gap):
            listed |= {i, i + 1}
    return len(listed) / len(merged)


def _is_salad(norm: str, terms: tuple[str, ...], rubric_terms: tuple[str, ...]) -> bool:
    """Terms strung together without a statement, whatever separates them (、 · spaces, nothing)."""
    content = len(_CONTENT.findall(norm))
    if content < 4 or _MATH.search(norm):
        return False  # a formula is a statement
    glue = len(_GLUE.findall(norm)) + len(_VERB.findall(norm))
    density = _term_chars(norm, terms) / content
    rubric_density = _term_chars(norm, rubric_terms) / content
    if (
        (glue == 0 and density >= 0.75)
        or (glue <= 1 and density >= 0.9)
        or (glue == 0 and content >= 12 and max(density, rubric_density) >= 0.5)
    ):
        return True
    pieces = [p for p in _PIECE_SPLIT.split(norm) if _CONTENT.search(p)]
    spaced = False
    if len(pieces) < 5 and not re.search(r"[,，。:：]", norm):
        pieces = [p for p in _SPACED.split(norm) if _CONTENT.search(p)]
        spaced = True
    if len(pieces) >= 5:
        # 、 · / list terms whatever they are; spaces separate words too, so a space-separated
        # piece is bare only when it is itself a term ("对同一个 prompt 采样一组" is a statement).
        bare = sum(
            1
            for p in pieces
            if len(_CONTENT.findall(p)) <= 8
            and not _GLUE.search(p)
            and not _VERB.search(p)
            and not re.search(r"[=<>]", p)
            and (not spaced or _term_chars(p, terms) >= 0.6 * len(_CONTENT.findall(p)))
        )
        return bare / len(pieces) >= 0.7
    return False


def _clause_span(norm: str, match: Match) -> tuple[int, int]:
    """The clause that makes a wrong claim: from the clause break before the match to the one
    after it (a wrong clause is cut out; the sentence's other clauses still count)."""
    start = 0
    for b in _CLAUSE_BREAK.finditer(norm, 0, match.start):
        start = b.end()
    after = _CLAUSE_BREAK.search(norm, match.end)
    return start, after.start() if after else len(norm)


def _point_of_misconception(m: Misconception, points: list[KeyPoint]) -> str | None:
    """The key point a misconception gets wrong: the one whose words it shares most."""
    words = _content_words(" ".join([m.text, m.text_en, *m.aliases]))
    best, best_score = None, 0.0
    for kp in points:
        kp_words = _content_words(" ".join([kp.text, kp.text_en, *kp.aliases, *kp.contradictions]))
        if not words or not kp_words:
            continue
        score = len(words & kp_words) / min(len(words), len(kp_words))
        if score > best_score:
            best, best_score = kp.id, score
    return best if best_score >= MISCONCEPTION_POINT_OVERLAP else None


class AnswerReader:
    """Reads answers against one entry's rubric; the rubric's patterns are compiled once."""

    def __init__(self, entry: QuestionEntry) -> None:
        assert entry.rubric is not None
        self.entry = entry
        rubric = entry.rubric
        self.points = rubric.key_points
        # Per point, each alias's pattern, whether it carries its own negation, and whether it is
        # weak (cannot cover the point alone): compiled once per entry, not per sentence.
        self.alias_checks: dict[str, list[tuple[re.Pattern[str], bool, bool]]] = {}
        for kp in rubric.key_points:
            weak = weak_aliases(entry, kp)
            self.alias_checks[kp.id] = [
                (pattern, has_negation(normal_form(alias)), alias in weak)
                for alias in kp.aliases
                if (pattern := phrase_pattern(alias, False)) is not None
            ]
        self.point_words = {
            kp.id: (_content_words(kp.text), _content_words(kp.text_en)) for kp in rubric.key_points
        }
        # What each wrong-claim phrase is about (a short phrase fires only where it is named).
        self.subjects = {kp.id: subject_words((kp.text, kp.text_en)) for kp in rubric.key_points}
        true_texts: list[tuple[str | None, str]] = []
        for kp in rubric.key_points:
            true_texts += [(kp.id, kp.text), (kp.id, kp.text_en)]
        true_texts += [(None, rubric.reference_answer), (None, rubric.reference_answer_en or "")]
        true_texts += [(None, m.correction) for m in rubric.misconceptions]
        self.roles = RoleMap([t for t in true_texts if t[1]])
        self.misconception_point = {
            m.id: _point_of_misconception(m, rubric.key_points) for m in rubric.misconceptions
        }
        own_true = [t for _, t in true_texts if t]
        self.paraphrases = {
            m.id: MisconceptionParaphrase(
                (m.text, m.text_en),
                tuple(
                    t
                    for kp in rubric.key_points
                    if kp.id == self.misconception_point[m.id]
                    for t in (kp.text, kp.text_en)
                ),
                own_true,
            )
            for m in rubric.misconceptions
            if self.misconception_point[m.id] is not None
        }
        self.restatements = {
            m.id: MisconceptionRestatement((m.text, m.text_en), own_true)
            for m in rubric.misconceptions
        }
        self.subjects |= {m.id: subject_words((m.text, m.text_en)) for m in rubric.misconceptions}
        terms = [a for kp in rubric.key_points for a in kp.aliases]
        terms += [a for m in rubric.misconceptions for a in m.aliases]
        self.list_terms = tuple(dict.fromkeys(terms))
        terms += sorted(GENERIC_TERMS)
        self.terms = tuple(dict.fromkeys(terms))
        vocabulary = [entry.text, entry.text_en, rubric.reference_answer]
        vocabulary += [s.text for s in entry.subquestions]
        vocabulary += [kp.text for kp in rubric.key_points] + [
            kp.text_en for kp in rubric.key_points
        ]
        vocabulary += terms
        self.vocabulary = frozenset(w for v in vocabulary for w in _content_words(v))

    # -- sentences -------------------------------------------------------------------------------
    def _sentences(self, answer: str) -> list[SentenceReading]:
        segments = split_segments(answer)
        norms = [normal_form(s.text) for s in segments]
        deny_from = next((i for i, n in enumerate(norms) if denies_following(n)), None)
        deny_to = max((i for i, n in enumerate(norms) if denies_preceding(n)), default=None)
        readings = []
        seen: list[frozenset[str]] = []
        for i, (seg, norm) in enumerate(zip(segments, norms, strict=True)):
            framed = (deny_from is not None and i > deny_from) or (
                deny_to is not None and i < deny_to
            )
            injection = code_has_injection(norm) if seg.code else is_injection(norm)
            if seg.code or framed or injection:
                asserted = "" if (framed or injection) else norm
            elif is_question(norm):
                asserted = ""
            else:
                asserted = _cut(norm, _denied_spans(norm))
            words = _content_words(norm)
            repeated = len(words) >= 4 and any(
                len(words & w) / len(words | w) >= 0.75 for w in seen
            )
            seen.append(words)
            readings.append(
                SentenceReading(
                    segment=seg,
                    norm=norm,
                    asserted_text=asserted,
                    hedged=bool(_HEDGE.search(norm)) and not seg.code,
                    salad=not seg.code and _is_salad(norm, self.terms, self.list_terms),
                    injection=injection,
                    repeated=repeated,
                    framed_wrong=framed,
                )
            )
        return readings

    # -- key points ------------------------------------------------------------------------------
    def _credit(self, kp: KeyPoint, s: SentenceReading) -> tuple[float, bool]:
        """Credit of one sentence for one point, and whether the point's aliases sit in a span
        the sentence denies."""
        text = s.asserted_text
        strong_hits = weak_hits = 0
        denied = False
        for pattern, negates_itself, weak in self.alias_checks[kp.id]:
            source = s.norm if negates_itself and not s.framed_wrong and not s.injection else text
            if pattern.search(source):
                if weak:
                    weak_hits += 1
                else:
                    strong_hits += 1
            elif not weak and pattern.search(s.norm):
                denied = True
        if not text and not strong_hits:
            return 0.0, denied
        words = set(tokenize(text)) if text else set()
        zh, en = self.point_words[kp.id]
        overlap = max(
            len(zh & words) / len(zh) if zh else 0.0, len(en & words) / len(en) if en else 0.0
        )
        credit = (
            ALIAS_CREDIT * min(strong_hits, 2)
            + WEAK_ALIAS_CREDIT * min(weak_hits, 2)
            + OVERLAP_CREDIT * overlap
        )
        if not strong_hits and overlap < 0.5:
            credit = min(credit, 0.45)  # weak terms alone never cover a point
        if s.hedged:
            credit *= HEDGE_FACTOR
        if s.salad:
            credit *= SALAD_FACTOR
        if s.repeated:
            credit *= 0.5
        return min(1.0, credit), denied

    def _wrong_claims(
        self, sentences: list[SentenceReading]
    ) -> tuple[list[WrongClaim], dict[int, list[tuple[int, int]]], dict[str, str]]:
        """Every wrong claim, the spans (per sentence, in its normal form) of the clauses that make
        them, and the key point each one contradicts (point id → wrong-claim id)."""
        rubric = self.entry.rubric
        assert rubric is not None
        wrong: list[WrongClaim] = []
        spans: dict[int, list[tuple[int, int]]] = {}
        contradicted: dict[str, str] = {}
        for i, s in enumerate(sentences):
            if s.injection or s.framed_wrong or s.salad:
                continue
            for kp in self.points:
                if not kp.contradictions or kp.id in contradicted:
                    continue
                hits = [
                    m
                    for m in find_phrases(s.norm, kp.contradictions, True, self.subjects[kp.id])
                    if m.stance in (Stance.asserted, Stance.hedged)
                ]
                if hits:
                    claim_id = f"contradicts:{kp.id}"
                    contradicted[kp.id] = claim_id
                    wrong.append(
                        WrongClaim(
                            claim_id,
                            hits[0].phrase,
                            kp.text,
                            s.segment.text,
                            correction_en=kp.text_en,
                        )
                    )
                    spans.setdefault(i, []).append(_clause_span(s.norm, hits[0]))
            for claim in self.roles.swapped(s.norm):
                claim_id = f"swapped:{claim.point or claim.pair}"
                if any(w.id == claim_id for w in wrong):
                    continue
                said_of = next((kp for kp in self.points if kp.id == claim.point), None)
                wrong.append(
                    WrongClaim(
                        claim_id,
                        claim.describe(),
                        said_of.text if said_of else rubric.reference_answer,
                        s.segment.text,
                        correction_en=(
                            said_of.text_en if said_of else (rubric.reference_answer_en or "")
                        ),
                    )
                )
                at = max(0, s.norm.find(claim.clause))
                spans.setdefault(i, []).append((at, at + len(claim.clause)))
                if claim.point is not None:
                    contradicted.setdefault(claim.point, claim_id)
            for m in rubric.misconceptions:
                if any(w.id == m.id for w in wrong):
                    continue
                hits = [
                    x
                    for x in find_phrases(s.norm, m.aliases, True, self.subjects[m.id])
                    if x.stance in (Stance.asserted, Stance.hedged)
                ]
                if hits:
                    span = _clause_span(s.norm, hits[0])
                elif (p := self.paraphrases.get(m.id)) is not None and (
                    clause := p.fires(s.asserted_text)
                ):
                    at = max(0, s.asserted_text.find(clause))  # said in other words
                    span = (at, at + len(clause))
                elif clause := self.restatements[m.id].fires(s.asserted_text):
                    at = max(0, s.asserted_text.find(clause.split(" ")[0]))  # nearly its words
                    span = (at, at + len(clause))
                else:
                    continue
                wrong.append(
                    WrongClaim(
                        m.id, m.text, m.correction, s.segment.text, m.text_en, m.correction_en or ""
                    )
                )
                spans.setdefault(i, []).append(span)
                point = self.misconception_point.get(m.id)
                if point is not None:
                    contradicted.setdefault(point, m.id)
        return wrong, spans, contradicted

    def _points(
        self,
        sentences: list[SentenceReading],
        cut: dict[int, list[tuple[int, int]]],
        contradicted: dict[str, str],
    ) -> tuple[list[PointReading], dict[str, bool]]:
        """Credit per point from every sentence; the clauses in `cut` (wrong claims) evidence
        nothing, and a contradicted point stays below the coverage line. Everything else the
        answer states keeps its credit: a wrong clause costs its own point, not its neighbours'."""
        points = [PointReading(kp) for kp in self.points]
        denied_any = {kp.id: False for kp in self.points}
        for i, s in enumerate(sentences):
            wrong_cut = replace(s, asserted_text=_cut(s.asserted_text, cut[i])) if i in cut else s
            sentence_credits = []
            for p in points:
                credit, denied = self._credit(p.point, wrong_cut)
                if wrong_cut is not s:
                    denied = self._credit(p.point, s)[1]  # a wrong clause is not a denial
                denied_any[p.point.id] |= denied
                sentence_credits.append(credit)
            # One sentence states about one point per POINT_CHARS characters: a sentence that
            # "covers" many more is naming terms, not explaining them.
            budget = 1 + len(_CONTENT.findall(s.norm)) / POINT_CHARS
            named = sum(c >= 0.5 for c in sentence_credits)
            scale = min(1.0, budget / named) if named else 1.0
            for p, credit in zip(points, sentence_credits, strict=True):
                if credit * scale > p.credit:
                    p.credit, p.evidence = credit * scale, s.segment.text
        for p in points:
            if p.point.id in contradicted:
                p.credit = min(p.credit, CONTRADICTED_CREDIT)
                p.contradicted_by = contradicted[p.point.id]
            p.denied = denied_any[p.point.id] and p.credit < 0.3
        return points, denied_any

    def read(self, answer: str) -> AnswerReading:
        sentences = self._sentences(answer)
        wrong, spans, contradicted = self._wrong_claims(sentences)
        points, _ = self._points(sentences, spans, contradicted)
        reading = AnswerReading(sentences, points, wrong)
        reading.signals, reading.flags = self._signals(answer, reading)
        # One wrong statement may match a contradiction and a misconception at once, in one
        # clause or two: the bounded loss counts the sentences that make wrong claims.
        reading.signals["wrong_clauses"] = float(len(spans))
        if wrong:
            # The same answer read as if its wrong claims were absent: the score may lose at
            # most a bounded amount against it (`rubric_grader`), whatever the fit says.
            clean_points, _ = self._points(sentences, {}, {})
            clean = AnswerReading(sentences, clean_points, [])
            reading.clean_signals, _ = self._signals(answer, clean)
        else:
            reading.clean_signals = dict(reading.signals)
        return reading

    # -- answer-level signals --------------------------------------------------------------------
    def _signals(self, answer: str, r: AnswerReading) -> tuple[dict[str, float], list[str]]:
        weights = sum(p.point.weight for p in r.points) or 1.0
        chars = [max(1, len(_CONTENT.findall(s.norm))) for s in r.sentences]
        total = sum(chars) or 1

        def share(pred) -> float:
            return sum(c for c, s in zip(chars, r.sentences, strict=True) if pred(s)) / total

        words = [w for s in r.sentences for w in tokenize(s.norm)]
        relevance = sum(w in self.vocabulary for w in words) / len(words) if words else 0.0
        # A short line that relates nothing ("标准差", "广播") is a fragment; a terse one that does
        # ("baseline = 组内均值", "clip：限制 ratio") is a statement written tersely.
        fragments = sum(
            1
            for c, s in zip(chars, r.sentences, strict=True)
            if c <= 6 and not _RELATION.search(s.norm)
        )
        prose = " 。 ".join(s.norm for s in r.sentences if not s.segment.code)
        signals = {
            "coverage": sum(p.point.weight * p.credit for p in r.points) / weights,
            "covered_share": sum(p.point.weight for p in r.points if p.credit >= 0.5) / weights,
            "wrong_claims": float(len(r.wrong)),
            "denied_share": sum(p.point.weight for p in r.points if p.denied) / weights,
            "salad_share": max(
                share(lambda s: s.salad),
                fragments / len(chars) if len(chars) >= 4 else 0.0,
            ),
            "repetition_share": share(lambda s: s.repeated),
            "hedge_share": share(lambda s: s.hedged),
            "framed_share": share(lambda s: s.framed_wrong),
            "question_share": share(lambda s: is_question(s.norm)),
            "injection": float(any(s.injection for s in r.sentences)),
            "relevance": relevance,
            "fillers": float(len(_FILLER.findall(normal_form(answer)))),
            "listed_share": listed_share(prose, self.list_terms),
            "length": float(total),
        }
        flags = []
        if signals["injection"]:
            flags.append("injection")
        if signals["salad_share"] >= 0.5:
            flags.append("keyword_list")
        if signals["repetition_share"] >= 0.3 or signals["fillers"] >= 3:
            flags.append("repetition")
        if signals["relevance"] < 0.25 and signals["coverage"] < 0.1:
            flags.append("off_topic")
        if signals["hedge_share"] >= 0.3:
            flags.append("hedged")
        if signals["framed_share"] >= 0.5 or signals["denied_share"] >= 0.5:
            flags.append("denied")
        return signals, flags
