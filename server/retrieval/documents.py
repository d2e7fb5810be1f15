"""The searchable documents derived from the bank: question text, its English text, sub-questions."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from server.corpus.bank import QuestionBank
from server.corpus.parser import split_numbered
from server.corpus.schema import QuestionEntry


@dataclass(frozen=True)
class SearchDocument:
    doc_id: str
    entry_id: str
    subquestion_id: str  # "" when the document is the entry itself
    text: str

    def content_hash(self, embedder_name: str) -> str:
        return hashlib.sha256(f"{embedder_name}\x00{self.text}".encode()).hexdigest()


def headline(text: str, limit: int) -> str:
    """The part of a multi-part question before its numbered parts (or its opening)."""
    stem, parts = split_numbered(text)
    head = stem if parts and len(stem) >= 4 else text
    return head[:limit]


def build_documents(bank: QuestionBank) -> list[SearchDocument]:
    """Dense documents. A multi-part entry is embedded as its headline plus one document per
    part, so long texts are not embedded twice (ingest time) and each part can be hit alone."""
    docs: list[SearchDocument] = []
    for e in bank:
        zh, en = e.text, e.text_en
        if e.subquestions:
            zh, en = headline(e.text, 120), headline(e.text_en, 300)
        docs.append(SearchDocument(f"{e.id}#zh", e.id, "", f"{e.topic}：{zh}"))
        docs.append(SearchDocument(f"{e.id}#en", e.id, "", en))
        for sq in e.subquestions:
            docs.append(SearchDocument(f"{sq.id}#zh", e.id, sq.id, f"{e.topic}：{sq.text}"))
            docs.append(SearchDocument(f"{sq.id}#en", e.id, sq.id, sq.text_en))
    return docs


def build_probe_documents(bank: QuestionBank) -> list[SearchDocument]:
    """Each rubric key point's follow-up question (zh and en), embedded apart from the questions:
    written as an interviewer asks about one point ("为什么要减 baseline？"), they are worded the
    way candidates search for that point. Search uses them only as a ranking feature."""
    docs: list[SearchDocument] = []
    for e in bank:
        if e.rubric is None:
            continue
        for kp in e.rubric.key_points:
            docs.append(SearchDocument(f"{e.id}/{kp.id}#zh", e.id, "", kp.probe))
            docs.append(SearchDocument(f"{e.id}/{kp.id}#en", e.id, "", kp.probe_en))
    return docs


def build_phrasing_documents(bank: QuestionBank) -> list[SearchDocument]:
    """Each entry's search phrasings (zh and en, `search_phrasings` in its YAML): the question in
    the words candidates search with. Stored beside the probes and, like them, used by search only
    as a ranking feature, so the dense baseline still reads the bank's own questions alone."""
    docs: list[SearchDocument] = []
    for e in bank:
        for lang, texts in (("zh", e.search_phrasings.zh), ("en", e.search_phrasings.en)):
            docs += [
                SearchDocument(f"{e.id}~{n}#{lang}", e.id, "", text)
                for n, text in enumerate(texts, start=1)
            ]
    return docs


def is_phrasing(doc_id: str) -> bool:
    """Phrasing documents share the probes' collection; their ids carry `~` (entry ids cannot)."""
    return "~" in doc_id


def lexical_text(entry: QuestionEntry) -> str:
    """Everything BM25 may match for an entry: the question in both languages, its parts, and the
    rubric's key points with their aliases (the words candidates use for the same ideas)."""
    parts = [entry.topic, entry.text, entry.text_en]
    if entry.rubric is not None:
        for kp in entry.rubric.key_points:
            parts += [kp.text, kp.text_en, " ".join(kp.aliases)]
    return "\n".join(parts)
