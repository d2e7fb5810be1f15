"""Find the Python code inside a free-text answer."""

from __future__ import annotations

import ast
import re

FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)(?:```|\Z)", re.S | re.I)
CODE_START = re.compile(r"^(import |from \S+ import |def |class |@)")


def extract_code(answer: str) -> str | None:
    """The answer's code: its fenced blocks joined, else the longest run of lines from the first
    `import`/`def` that parses as Python. None when the answer holds no code."""
    blocks = [b.strip("\n") for b in FENCE.findall(answer) if "def " in b or "import " in b]
    if blocks:
        return "\n\n".join(blocks) + "\n"
    lines = answer.splitlines()
    start = next((i for i, line in enumerate(lines) if CODE_START.match(line)), None)
    if start is None:
        return None
    # Prose after the code ends it: drop trailing lines until what remains parses.
    for end in range(len(lines), start, -1):
        chunk = "\n".join(lines[start:end]) + "\n"
        if "def " not in chunk:
            break
        try:
            ast.parse(chunk)
        except SyntaxError:
            continue
        return chunk
    # Unparseable code is still code: the sandbox reports the syntax error to the candidate.
    return "\n".join(lines[start:]) + "\n"


def code_spans(answer: str) -> list[tuple[int, int]]:
    """Where the answer's code sits, as (start, end) offsets: fenced blocks, else the unfenced run."""
    spans = [m.span() for m in FENCE.finditer(answer)]
    if spans:
        return spans
    code = extract_code(answer)
    if code is None:
        return []
    start = answer.find(code.rstrip("\n"))
    return [(start, start + len(code.rstrip("\n")))] if start >= 0 else []


def uses_torch(code: str) -> bool:
    return re.search(r"^\s*(import torch|from torch)", code, re.M) is not None


def _def_line(function: str) -> re.Pattern[str]:
    return re.compile(rf"^\s*def\s+{re.escape(function)}\s*\(", re.M)


def defines(code: str, function: str) -> bool:
    return _def_line(function).search(code) is not None


def defining_line(code: str, function: str) -> str | None:
    """The `def` line of the function, a verbatim span of the answer used as evidence."""
    for line in code.splitlines():
        if _def_line(function).match(line):
            return line.strip()
    for line in code.splitlines():
        if line.lstrip().startswith("def "):
            return line.strip()
    return None
