"""Rubric coverage of the bank, counted leniently so an unfinished bank can be measured."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import yaml
from pydantic import ValidationError

from server.corpus.schema import QuestionEntry
from server.yaml_files import read_yaml


def rubric_coverage(
    questions_dir: Path, by: str = "topic"
) -> tuple[list[tuple[str, int, int]], tuple[int, int]]:
    """Rows of (group, entries, entries with a complete, valid rubric) and the overall totals."""
    totals: Counter[str] = Counter()
    complete: Counter[str] = Counter()
    for path in sorted(questions_dir.glob("*.yaml")):
        try:
            data = read_yaml(path) or {}
        except yaml.YAMLError:
            data = {}  # unreadable: counted, never as complete
        group = str(data.get(by) or "(unassigned)")
        totals[group] += 1
        try:
            entry = QuestionEntry.model_validate(data)
        except ValidationError:
            continue
        if entry.rubric is not None:
            complete[group] += 1
    rows = [(g, totals[g], complete[g]) for g in sorted(totals)]
    return rows, (sum(totals.values()), sum(complete.values()))
