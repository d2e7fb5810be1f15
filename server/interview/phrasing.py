"""Interviewer lines from the templates in prompts/interviewer.yaml, in the session language.

The engine decides what is asked; this class (or its LLM subclass, server/interview/llm_interviewer.py)
only words it. Every line says how it was phrased, so a fallback from the LLM is visible."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from string import Template
from typing import Literal

import yaml
from pydantic import BaseModel, Field

from server.corpus.schema import QuestionEntry


@lru_cache(maxsize=4)
def _templates(path: Path) -> dict[str, dict[str, str]]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


class PhrasingInfo(BaseModel):
    """How an interviewer line was worded: by the LLM, or by a template (and why, when an LLM
    is configured: llm_timeout, llm_error, llm_malformed, llm_leak, llm_grading)."""

    by: Literal["template", "llm"] = "template"
    flags: list[str] = Field(default_factory=list)


class Line(BaseModel):
    text: str
    phrasing: PhrasingInfo = Field(default_factory=PhrasingInfo)


@dataclass(frozen=True)
class ProbeContext:
    """What a probe may be told: the question, the candidate's own words and the gap (the rubric's
    probe question) — never the reference answer or the key point itself."""

    language: str
    question: str
    answer: str
    probe: str
    secrets: list[str] = field(default_factory=list)  # text the line must not contain


@dataclass(frozen=True)
class TransitionContext:
    """A move to a related question: why it follows (the edge), what was just discussed."""

    language: str
    previous_question: str
    answer: str
    relation: str  # follow_up | contrast | prerequisite | retrieved
    values: dict[str, object]  # number, topic, text: the new question as asked
    secrets: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ClarifyContext:
    """A question from the candidate about the question (scope, notation), not an answer."""

    language: str
    question: str
    asked: str  # what the candidate asked
    probe: str | None = None  # the probe on the table, when the candidate asks about it
    secrets: list[str] = field(default_factory=list)


def secrets_of(entry: QuestionEntry) -> list[str]:
    """The text a line must never reveal: the reference answer, every key point, corrections."""
    rubric = entry.rubric
    if rubric is None:
        return []
    out = [rubric.reference_answer, rubric.reference_answer_en or ""]
    for kp in rubric.key_points:
        out += [kp.text, kp.text_en]
    out += [m.correction for m in rubric.misconceptions]
    return [s for s in out if s]


class Phrasing:
    def __init__(self, prompts_dir: Path) -> None:
        self._path = prompts_dir / "interviewer.yaml"

    def say(self, language: str, key: str, **values: object) -> str:
        table = _templates(self._path)
        template = table.get(language, table["zh"])[key]
        return Template(template).safe_substitute({k: str(v) for k, v in values.items()})

    def probe(self, ctx: ProbeContext) -> Line:
        return Line(text=self.say(ctx.language, "probe", probe=ctx.probe))

    def transition(self, ctx: TransitionContext) -> Line:
        return Line(text=self.say(ctx.language, "followup", **ctx.values))

    def clarify(self, ctx: ClarifyContext) -> Line:
        """Restate what the question asks, without answering it."""
        if ctx.probe:
            return Line(text=self.say(ctx.language, "clarify_probe", probe=ctx.probe))
        return Line(text=self.say(ctx.language, "clarify", question=ctx.question))

    @staticmethod
    def question_text(entry: QuestionEntry, language: str) -> str:
        return entry.text_en if language == "en" else entry.text
