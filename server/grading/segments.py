"""Split an answer into sentence-like segments that keep their verbatim span."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_BOUNDARY = re.compile(r"[。！？!?；;\n]+|(?<=[a-zA-Z)\]])\.(?=\s)")
MAX_SEGMENTS = 14


@dataclass(frozen=True)
class Segment:
    text: str  # verbatim slice of the answer
    start: int
    end: int

    @property
    def key(self) -> str:
        return normalise(self.text)


def normalise(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).lower().split())


def split_segments(answer: str) -> list[Segment]:
    pieces: list[Segment] = []
    start = 0
    for m in _BOUNDARY.finditer(answer):
        _add(answer, start, m.end(), pieces)
        start = m.end()
    _add(answer, start, len(answer), pieces)
    return pieces


def _add(answer: str, start: int, end: int, out: list[Segment]) -> None:
    raw = answer[start:end]
    stripped = raw.strip()
    if len(normalise(stripped)) < 2:
        return
    lead = len(raw) - len(raw.lstrip())
    s = start + lead
    out.append(Segment(stripped, s, s + len(stripped)))


def merge_for_embedding(answer: str, segments: list[Segment]) -> list[Segment]:
    """Join neighbours so a long answer costs at most MAX_SEGMENTS embeddings."""
    if len(segments) <= MAX_SEGMENTS:
        return segments
    per = -(-len(segments) // MAX_SEGMENTS)
    merged = []
    for i in range(0, len(segments), per):
        group = segments[i : i + per]
        merged.append(
            Segment(answer[group[0].start : group[-1].end], group[0].start, group[-1].end)
        )
    return merged
