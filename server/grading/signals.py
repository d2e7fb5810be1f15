"""Lexical checks other graders share with the rubric grader (kept as one import for them)."""

from __future__ import annotations

from server.grading import injection
from server.grading.normalize import normal_form


def is_injection(text: str) -> bool:
    """Instructions aimed at the grader, in any script or width (see `injection`)."""
    return injection.is_injection(normal_form(text))
