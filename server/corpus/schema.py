"""The question-bank schema: one YAML file per entry under corpus/questions/."""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ID_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
POINT_ID_RE = re.compile(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$")


class QuestionType(StrEnum):
    concept = "concept"
    derivation = "derivation"
    coding = "coding"
    design = "design"
    experience = "experience"


class Area(StrEnum):
    """Coarse subject areas: what per-topic mastery and charts group by."""

    rl_basics = "rl-basics"
    ppo = "ppo"
    grpo = "grpo"
    dpo = "dpo"
    kl = "kl"
    rlhf = "rlhf"
    reward = "reward"
    training = "training"
    agentic = "agentic"


class Relation(StrEnum):
    prerequisite = "prerequisite"
    follow_up = "follow-up"
    contrast = "contrast"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubQuestion(Strict):
    id: str
    text: str = Field(min_length=1)
    text_en: str = Field(min_length=1)


class KeyPoint(Strict):
    id: str
    text: str = Field(min_length=2)
    text_en: str = Field(min_length=2)
    weight: float = Field(gt=0, le=5)
    aliases: list[str] = Field(min_length=2)
    probe: str = Field(min_length=4)
    probe_en: str = Field(min_length=4)
    # Short statements (zh and en) that say this point backwards: roles swapped, direction inverted,
    # negated. A clause that asserts one earns no credit for the point and counts as a wrong claim.
    contradictions: list[str] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _id_shape(cls, v: str) -> str:
        if not POINT_ID_RE.match(v):
            raise ValueError(f"key point id {v!r} must be lower-case words joined by - or _")
        return v

    @field_validator("aliases", "contradictions")
    @classmethod
    def _aliases_nonempty(cls, v: list[str]) -> list[str]:
        if any(not a.strip() for a in v):
            raise ValueError("empty alias")
        return v


class Misconception(Strict):
    id: str
    text: str = Field(min_length=4)
    text_en: str = Field(min_length=4)
    correction: str = Field(min_length=4)
    # The correction in English, shown in English mode (None: the zh one is shown, marked as such).
    correction_en: str | None = Field(default=None, min_length=4)
    # Short phrases whose presence (not negated) strongly suggests the wrong statement.
    aliases: list[str] = Field(default_factory=list)


class Rubric(Strict):
    reference_answer: str = Field(min_length=40)
    reference_answer_en: str | None = None
    key_points: list[KeyPoint] = Field(min_length=3, max_length=8)
    misconceptions: list[Misconception] = Field(min_length=2)

    @model_validator(mode="after")
    def _unique_ids(self) -> Rubric:
        ids = [k.id for k in self.key_points] + [m.id for m in self.misconceptions]
        if len(ids) != len(set(ids)):
            raise ValueError("key point / misconception ids must be unique within an entry")
        return self


class Source(StrEnum):
    """Where an entry comes from: the seed question list (checked against corpus/raw/) or a
    hand-written supplementary entry (bank v3: real interview topics the seed lacks)."""

    seed = "seed"
    supplementary = "supplementary"


class SearchPhrasings(Strict):
    """The entry's question as candidates word it when they search (terse, colloquial, mixed
    Chinese and English, 面经 and prep-guide styles): search compares queries with them beside the
    question text. Written from the entry, never from the labelled search sets."""

    zh: list[str] = Field(default_factory=list)
    en: list[str] = Field(default_factory=list)

    @field_validator("zh", "en")
    @classmethod
    def _nonblank(cls, v: list[str]) -> list[str]:
        if any(len(p.strip()) < 2 for p in v):
            raise ValueError("a search phrasing must not be blank")
        if len(set(v)) != len(v):
            raise ValueError("search phrasings must not repeat")
        return v


class RelatedEdge(Strict):
    id: str
    relation: Relation


class QuestionEntry(Strict):
    id: str
    topic: str = Field(min_length=1)
    area: Area
    companies: list[str]
    text: str = Field(min_length=2)
    text_en: str = Field(min_length=2)
    subquestions: list[SubQuestion] = Field(default_factory=list)
    note: str | None = None
    note_en: str | None = None
    type: QuestionType
    difficulty: int = Field(ge=1, le=3)
    related: list[RelatedEdge] = Field(default_factory=list)
    rubric: Rubric | None = None
    source: Source = Source.seed
    # Where a supplementary entry's content comes from (papers, public notes): reviewers check it.
    references: list[str] = Field(default_factory=list)
    search_phrasings: SearchPhrasings = Field(default_factory=SearchPhrasings)

    @field_validator("id")
    @classmethod
    def _id_shape(cls, v: str) -> str:
        if not ID_RE.match(v):
            raise ValueError(f"id {v!r} must be lower-case words joined by hyphens")
        return v

    @model_validator(mode="after")
    def _subquestion_ids(self) -> QuestionEntry:
        for n, sq in enumerate(self.subquestions, start=1):
            if sq.id != f"{self.id}.{n}":
                raise ValueError(f"sub-question {n} of {self.id} must have id {self.id}.{n}")
        if any(edge.id == self.id for edge in self.related):
            raise ValueError("an entry cannot be related to itself")
        return self
