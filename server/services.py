"""The long-lived parts of a running Sparring: built once per process, passed explicitly."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

from server.config import Settings
from server.corpus.bank import QuestionBank, load_bank
from server.grading.service import GradingService
from server.interview.engine import InterviewEngine
from server.interview.phrasing import Phrasing
from server.retrieval.documents import SearchDocument, build_documents
from server.retrieval.embedder import Embedder, make_embedder
from server.retrieval.search import QuestionSearcher
from server.retrieval.vector_store import IngestReport, VectorStore, make_client
from server.storage.db import Database


@dataclass
class Services:
    settings: Settings

    @cached_property
    def bank(self) -> QuestionBank:
        return load_bank(self.settings.questions_dir)

    @cached_property
    def embedder(self) -> Embedder:
        return make_embedder(self.settings)

    @cached_property
    def documents(self) -> list[SearchDocument]:
        return build_documents(self.bank)

    @cached_property
    def vector_store(self) -> VectorStore:
        return VectorStore(
            make_client(self.settings), self.embedder, self.settings.collection_prefix
        )

    def ingest(self, progress: Callable[[int, int], None] | None = None) -> IngestReport:
        return self.vector_store.ingest(self.documents, progress)

    @cached_property
    def searcher(self) -> QuestionSearcher:
        return QuestionSearcher(
            self.bank, self.documents, self.vector_store, rrf_k=self.settings.rrf_k
        )

    @cached_property
    def grading(self) -> GradingService:
        return GradingService(self.settings, self.embedder, self.searcher.rank_of)

    @cached_property
    def database(self) -> Database:
        return Database(self.settings)

    @cached_property
    def engine(self) -> InterviewEngine:
        return InterviewEngine(
            self.bank, self.grading, self.searcher, Phrasing(self.settings.prompts_dir)
        )
