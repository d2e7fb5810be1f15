"""Interviewer lines from the templates in prompts/interviewer.yaml, in the session language."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from string import Template

import yaml

from server.corpus.schema import QuestionEntry


@lru_cache(maxsize=4)
def _templates(path: Path) -> dict[str, dict[str, str]]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


class Phrasing:
    def __init__(self, prompts_dir: Path) -> None:
        self._path = prompts_dir / "interviewer.yaml"

    def say(self, language: str, key: str, **values: object) -> str:
        table = _templates(self._path)
        template = table.get(language, table["zh"])[key]
        return Template(template).safe_substitute({k: str(v) for k, v in values.items()})

    @staticmethod
    def question_text(entry: QuestionEntry, language: str) -> str:
        return entry.text_en if language == "en" else entry.text
