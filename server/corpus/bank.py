"""Load, validate and cross-check the structured question bank."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from server.corpus.parser import ParsedEntry, parse_file
from server.corpus.schema import QuestionEntry
from server.yaml_files import read_yaml


class BankError(ValueError):
    """The bank on disk is inconsistent; the message lists every problem found."""


@dataclass(frozen=True)
class QuestionBank:
    entries: tuple[QuestionEntry, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_id", {e.id: e for e in self.entries})

    def get(self, entry_id: str) -> QuestionEntry | None:
        return self._by_id.get(entry_id)  # type: ignore[attr-defined]

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self):
        return iter(self.entries)

    @property
    def ids(self) -> list[str]:
        return [e.id for e in self.entries]


def read_entry_file(path: Path) -> dict:
    data = read_yaml(path)
    if not isinstance(data, dict):
        raise BankError(f"{path.name}: expected a mapping at top level")
    return data


def load_bank(questions_dir: Path, *, require_rubric: bool = True) -> QuestionBank:
    problems: list[str] = []
    entries: list[QuestionEntry] = []
    for path in sorted(questions_dir.glob("*.yaml")):
        try:
            entry = QuestionEntry.model_validate(read_entry_file(path))
        except (ValidationError, BankError, yaml.YAMLError) as exc:
            problems.append(f"{path.name}: {exc}")
            continue
        if entry.id != path.stem:
            problems.append(f"{path.name}: id {entry.id!r} does not match the file name")
        if require_rubric and entry.rubric is None:
            problems.append(f"{path.name}: no rubric")
        entries.append(entry)
    problems.extend(check_links(entries))
    if problems:
        raise BankError(f"{len(problems)} problem(s) in the question bank:\n" + "\n".join(problems))
    return QuestionBank(tuple(entries))


def check_links(entries: Iterable[QuestionEntry]) -> list[str]:
    entries = list(entries)
    ids = {e.id for e in entries}
    problems = []
    for e in entries:
        for edge in e.related:
            if edge.id not in ids:
                problems.append(f"{e.id}: related id {edge.id!r} does not exist")
    return problems


def check_against_source(bank: QuestionBank, parsed: list[ParsedEntry]) -> list[str]:
    """The source fields of the bank must be exactly what the parser reads from the raw text."""
    problems = []
    seed = [e for e in bank if e.source == "seed"]
    by_text = {e.text: e for e in seed}
    for p in parsed:
        e = by_text.get(p.text)
        if e is None:
            problems.append(f"source entry not in bank: {p.text[:40]}")
            continue
        if p.topic is not None and e.topic != p.topic:
            problems.append(f"{e.id}: topic {e.topic!r} != source {p.topic!r}")
        if e.companies != p.companies:
            problems.append(f"{e.id}: companies differ from source")
        if [s.text for s in e.subquestions] != p.subquestions:
            problems.append(f"{e.id}: sub-questions differ from source")
        if (e.note or None) != p.note:
            problems.append(f"{e.id}: note differs from source")
    if len(parsed) != len(seed):
        problems.append(f"bank has {len(seed)} seed entries, source has {len(parsed)}")
    return problems


def skeleton(entry_id: str, p: ParsedEntry) -> dict:
    """A new bank entry for a parsed card: source fields filled, enrichment left to an author."""
    return {
        "id": entry_id,
        "topic": p.topic or "",
        "area": "",
        "companies": p.companies,
        "text": p.text,
        "text_en": "",
        "subquestions": [
            {"id": f"{entry_id}.{n}", "text": s, "text_en": ""}
            for n, s in enumerate(p.subquestions, start=1)
        ],
        "note": p.note,
        "note_en": "" if p.note else None,
        "type": "",
        "difficulty": 0,
        "related": [],
        "rubric": None,
    }


def dump_entry(data: dict) -> str:
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False, width=100)


def write_skeletons(raw_path: Path, ids: list[str], out_dir: Path) -> int:
    parsed = parse_file(raw_path)
    if len(ids) != len(parsed):
        raise BankError(f"{len(ids)} ids for {len(parsed)} parsed entries")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = 0
    for entry_id, p in zip(ids, parsed, strict=True):
        path = out_dir / f"{entry_id}.yaml"
        if not path.exists():
            path.write_text(dump_entry(skeleton(entry_id, p)), encoding="utf-8")
            written += 1
    return written
