"""The fitted map from grading signals to a 0–10 score.

A sign-constrained linear model (every feature is oriented so that more of it may only raise the
score: coverage up, wrong claims down) followed by a quantile map to the label scale. Both are
fitted on the training split of the labelled answers (`sparring eval fit-grader`) and stored as
JSON beside this module, so the score is reproducible and readable. Sign constraints keep the model
monotone: no feature an attacker controls can buy points the fit did not see."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

CALIBRATION_FILE = Path(__file__).with_name("calibration.json")

# Safety ceilings that hold whatever the fit says (an attack must not out-score its kind).
CEILINGS = (
    ("salad_share", 0.6, 2.5),
    ("framed_share", 0.5, 1.0),
    ("question_share", 0.6, 1.0),
    ("denied_share", 0.5, 2.0),
    ("injection", 0.5, 4.0),
    # An answer that covers a neighbouring question at least twice as well as this one.
    ("other_question", 0.5, 3.0),
)


def feature_vector(s: Mapping[str, float]) -> list[float]:
    """Features in the fitted order; each is oriented so that its coefficient is ≥ 0."""
    coverage = s.get("coverage", 0.0)
    covered = s.get("covered_share", 0.0)
    clean = 1.0 - min(1.0, s.get("salad_share", 0.0))
    relevant = min(1.0, s.get("relevance", 1.0) / 0.6)
    wrong = min(3.0, s.get("wrong_claims", 0.0))
    own = s.get("own_share", 1.0)
    affinity = s.get("affinity", 1.0)
    return [
        coverage,
        covered,
        coverage * clean,
        coverage * relevant,
        math.sqrt(coverage),
        -wrong,
        -wrong * coverage,
        -s.get("salad_share", 0.0),
        -s.get("repetition_share", 0.0),
        -s.get("injection", 0.0),
        -s.get("denied_share", 0.0),
        -s.get("framed_share", 0.0),
        -s.get("hedge_share", 0.0),
        -s.get("question_share", 0.0),
        -min(3.0, s.get("fillers", 0.0)) / 3,
        -s.get("listed_share", 0.0),
        -coverage * s.get("listed_share", 0.0),
        relevant,
        coverage * own,
        -(1.0 - own),
        coverage * affinity,
        -(1.0 - affinity),
    ]


FEATURE_NAMES = (
    "coverage",
    "covered_share",
    "coverage*not_salad",
    "coverage*relevance",
    "sqrt_coverage",
    "-wrong_claims",
    "-wrong*coverage",
    "-salad_share",
    "-repetition_share",
    "-injection",
    "-denied_share",
    "-framed_share",
    "-hedge_share",
    "-question_share",
    "-fillers",
    "-listed_share",
    "-coverage*listed_share",
    "relevance",
    "coverage*own_share",
    "-other_question",
    "coverage*affinity",
    "-not_affinity",
)


@dataclass(frozen=True)
class Calibration:
    coef: tuple[float, ...]
    intercept: float
    iso_x: tuple[float, ...]
    iso_y: tuple[float, ...]

    def raw(self, signals: Mapping[str, float]) -> float:
        return float(np.dot(self.coef, feature_vector(signals)) + self.intercept)

    def score(self, signals: Mapping[str, float]) -> float:
        value = float(np.interp(self.raw(signals), self.iso_x, self.iso_y))
        merged = {**signals, "other_question": 1.0 - signals.get("own_share", 1.0)}
        for name, at, ceiling in CEILINGS:
            if merged.get(name, 0.0) >= at:
                value = min(value, ceiling)
        return max(0.0, min(10.0, value))

    def to_json(self) -> dict:
        return {
            "features": list(FEATURE_NAMES),
            "coef": list(self.coef),
            "intercept": self.intercept,
            "map": {"x": list(self.iso_x), "y": list(self.iso_y)},
        }

    @classmethod
    def from_json(cls, data: dict) -> Calibration:
        if tuple(data["features"]) != FEATURE_NAMES:
            raise ValueError("calibration.json was fitted on other features: refit it")
        iso = data.get("map") or data["isotonic"]
        return cls(tuple(data["coef"]), float(data["intercept"]), tuple(iso["x"]), tuple(iso["y"]))


QUANTILES = 41


def fit(signals: list[Mapping[str, float]], labels: list[float]) -> Calibration:
    """Non-negative least squares on the oriented features (intercept free), then a quantile map
    from the raw score to the label scale."""
    from scipy.optimize import nnls

    x = np.array([feature_vector(s) for s in signals])
    y = np.asarray(labels, dtype=float)
    design = np.hstack([x, np.ones((len(x), 1)), -np.ones((len(x), 1))])
    # A little ridge keeps correlated features from trading huge opposite weights.
    ridge = 0.5
    penalty = math.sqrt(ridge) * np.eye(design.shape[1])
    penalty[-2:, -2:] = 0.0  # the intercept is not shrunk
    design_r = np.vstack([design, penalty])
    y_r = np.concatenate([y, np.zeros(design.shape[1])])
    solution, _ = nnls(design_r, y_r)
    coef, intercept = solution[:-2], solution[-2] - solution[-1]
    raw = x @ coef + intercept
    # Quantile map (grader v3): the k-th quantile of the raw score goes to the k-th quantile of
    # the labels. Monotone like the isotonic map it replaces, but it keeps the labels' spread:
    # an isotonic fit pulls both ends toward the middle (excellent answers near 8, expert
    # answers in unusual form 3–5 points low).
    probs = np.linspace(0.0, 1.0, QUANTILES)
    xs = np.quantile(raw, probs)
    xs = xs + np.arange(len(xs)) * 1e-9  # strictly increasing for interpolation
    ys = np.clip(np.quantile(y, probs), 0.0, 10.0)
    return Calibration(tuple(map(float, coef)), float(intercept), tuple(xs), tuple(ys))


@lru_cache(maxsize=1)
def load_calibration(path: Path = CALIBRATION_FILE) -> Calibration:
    return Calibration.from_json(json.loads(path.read_text(encoding="utf-8")))
