"""The offline rubric grader: key-point coverage from aliases and embedding similarity, minus
misconception penalties, hardened against padding, keyword salad, injections and off-topic answers."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from server.corpus.schema import QuestionEntry
from server.grading.feedback import write_feedback
from server.grading.models import Grade, KeyPointResult, MisconceptionHit
from server.grading.segments import Segment, merge_for_embedding, split_segments
from server.grading.signals import find_aliases, is_injection, is_keyword_list, is_negated
from server.retrieval.embedder import Embedder

# Cosine ramps (similarity at which semantic credit starts, and where it is full), per embedder.
# Calibrated on tests/eval/grading.jsonl; see docs/grading.md.
SEMANTIC_RAMPS: dict[str, tuple[float, float]] = {
    "e5-small-q4": (0.91, 0.97),
    "use-m3": (0.55, 0.80),
}
DEFAULT_RAMP = (0.55, 0.80)
MISCONCEPTION_SIMILARITY = {"e5-small-q4": 0.93, "use-m3": 0.82}
MISCONCEPTION_PENALTY = 1.5
MAX_PENALTY = 4.0
KEYWORD_LIST_CREDIT = 0.3
REPETITION_PENALTY = 1.0
COVERED_AT = 0.5


class RubricVectors:
    """Embeddings of rubric texts, computed once per text and reused (a cache, not session state)."""

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
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


class RubricGrader:
    name = "rubric"

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder
        self._rubric_vectors = RubricVectors(embedder)
        self._ramp = SEMANTIC_RAMPS.get(embedder.name, DEFAULT_RAMP)
        self._misconception_sim = MISCONCEPTION_SIMILARITY.get(embedder.name, 0.85)

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
        if raw_segments and duplicates / len(raw_segments) >= 0.3:
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

        infos = [_SegmentInfo(s, is_keyword_list(s.text)) for s in content]
        if sum(i.keyword_list for i in infos) / len(infos) >= 0.5:
            flags.append("keyword_list")

        seg_vecs = self._embedder.embed_queries([s.text for s in content])
        kp_sims = self._similarities(seg_vecs, [(kp.text, kp.text_en) for kp in rubric.key_points])
        mc_sims = self._similarities(seg_vecs, [(m.text, m.text_en) for m in rubric.misconceptions])

        misconceptions = self._find_misconceptions(entry, infos, kp_sims, mc_sims)
        results = [
            self._cover(kp_index, entry, infos, kp_sims)
            for kp_index in range(len(rubric.key_points))
        ]

        total_weight = sum(kp.weight for kp in rubric.key_points)
        raw = 10.0 * sum(r.weight * r.confidence for r in results) / total_weight
        penalty = min(MAX_PENALTY, MISCONCEPTION_PENALTY * len(misconceptions))
        if "repetition" in flags:
            penalty += REPETITION_PENALTY
        if not any(r.confidence > 0 for r in results) and not misconceptions:
            flags.append("off_topic")
        score = round(max(0.0, min(10.0, raw - penalty)), 1)
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
            for s_index, info in enumerate(infos):
                if is_negated(info.segment.text):
                    continue
                by_alias = bool(m.aliases and find_aliases(info.segment.text, m.aliases))
                sim = float(mc_sims[s_index, m_index])
                best_kp = float(kp_sims[s_index].max()) if kp_sims.shape[1] else 0.0
                by_meaning = sim >= self._misconception_sim and sim > best_kp + 0.01
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

    def _cover(
        self, kp_index: int, entry: QuestionEntry, infos: list[_SegmentInfo], kp_sims: np.ndarray
    ) -> KeyPointResult:
        assert entry.rubric is not None
        kp = entry.rubric.key_points[kp_index]
        best, evidence = 0.0, None
        for s_index, info in enumerate(infos):
            if info.misconception is not None:
                continue  # a wrong statement is no evidence for a right one
            aliases = find_aliases(info.segment.text, kp.aliases)
            alias_credit = 0.0
            if aliases:
                alias_credit = 1.0 if len(aliases) >= 2 else 0.75
            semantic = self._ramp_credit(float(kp_sims[s_index, kp_index]))
            credit = min(1.0, max(alias_credit, semantic) + 0.3 * min(alias_credit, semantic))
            if info.keyword_list:
                credit *= KEYWORD_LIST_CREDIT
            if credit > best:
                best, evidence = credit, info.segment.text
        return KeyPointResult(
            id=kp.id,
            text=kp.text,
            text_en=kp.text_en,
            weight=kp.weight,
            covered=best >= COVERED_AT,
            evidence=evidence if best >= COVERED_AT else None,
            confidence=round(best, 3),
        )
