"""The offline rubric grader: key-point coverage from aliases and embedding similarity, minus
misconception penalties, hardened against padding, keyword salad, injections and off-topic answers."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from server.corpus.schema import QuestionEntry
from server.grading.feedback import write_feedback
from server.grading.models import Grade, KeyPointResult, MisconceptionHit
from server.grading.scoring import COVERED_AT, score_from
from server.grading.segments import Segment, merge_for_embedding, split_segments
from server.grading.signals import (
    affirmed_aliases,
    count_filler_phrases,
    find_aliases,
    is_injection,
    is_keyword_list,
    is_negated,
    repeated_clauses,
    token_overlap,
)
from server.retrieval.embedder import Embedder

# Cosine ramps (similarity at which semantic credit starts, and where it is full), per embedder.
# Calibrated on tests/eval/grading.jsonl; see docs/grading.md.
SEMANTIC_RAMPS: dict[str, tuple[float, float]] = {
    "e5-small-q4": (0.895, 0.96),
    "use-m3": (0.55, 0.80),
}
DEFAULT_RAMP = (0.55, 0.80)
# A wrong statement is recognised by meaning only when it is much closer to the misconception than to
# any key point (otherwise aliases decide): embeddings put "X is not Y" next to "X is Y".
MISCONCEPTION_SIMILARITY = {"e5-small-q4": 0.93, "use-m3": 0.8}
MISCONCEPTION_MARGIN = 0.02
MISCONCEPTION_OVERLAP = 0.4  # and it must share words with the wrong statement, not just the topic
KEYWORD_LIST_CREDIT = 0.25
FILLER_SHARE = 0.4
PADDING_SHARE = 0.4  # share of sentences that add no new key-point evidence
# Two sentences of one answer say the same thing when they are this close in meaning AND share most
# of their words: e5 puts any two sentences on one topic at 0.93–0.95, so meaning alone over-fires.
NEAR_DUPLICATE = 0.93
NEAR_DUPLICATE_OVERLAP = 0.5
# Off-topic: the question is not among the answer's nearest questions, and nothing ties the answer to
# it: no sentence is close to a key point, or not one rubric term is used (a neighbouring question's
# answer can be close in meaning to a point without ever naming it).
OFF_TOPIC_RANK = 10
OFF_TOPIC_SIMILARITY = {"e5-small-q4": 0.925, "use-m3": 0.6}
# The e5 model costs about 1.3 ms per token on two cores, so an answer embeds at most this many
# (estimated) tokens; later segments are judged by their aliases alone.
EMBED_TOKEN_BUDGET = 130
_CJK = re.compile(r"[\u3000-\u9fff\uff00-\uffef]")


class RubricVectors:
    """Embeddings of rubric texts, computed once per text and reused (a cache, not session state)."""

    def __init__(self, embedder: Embedder, relevance: RelevanceRank | None = None) -> None:
        self._embedder = embedder
        self._relevance = relevance
        self._cache: dict[str, np.ndarray] = {}

    def vectors(self, texts: list[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            for text, vec in zip(missing, self._embedder.embed_queries(missing), strict=True):
                self._cache[text] = vec
        return np.stack([self._cache[t] for t in texts])


@dataclass
class _SegmentInfo:
    segment: Segment
    keyword_list: bool
    misconception: str | None = None


class RelevanceRank(Protocol):
    def __call__(self, entry_id: str, text: str, vector: np.ndarray) -> int | None: ...


class RubricGrader:
    name = "rubric"

    def __init__(self, embedder: Embedder, relevance: RelevanceRank | None = None) -> None:
        self._embedder = embedder
        self._relevance = relevance
        self._rubric_vectors = RubricVectors(embedder)
        self._ramp = SEMANTIC_RAMPS.get(embedder.name, DEFAULT_RAMP)
        self._misconception_sim = MISCONCEPTION_SIMILARITY.get(embedder.name, 0.85)
        self._off_topic_sim = OFF_TOPIC_SIMILARITY.get(embedder.name, 0.6)

    def grade(self, entry: QuestionEntry, answer: str, language: str = "zh") -> Grade:
        rubric = entry.rubric
        if rubric is None:
            raise ValueError(f"entry {entry.id} has no rubric")
        flags: list[str] = []
        if not answer.strip():
            return self.zero(entry, ["empty"], language)

        raw_segments = split_segments(answer)
        seen: set[str] = set()
        unique: list[Segment] = []
        for seg in raw_segments:
            if seg.key in seen:
                continue
            seen.add(seg.key)
            unique.append(seg)
        duplicates = len(raw_segments) - len(unique)
        if (raw_segments and duplicates / len(raw_segments) >= 0.3) or repeated_clauses(
            answer
        ) >= 2:
            flags.append("repetition")

        content: list[Segment] = []
        for seg in unique:
            if is_injection(seg.text):
                if "injection" not in flags:
                    flags.append("injection")
                continue
            content.append(seg)
        content = merge_for_embedding(answer, content)
        if not content:
            return self.zero(entry, flags or ["empty"], language)

        infos = [_SegmentInfo(s, not s.code and is_keyword_list(s.text)) for s in content]
        if sum(i.keyword_list for i in infos) / len(infos) >= 0.5:
            flags.append("keyword_list")

        seg_vecs = self._embed_within_budget([s.text for s in content])
        # A sentence that restates an earlier one (same meaning, no new terms) earns nothing more.
        alias_hits = [
            {kp.id for kp in rubric.key_points if find_aliases(seg.text, kp.aliases)}
            for seg in content
        ]
        keep = [
            i
            for i in range(len(content))
            if not any(
                _same_statement(content[i].text, content[j].text, seg_vecs[i], seg_vecs[j])
                and alias_hits[i] <= alias_hits[j]
                for j in range(i)
            )
        ]
        if len(keep) < len(content):
            if (len(content) - len(keep)) / len(content) >= 0.25 and "repetition" not in flags:
                flags.append("repetition")
            content = [content[i] for i in keep]
            infos = [infos[i] for i in keep]
            seg_vecs = seg_vecs[keep]
        kp_sims = self._similarities(seg_vecs, [(kp.text, kp.text_en) for kp in rubric.key_points])
        mc_sims = self._similarities(seg_vecs, [(m.text, m.text_en) for m in rubric.misconceptions])

        misconceptions = self._find_misconceptions(entry, infos, kp_sims, mc_sims)
        credit_matrix = self._credits(entry, infos, kp_sims)
        results = [
            self._result(kp, infos, credit_matrix[:, k]) for k, kp in enumerate(rubric.key_points)
        ]

        if self._off_topic(entry, answer, seg_vecs, kp_sims, any(alias_hits)):
            flags.append("off_topic")
        if "repetition" not in flags and (
            self._mostly_filler(infos, kp_sims, rubric)
            or self._padded(answer, [s.text for s in content], credit_matrix, seg_vecs)
        ):
            flags.append("repetition")
        score = score_from(results, len(misconceptions), flags)
        feedback = write_feedback(entry, results, misconceptions, flags, language)
        return Grade(
            score=score,
            grader=self.name,
            key_points=results,
            misconceptions=misconceptions,
            feedback=feedback,
            flags=flags,
            reference_answer=rubric.reference_answer,
        )

    def zero(self, entry: QuestionEntry, flags: list[str], language: str = "zh") -> Grade:
        """A zero grade for an empty, skipped or timed-out answer (no model is called)."""
        rubric = entry.rubric
        assert rubric is not None
        results = [
            KeyPointResult(
                id=kp.id, text=kp.text, text_en=kp.text_en, weight=kp.weight, covered=False
            )
            for kp in rubric.key_points
        ]
        return Grade(
            score=0.0,
            grader=self.name,
            key_points=results,
            misconceptions=[],
            feedback=write_feedback(entry, results, [], flags, language),
            flags=flags,
            reference_answer=rubric.reference_answer,
        )

    def _embed_within_budget(self, texts: list[str]) -> np.ndarray:
        """Embed segments in answer order up to EMBED_TOKEN_BUDGET estimated tokens. Later
        segments of a long answer keep zero vectors, so they match nothing by meaning."""
        vectors = np.zeros((len(texts), self._embedder.dim), dtype=np.float32)
        chosen: list[str] = []
        indices: list[int] = []
        used = 0.0
        for i, text in enumerate(texts):
            cost = estimated_tokens(text)
            if used + cost > EMBED_TOKEN_BUDGET:
                if i:
                    break
                # A single long first segment (a code block, a run-on sentence) is cut to fit.
                text = text[: int(len(text) * EMBED_TOKEN_BUDGET / cost)]
                cost = EMBED_TOKEN_BUDGET
            chosen.append(text)
            indices.append(i)
            used += cost
        if chosen:
            vectors[indices] = self._embedder.embed_queries(chosen)
        return vectors

    def _off_topic(
        self,
        entry: QuestionEntry,
        answer: str,
        seg_vecs: np.ndarray,
        kp_sims: np.ndarray,
        uses_rubric_terms: bool,
    ) -> bool:
        close_to_a_point = float(kp_sims.max()) >= self._off_topic_sim
        if self._relevance is None or (close_to_a_point and uses_rubric_terms):
            return False
        centroid = seg_vecs.mean(axis=0)
        centroid = centroid / max(float(np.linalg.norm(centroid)), 1e-12)
        rank = self._relevance(entry.id, answer, centroid)
        return rank is None or rank > OFF_TOPIC_RANK

    def _mostly_filler(self, infos: list[_SegmentInfo], kp_sims: np.ndarray, rubric) -> bool:
        """Padding: most sentences say nothing about any key point."""
        lo, _ = self._ramp
        aliases = [a for kp in rubric.key_points for a in kp.aliases]
        filler = sum(
            float(kp_sims[i].max()) < lo and not find_aliases(info.segment.text, aliases)
            for i, info in enumerate(infos)
        )
        return filler >= 3 and filler / len(infos) >= FILLER_SHARE

    def _similarities(self, seg_vecs: np.ndarray, pairs: list[tuple[str, str]]) -> np.ndarray:
        """[segments × items]: the best of each item's Chinese and English phrasing."""
        if not pairs:
            return np.zeros((len(seg_vecs), 0))
        zh = self._rubric_vectors.vectors([p[0] for p in pairs])
        en = self._rubric_vectors.vectors([p[1] for p in pairs])
        return np.maximum(seg_vecs @ zh.T, seg_vecs @ en.T)

    def _ramp_credit(self, sim: float) -> float:
        lo, hi = self._ramp
        return float(np.clip((sim - lo) / (hi - lo), 0.0, 1.0))

    def _find_misconceptions(
        self,
        entry: QuestionEntry,
        infos: list[_SegmentInfo],
        kp_sims: np.ndarray,
        mc_sims: np.ndarray,
    ) -> list[MisconceptionHit]:
        assert entry.rubric is not None
        hits: list[MisconceptionHit] = []
        for m_index, m in enumerate(entry.rubric.misconceptions):
            wrong_is_negative = is_negated(m.text)
            for s_index, info in enumerate(infos):
                # "X is not Y" denies the wrong statement "X is Y": an alias counts only in a clause
                # that asserts it, and a sentence states it by meaning only with the same polarity.
                negated = is_negated(info.segment.text)
                by_alias = bool(affirmed_aliases(info.segment.text, m.aliases))
                sim = float(mc_sims[s_index, m_index])
                best_kp = float(kp_sims[s_index].max()) if kp_sims.shape[1] else 0.0
                by_meaning = (
                    negated == wrong_is_negative
                    and sim >= self._misconception_sim
                    and sim >= best_kp + MISCONCEPTION_MARGIN
                    and token_overlap(info.segment.text, m.text) >= MISCONCEPTION_OVERLAP
                )
                if by_alias or by_meaning:
                    info.misconception = m.id
                    hits.append(
                        MisconceptionHit(
                            id=m.id,
                            text=m.text,
                            correction=m.correction,
                            evidence=info.segment.text,
                        )
                    )
                    break
        return hits

    def _credits(
        self, entry: QuestionEntry, infos: list[_SegmentInfo], kp_sims: np.ndarray
    ) -> np.ndarray:
        """[segments × key points]: how well each segment evidences each point, from 0 to 1."""
        assert entry.rubric is not None
        credit_matrix = np.zeros(kp_sims.shape)
        for s_index, info in enumerate(infos):
            if info.misconception is not None:
                continue  # a wrong statement is no evidence for a right one
            for k_index, kp in enumerate(entry.rubric.key_points):
                aliases = find_aliases(info.segment.text, kp.aliases)
                alias_credit = (1.0 if len(aliases) >= 2 else 0.75) if aliases else 0.0
                semantic = self._ramp_credit(float(kp_sims[s_index, k_index]))
                credit = min(1.0, max(alias_credit, semantic) + 0.3 * min(alias_credit, semantic))
                if info.keyword_list:
                    credit *= KEYWORD_LIST_CREDIT
                credit_matrix[s_index, k_index] = credit
        return credit_matrix

    @staticmethod
    def _result(kp, infos: list[_SegmentInfo], column: np.ndarray) -> KeyPointResult:
        best_index = int(np.argmax(column)) if len(column) else 0
        best = float(column[best_index]) if len(column) else 0.0
        return KeyPointResult(
            id=kp.id,
            text=kp.text,
            text_en=kp.text_en,
            weight=kp.weight,
            covered=best >= COVERED_AT,
            evidence=infos[best_index].segment.text if best >= COVERED_AT else None,
            confidence=round(best, 3),
        )

    @staticmethod
    def _padded(
        answer: str, texts: list[str], credit_matrix: np.ndarray, seg_vecs: np.ndarray
    ) -> bool:
        """Padding: most sentences add nothing new, and the answer restates itself or uses filler."""
        n = len(credit_matrix)
        if n < 4:
            return False
        best = np.zeros(credit_matrix.shape[1])
        redundant = near_duplicates = 0
        for i in range(n):
            if any(_same_statement(texts[i], texts[j], seg_vecs[i], seg_vecs[j]) for j in range(i)):
                near_duplicates += 1
                redundant += 1
            elif not (credit_matrix[i] > best + 0.2).any():
                redundant += 1
            best = np.maximum(best, credit_matrix[i])
        fillers = count_filler_phrases(answer)
        return redundant / n >= PADDING_SHARE and (near_duplicates >= 1 or fillers >= 2)


def estimated_tokens(text: str) -> float:
    """Tokens of a multilingual sentencepiece model, fitted on the grading set's segments (r=0.90):
    about 0.83 per CJK character, 0.33 per other character, plus the query prefix."""
    cjk = len(_CJK.findall(text))
    return 0.83 * cjk + 0.33 * (len(text) - cjk) + 5


def _same_statement(a: str, b: str, va: np.ndarray, vb: np.ndarray) -> bool:
    return float(va @ vb) >= NEAR_DUPLICATE and token_overlap(a, b) >= NEAR_DUPLICATE_OVERLAP
