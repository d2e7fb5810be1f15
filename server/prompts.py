"""Prompt templates live in prompts/ as data; $name placeholders (string.Template) keep JSON braces safe."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from string import Template


@lru_cache(maxsize=64)
def _load(path: Path) -> Template:
    return Template(path.read_text(encoding="utf-8"))


def render(prompts_dir: Path, name: str, **values: object) -> str:
    return _load(prompts_dir / name).substitute({k: str(v) for k, v in values.items()})
