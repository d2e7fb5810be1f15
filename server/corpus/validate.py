"""Validate bank entry files: `python -m server.corpus.validate [FILE...]` (default: every entry)."""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import ValidationError

from server.corpus.bank import BankError, read_entry_file
from server.corpus.content_rules import content_problems
from server.corpus.hygiene import hygiene_problems
from server.corpus.schema import QuestionEntry

QUESTIONS_DIR = Path(__file__).resolve().parents[2] / "corpus" / "questions"


def validate_files(paths: list[Path]) -> list[str]:
    known = {p.stem for p in QUESTIONS_DIR.glob("*.yaml")}
    problems: list[str] = []
    for path in paths:
        try:
            entry = QuestionEntry.model_validate(read_entry_file(path))
        except (ValidationError, BankError) as exc:
            problems.append(f"{path.name}: {exc}")
            continue
        if entry.rubric is None:
            problems.append(f"{path.name}: no rubric")
        problems += hygiene_problems(entry)
        problems += content_problems(entry)
        if entry.id != path.stem:
            problems.append(f"{path.name}: id does not match file name")
        problems += [
            f"{path.name}: unknown related id {r.id}" for r in entry.related if r.id not in known
        ]
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
