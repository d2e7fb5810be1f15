"""The one score formula every grade uses: weighted key-point credit minus penalties named by flags.

The rubric grader, the LLM grader and the interview engine (which merges a question's answers)
all score through `score_from`, so a penalty can never apply in one place and not another."""

from __future__ import annotations

from collections.abc import Iterable

from server.grading.models import KeyPointResult

MISCONCEPTION_PENALTY = 1.5
MAX_MISCONCEPTION_PENALTY = 4.0
REPETITION_PENALTY = 2.0  # repeated sentences, restatements, mostly filler
INJECTION_PENALTY = 1.5  # an answer that tries to instruct the grader
COVERED_AT = 0.5  # a key point counts as covered from this confidence on
OFF_TOPIC_FACTOR = 0.0  # an answer about another question earns nothing for its stray matches


def score_from(
    key_points: list[KeyPointResult],
    misconceptions: int,
    flags: Iterable[str],
    cap: float = 10.0,
) -> float:
    """0–10, one decimal: 10 × Σ weight × confidence / Σ weight, then flags and misconceptions."""
    flags = set(flags)
    total = sum(kp.weight for kp in key_points) or 1.0
    raw = 10.0 * sum(kp.weight * kp.confidence for kp in key_points) / total
    if "off_topic" in flags:
        raw *= OFF_TOPIC_FACTOR
    penalty = min(MAX_MISCONCEPTION_PENALTY, MISCONCEPTION_PENALTY * misconceptions)
    if "repetition" in flags:
        penalty += REPETITION_PENALTY
    if "injection" in flags:
        penalty += INJECTION_PENALTY
    return round(max(0.0, min(cap, raw - penalty)), 1)
