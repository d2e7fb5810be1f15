"""Validate bank entry files: `python -m server.corpus.validate [FILE...]` (default: every entry)."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml
from pydantic import ValidationError

from server.corpus.bank import BankError, read_entry_file
from server.corpus.content_rules import content_problems
from server.corpus.hygiene import hygiene_problems
from server.corpus.schema import QuestionEntry

QUESTIONS_DIR = Path(__file__).resolve().parents[2] / "corpus" / "questions"


def _all_entries() -> list[QuestionEntry]:
    entries = []
    for path in sorted(QUESTIONS_DIR.glob("*.yaml")):
        try:
            entries.append(QuestionEntry.model_validate(read_entry_file(path)))
        except (ValidationError, BankError, yaml.YAMLError):
            continue  # reported for its own file
    return entries


def validate_files(paths: list[Path], *, phrases: bool = True) -> list[str]:
    """Schema, hygiene and content rules per file; with `phrases`, the files' wrong-claim phrases
    are cross-checked against every true sentence of the whole bank (`phrase_check`)."""
    known = {p.stem for p in QUESTIONS_DIR.glob("*.yaml")}
    problems: list[str] = []
    checked: list[QuestionEntry] = []
    for path in paths:
        try:
            entry = QuestionEntry.model_validate(read_entry_file(path))
        except (ValidationError, BankError, yaml.YAMLError) as exc:
            problems.append(f"{path.name}: {exc}")
            continue
        checked.append(entry)
        if entry.rubric is None:
            problems.append(f"{path.name}: no rubric")
        problems += hygiene_problems(entry)
        problems += content_problems(entry)
        if entry.id != path.stem:
            problems.append(f"{path.name}: id does not match file name")
        problems += [
            f"{path.name}: unknown related id {r.id}" for r in entry.related if r.id not in known
        ]
    if phrases and checked:
        from server.corpus.phrase_check import phrase_problems

        # The checked files stand in for the bank's copies of the same ids.
        entries = {e.id: e for e in _all_entries()} | {e.id: e for e in checked}
        problems += phrase_problems(list(entries.values()), only={e.id for e in checked})
    return problems


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted(QUESTIONS_DIR.glob("*.yaml"))
    problems = validate_files(paths)
    for p in problems:
        print(p)
    print(f"{len(paths)} file(s) checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
