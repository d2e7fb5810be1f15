"""Reading the project's YAML files with libyaml's parser.

Why: PyYAML's pure-Python parser spends ~10 CPU seconds on the question bank at every start
(libyaml: ~1 s, same result). PyYAML's wheels ship libyaml; the pure parser stays the fallback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_yaml(text: str) -> Any:
    """yaml.safe_load, with libyaml when PyYAML has it."""
    return yaml.load(text, Loader=SafeLoader)


def read_yaml(path: Path) -> Any:
    return load_yaml(path.read_text(encoding="utf-8"))
