"""The searchable documents derived from the bank: question text, its English text, sub-questions."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from server.corpus.bank import QuestionBank


@dataclass(frozen=True)
class SearchDocument:
    doc_id: str
    entry_id: str
    subquestion_id: str  # "" when the document is the entry itself
    text: str

    def content_hash(self, embedder_name: str) -> str:
        return hashlib.sha256(f"{embedder_name}\x00{self.text}".encode()).hexdigest()


def build_documents(bank: QuestionBank) -> list[SearchDocument]:
    docs: list[SearchDocument] = []
    for e in bank:
        docs.append(SearchDocument(f"{e.id}#zh", e.id, "", f"{e.topic}：{e.text}"))
        docs.append(SearchDocument(f"{e.id}#en", e.id, "", e.text_en))
        for sq in e.subquestions:
            docs.append(SearchDocument(f"{sq.id}#zh", e.id, sq.id, f"{e.topic}：{sq.text}"))
            docs.append(SearchDocument(f"{sq.id}#en", e.id, sq.id, sq.text_en))
    return docs
