"""The one score formula every grade uses: the fitted calibration over grading signals.

The rubric grader passes the signals it read from the answer; the LLM grader, the code grader and
the interview engine (which merges a question's answers) pass key points, wrong claims and flags,
from which the same signals are derived. A penalty can never apply in one place and not another."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from server.grading.calibration import load_calibration
from server.grading.models import KeyPointResult

COVERED_AT = 0.5  # a key point counts as covered from this confidence on
# The analytic formula for graders whose key points are judged, not measured (the LLM grader):
# its 0/1 points are already on the label scale, while the rubric grader's calibration was
# fitted on the rubric grader's own signals.
MISCONCEPTION_PENALTY = 1.5
MAX_MISCONCEPTION_PENALTY = 4.0
REPETITION_PENALTY = 2.0
INJECTION_PENALTY = 1.5


def analytic_score(
    key_points: list[KeyPointResult], misconceptions: int, flags: Iterable[str], cap: float = 10.0
) -> float:
    """0–10, one decimal: 10 × Σ weight × confidence / Σ weight, minus named penalties."""
    flags = set(flags)
    total = sum(kp.weight for kp in key_points) or 1.0
    raw = 10.0 * sum(kp.weight * kp.confidence for kp in key_points) / total
    penalty = min(MAX_MISCONCEPTION_PENALTY, MISCONCEPTION_PENALTY * misconceptions)
    if "repetition" in flags:
        penalty += REPETITION_PENALTY
    if "injection" in flags:
        penalty += INJECTION_PENALTY
    return round(max(0.0, min(cap, raw - penalty)), 1)


def signals_from(
    key_points: list[KeyPointResult], misconceptions: int, flags: Iterable[str]
) -> dict[str, float]:
    flags = set(flags)
    total = sum(kp.weight for kp in key_points) or 1.0
    return {
        "coverage": sum(kp.weight * kp.confidence for kp in key_points) / total,
        "covered_share": sum(kp.weight for kp in key_points if kp.confidence >= COVERED_AT) / total,
        "wrong_claims": float(misconceptions),
        "salad_share": 0.6 if "keyword_list" in flags else 0.0,
        "repetition_share": 0.5 if "repetition" in flags else 0.0,
        "injection": 1.0 if "injection" in flags else 0.0,
        "hedge_share": 0.5 if "hedged" in flags else 0.0,
        "denied_share": 0.5 if "denied" in flags else 0.0,
        "relevance": 0.0 if "off_topic" in flags else 1.0,
    }


# What wrong claims may cost against the same answer without them (grader v3, "local credit"):
# the contradicted point is lost, and the fitted penalty applies, but together never more than
# this. At least a little is always lost, so a wrong claim never costs nothing.
FIRST_WRONG_CLAIM_MAX_LOSS = 2.5
NEXT_WRONG_CLAIM_MAX_LOSS = 2.0
WRONG_CLAIM_MIN_LOSS = 0.5


def bounded_score(score: float, clean_score: float, wrong_claims: int) -> float:
    """The score of an answer with `wrong_claims`, kept within a bounded loss of `clean_score`
    (the same answer read as if it made no wrong claim)."""
    if wrong_claims <= 0:
        return score
    most = FIRST_WRONG_CLAIM_MAX_LOSS + NEXT_WRONG_CLAIM_MAX_LOSS * (wrong_claims - 1)
    least = WRONG_CLAIM_MIN_LOSS * wrong_claims
    value = min(max(score, clean_score - most), clean_score - least)
    return round(max(0.0, value), 1)


def score_from(
    key_points: list[KeyPointResult],
    misconceptions: int,
    flags: Iterable[str],
    cap: float = 10.0,
    signals: Mapping[str, float] | None = None,
) -> float:
    """0–10, one decimal."""
    flags = list(flags)
    merged = signals_from(key_points, misconceptions, flags)
    if signals is not None:
        merged.update(signals)
    value = load_calibration().score(merged)
    return round(max(0.0, min(cap, value)), 1)
