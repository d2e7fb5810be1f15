"""Display names of the bank's topics and areas in zh and en (data: corpus/topics.yaml)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel

from server.yaml_files import read_yaml


class TopicNames(BaseModel):
    areas: dict[str, dict[str, str]]  # area id -> {"zh", "en"}
    topics: dict[str, str]  # topic (zh, as in the bank) -> en

    def topic(self, topic: str, language: str) -> str:
        return self.topics.get(topic, topic) if language == "en" else topic

    def area(self, area: str, language: str) -> str:
        return self.areas.get(area, {}).get("en" if language == "en" else "zh", area)


@lru_cache(maxsize=4)
def load_topic_names(corpus_dir: Path) -> TopicNames:
    path = corpus_dir / "topics.yaml"
    if not path.exists():
        return TopicNames(areas={}, topics={})
    return TopicNames.model_validate(read_yaml(path))
