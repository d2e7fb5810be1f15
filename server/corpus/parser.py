"""Parse the raw question-bank text (a copy of a web page) into structured entries.

The source is a flattened web page. Each question card ends with a "原题" button; a card with
sub-questions shows a short form, then "原题完整原题" and the full form on one line. Editors'
notes about under-specified questions stand on their own line: before a multi-line card they
belong to it, after a one-line card they belong to that card.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

BUTTON = "原题"
FULL_MARK = "原题完整原题"

_TOPIC_RE = re.compile(r"^【([^】]+)】\s*")
# (?<!\s): a match starts where the blanks start, not at every blank of a long run (linear).
_TRAILING_COMPANIES_RE = re.compile(r"(?<!\s)\s*「([^」「]+)」\s*$")
_COMPANY_LINE_RE = re.compile(r"^「([^」]+)」$")
_EXPAND_RE = re.compile(r"^展开其余\s*\d+\s*(个小问|条问法)$")
_NOTE_WORDS_RE = re.compile(r"无法|未说明|未定义|未提供|未给|缺少|没有给出")
# A numbered sub-question marker: "1." "2、" not preceded by a digit or dot (so "0.2" is no marker).
_NUMBER_RE = re.compile(r"(?<![\d.．])(\d{1,2})\s*[.．、](?!\d)\s*")
PLACEHOLDER = "暂无题目"  # the page's empty last card
ARTEFACTS = ("原题", "完整原题", "展开其余", PLACEHOLDER)


@dataclass
class ParsedEntry:
    """One question card as the source gives it (no enrichment)."""

    text: str
    topic: str | None
    companies: list[str]
    subquestions: list[str] = field(default_factory=list)
    note: str | None = None


def _clean(text: str) -> str:
    return unicodedata.normalize("NFC", text).strip()


def _is_note(line: str) -> bool:
    return (
        "「" not in line
        and "【" not in line
        and "？" not in line
        and "?" not in line
        and bool(_NOTE_WORDS_RE.search(line))
    )


def _split_companies(raw: str) -> list[str]:
    return [c.strip() for c in raw.split("、") if c.strip()]


def _split_card_line(line: str) -> tuple[str | None, str, list[str]]:
    """Split "【topic】text 「A、B」" into its parts."""
    topic = None
    m = _TOPIC_RE.match(line)
    if m:
        topic = m.group(1).strip()
        line = line[m.end() :]
    companies: list[str] = []
    m = _TRAILING_COMPANIES_RE.search(line)
    if m:
        companies = _split_companies(m.group(1))
        line = line[: m.start()]
    return topic, line.strip(), companies


def split_numbered(text: str) -> tuple[str, list[str]]:
    """Split "stem 1. a 2. b" into ("stem", ["a", "b"]); markers must run 1, 2, 3... in order."""
    markers: list[re.Match[str]] = []
    expected = 1
    for m in _NUMBER_RE.finditer(text):
        if int(m.group(1)) == expected:
            markers.append(m)
            expected += 1
    if len(markers) < 2:
        return text, []
    stem = text[: markers[0].start()].strip()
    parts = []
    for i, m in enumerate(markers):
        end = markers[i + 1].start() if i + 1 < len(markers) else len(text)
        parts.append(text[m.end() : end].strip())
    return stem, [p for p in parts if p]


def _merge_fragments(lines: list[str]) -> list[str]:
    """Join lines the page broke after a comma; drop lines contained in another line."""
    merged: list[str] = []
    for line in lines:
        if merged and merged[-1].endswith(("，", "、", ",")):
            merged[-1] += line
        else:
            merged.append(line)
    unique: list[str] = []
    for line in merged:
        if line not in unique:
            unique.append(line)
    return [a for a in unique if not any(a != b and a in b for b in unique)]


def _tokens(lines: list[str]) -> list[tuple[str, str]]:
    """Turn page lines into ("button"|"full"|"line", text) tokens."""
    out: list[tuple[str, str]] = []
    for raw in lines:
        line = _clean(raw)
        while line:
            if line.startswith(FULL_MARK):
                out.append(("full", ""))
                line = line[len(FULL_MARK) :].strip()
            elif line.startswith(BUTTON):
                out.append(("button", ""))
                line = line[len(BUTTON) :].strip()
            else:
                out.append(("line", line))
                break
    return out


def parse_text(source: str) -> list[ParsedEntry]:
    lines = [ln for ln in source.splitlines() if ln.strip()]
    # The first line is the page's section heading ("强化学习与对齐"), not a question.
    if lines and not re.search(r"[「【？?：:]", lines[0]):
        lines = lines[1:]
    entries: list[ParsedEntry] = []
    segment: list[str] = []

    def attach_note_to_previous(note: str) -> None:
        if entries:
            entries[-1].note = note

    def flush_single(seg: list[str]) -> None:
        """A segment with no full form: leading notes belong to the previous card."""
        body: list[str] = []
        for line in seg:
            if _is_note(line) and not body:
                attach_note_to_previous(_strip_note(line))
            elif not _EXPAND_RE.match(line):
                body.append(line)
        if not body or body == [PLACEHOLDER]:
            return
        if len(body) != 1:
            raise ValueError(f"unexpected multi-line card without a full form: {body!r}")
        topic, text, companies = _split_card_line(body[0])
        _, subs = split_numbered(text)
        entries.append(ParsedEntry(text=text, topic=topic, companies=companies, subquestions=subs))

    tokens = _tokens(lines)
    i = 0
    while i < len(tokens):
        kind, line = tokens[i]
        if kind == "line":
            segment.append(line)
        elif kind == "button":
            flush_single(segment)
            segment = []
        elif kind == "full":
            # The next line token is the full form of the card whose short form is `segment`.
            j = i + 1
            while j < len(tokens) and tokens[j][0] != "line":
                j += 1
            if j >= len(tokens):
                raise ValueError("full-form marker at end of text")
            entries.append(_multi_line_card(segment, tokens[j][1], attach_note_to_previous))
            segment = []
            i = j
        i += 1
    flush_single(segment)
    return entries


def _strip_note(line: str) -> str:
    while line.startswith(BUTTON):
        line = line[len(BUTTON) :]
    return line.strip()


def _multi_line_card(short: list[str], full: str, attach_prev) -> ParsedEntry:
    notes = []
    while short and _is_note(short[0]):
        notes.append(_strip_note(short.pop(0)))
    # Of several leading notes only the last is about this card; the others close the previous one.
    for note in notes[:-1]:
        attach_prev(note)
    short = [ln for ln in short if not _EXPAND_RE.match(ln)]
    company_idx = next((k for k, ln in enumerate(short) if _COMPANY_LINE_RE.match(ln)), None)
    if company_idx is not None:
        short_companies = _split_companies(_COMPANY_LINE_RE.match(short[company_idx]).group(1))
        sub_lines = short[company_idx + 1 :]  # lines before the company line are the title
    else:
        short_companies = []
        sub_lines = short
    topic, text, companies = _split_card_line(full)
    _, subs = split_numbered(text)
    if not subs:
        subs = _merge_fragments(sub_lines)
        if len(subs) == 1:  # a single line is the question itself, not a sub-question
            subs = []
    return ParsedEntry(
        text=text,
        topic=topic,
        companies=companies or short_companies,
        subquestions=subs,
        note=notes[-1] if notes else None,
    )


def parse_file(path: Path) -> list[ParsedEntry]:
    return parse_text(path.read_text(encoding="utf-8"))
