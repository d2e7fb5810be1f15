"""Interviewer lines from the templates in prompts/interviewer.yaml, in the session language.

The engine decides what is asked; this class (or its LLM subclass, server/interview/llm_interviewer.py)
only words it. Every line says how it was phrased, so a fallback from the LLM is visible."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from string import Template
from typing import Literal

from pydantic import BaseModel, Field

from server.corpus.schema import QuestionEntry
from server.corpus.topic_names import TopicNames
from server.yaml_files import read_yaml


@lru_cache(maxsize=4)
def _templates(path: Path) -> dict[str, dict[str, str]]:
    return read_yaml(path)


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
    out += [m.correction_en for m in rubric.misconceptions if m.correction_en]
    return [s for s in out if s]


# Bank questions often end with rephrasings ("变体：1. … 2. …") kept for search; an interviewer
# asks the question once.
# (?<!\s): a match starts where the blanks start, not at every blank of a long run (linear).
_VARIANTS = re.compile(r"(?<!\s)\s*(?:变体|Variants?)\s*[:：]")
_SENTENCE = re.compile(r"[^？?。；;！!]+[？?。；;！!]*")
_TOKEN = re.compile(r"[a-z0-9]+|[\u4e00-\u9fff]+")
QUESTION_KEYS = ("first_question", "question", "followup")


def _tokens(text: str) -> set[str]:
    """Latin words and Chinese character pairs: enough to tell that two sentences ask the same."""
    out: set[str] = set()
    for run in _TOKEN.findall(text.lower()):
        if run.isascii():
            out.add(run)
        else:
            out |= {run[i : i + 2] for i in range(max(len(run) - 1, 1))}
    return out


def asked_once(text: str) -> str:
    """The question without its trailing list of rephrasings."""
    return _VARIANTS.split(text, maxsplit=1)[0].strip() or text


def unasked_part(text: str, previous: str, overlap: float = 0.6) -> str:
    """The sentences of `text` that the previous question did not already ask (most of a
    sentence's words/character pairs appear in it); all of it when nothing new would be left."""
    text = asked_once(text)
    before = _tokens(previous)
    if not before:
        return text
    kept = []
    for sentence in _SENTENCE.findall(text):
        words = _tokens(sentence)
        if len(words) >= 3 and len(words & before) / len(words) >= overlap:
            continue
        kept.append(sentence.strip())
    joined = re.sub(r"(?<=[？。；！])\s+", "", " ".join(kept)).strip()
    return joined or text


class Phrasing:
    def __init__(self, prompts_dir: Path, topic_names: TopicNames | None = None) -> None:
        self._path = prompts_dir / "interviewer.yaml"
        # The bank names topics in Chinese; an English line names them in English.
        self.topic_names = topic_names or TopicNames(areas={}, topics={})

    def topic_name(self, topic: object, language: str) -> str:
        return self.topic_names.topic(str(topic), language)

    def say(self, language: str, key: str, **values: object) -> str:
        table = _templates(self._path)
        template = table.get(language, table["zh"])[key]
        if "topic" in values:
            values = {**values, "topic": self.topic_name(values["topic"], language)}
        if key in QUESTION_KEYS and "text" in values:
            values = {**values, "text": asked_once(str(values["text"]))}
        return Template(template).safe_substitute({k: str(v) for k, v in values.items()})

    def probe(self, ctx: ProbeContext) -> Line:
        return Line(text=self.say(ctx.language, "probe", probe=ctx.probe))

    def transition(self, ctx: TransitionContext) -> Line:
        """A lead-in that says how the question relates (deeper, back to basics, a contrast),
        then only what the previous question did not already ask."""
        table = _templates(self._path).get(ctx.language) or _templates(self._path)["zh"]
        relation = ctx.relation.replace("-", "_")
        key = f"followup_{relation}" if f"followup_{relation}" in table else "followup"
        text = unasked_part(str(ctx.values.get("text", "")), ctx.previous_question)
        return Line(text=self.say(ctx.language, key, **{**ctx.values, "text": text}))

    def clarify(self, ctx: ClarifyContext) -> Line:
        """Restate what the question asks, without answering it."""
        if ctx.probe:
            return Line(text=self.say(ctx.language, "clarify_probe", probe=ctx.probe))
        return Line(text=self.say(ctx.language, "clarify", question=ctx.question))

    @staticmethod
    def question_text(entry: QuestionEntry, language: str) -> str:
        return entry.text_en if language == "en" else entry.text
