"""Split an answer into sentence-like segments that keep their verbatim span."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from server.grading.code_extract import code_spans

# A full stop after a title or a Latin abbreviation ("Dr. Smith", "e.g. GAE", "et al. show")
# does not end the sentence.
_ABBREVIATIONS = ("Dr", "Mr", "Mrs", "Ms", "Prof", "vs", "e.g", "i.e", "al", "Fig", "Eq")
_NOT_AFTER = "".join(rf"(?<!\b{re.escape(a)})" for a in _ABBREVIATIONS)
_BOUNDARY = re.compile(rf"[。！？!?；;\n]+|(?<=[a-zA-Z)\]]){_NOT_AFTER}\.(?=\s)")


@dataclass(frozen=True)
class Segment:
    text: str  # verbatim slice of the answer
    start: int
    end: int
    code: bool = False  # a whole code block: one segment, never split into lines

    @property
    def key(self) -> str:
        return normalise(self.text)


def normalise(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def split_segments(answer: str) -> list[Segment]:
    """Prose splits at sentence ends and line breaks; each code block stays one segment, because
    its lines are not sentences (split up, they would look like repetition or a keyword list)."""
    pieces: list[Segment] = []
    position = 0
    for code_start, code_end in code_spans(answer):
        _split_prose(answer, position, code_start, pieces)
        _add(answer, code_start, code_end, pieces, code=True)
        position = code_end
    _split_prose(answer, position, len(answer), pieces)
    return pieces


def _split_prose(answer: str, begin: int, end: int, out: list[Segment]) -> None:
    start = begin
    for m in _BOUNDARY.finditer(answer, begin, end):
        _add(answer, start, m.end(), out)
        start = m.end()
    _add(answer, start, end, out)


def _add(answer: str, start: int, end: int, out: list[Segment], code: bool = False) -> None:
    raw = answer[start:end]
    stripped = raw.strip()
    if len(normalise(stripped)) < 2:
        return
    lead = len(raw) - len(raw.lstrip())
    s = start + lead
    out.append(Segment(stripped, s, s + len(stripped), code))
