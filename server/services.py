"""The long-lived parts of a running Sparring: built once per process, passed explicitly."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from server.config import Settings
from server.corpus.bank import QuestionBank, load_bank
from server.corpus.coding import CodingTasks, load_coding_tasks
from server.corpus.topic_names import TopicNames, load_topic_names
from server.grading.code_grader import CodeGrader
from server.grading.sandbox import Sandbox, SandboxLimits
from server.grading.service import GradingService
from server.interview.engine import InterviewEngine
from server.interview.phrasing import Phrasing
from server.retrieval.documents import (
    SearchDocument,
    build_documents,
    build_phrasing_documents,
    build_probe_documents,
)
from server.retrieval.embedder import Embedder, make_embedder
from server.retrieval.glossary import Glossary
from server.retrieval.search import QuestionSearcher
from server.storage.db import Database, secure_dir

if TYPE_CHECKING:  # chromadb loads with the store (seconds): when a search or ingest needs it
    from server.retrieval.embedding_cache import EmbeddingCache
    from server.retrieval.vector_store import VectorStore

# Next to the Chroma files: what the index holds (embedder, every document's content hash, the
# named query vectors). A start that finds it current skips opening Chroma at all.
INDEX_MANIFEST = "sparring-index.sha256"
# Beside it: a digest of the files the index is derived from (bank, glossary, the code that turns
# them into documents and concept names). When those bytes are unchanged a start trusts the
# manifest without deriving anything (the concept names alone take seconds of CPU).
INDEX_INPUTS = "sparring-inputs.sha256"
SERVER_DIR = Path(__file__).resolve().parent


@dataclass(frozen=True)
class IngestReport:
    """What an ingest did (the store's own report type would import Chroma on a warm start)."""

    embedded: int  # written to the index: encoded now or read from the embedding cache
    deleted: int
    unchanged: int
    cached: int = 0  # of `embedded`, read from the embedding cache instead of the encoder


@dataclass
class Services:
    settings: Settings

    def __post_init__(self) -> None:
        # The data dir holds every user's answers and the index: private before anything writes.
        secure_dir(self.settings.data_dir)

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
    def probe_documents(self) -> list[SearchDocument]:
        """What search compares queries with beside the questions, in a collection of its own:
        the key points' follow-up questions and the entries' search phrasings."""
        return build_probe_documents(self.bank) + build_phrasing_documents(self.bank)

    @cached_property
    def embedding_cache(self) -> EmbeddingCache | None:
        """None when turned off; EmbeddingCacheError when the setting names an unusable file."""
        from server.retrieval.embedding_cache import EmbeddingCache

        path = self.settings.embedding_cache_file
        return EmbeddingCache(path) if path else None

    @cached_property
    def vector_store(self) -> VectorStore:
        from server.retrieval.vector_store import VectorStore, make_client

        return VectorStore(
            make_client(self.settings),
            self.embedder,
            self.settings.collection_prefix,
            self.embedding_cache,
        )

    def _concept_names(self) -> dict[str, str]:
        from server.retrieval.search import concept_names

        return concept_names(self.glossary, self.bank)

    def _index_digest(self) -> str:
        name = self.embedder.name
        parts = [name, self.settings.collection_prefix]
        parts += sorted(f"{d.doc_id}={d.content_hash(name)}" for d in self.documents)
        parts += sorted(f"{d.doc_id}={d.content_hash(name)}" for d in self.probe_documents)
        parts += sorted(f"{c}={text}" for c, text in self._concept_names().items())
        return hashlib.sha256(json.dumps(parts, ensure_ascii=False).encode()).hexdigest()

    def _inputs_digest(self) -> str:
        """A hash of the bytes the index is derived from: every question file, the glossary, the
        code under server/corpus and server/retrieval, the embedder's name and the prefix. Reading
        them takes milliseconds; any change falls back to the full digest."""
        corpus = self.settings.corpus_dir
        files = sorted(self.settings.questions_dir.glob("*.yaml"))
        files += [corpus / "glossary.yaml"]
        files += sorted((SERVER_DIR / "corpus").glob("*.py"))
        files += sorted((SERVER_DIR / "retrieval").glob("*.py"))
        h = hashlib.sha256(f"{self.embedder.name}\0{self.settings.collection_prefix}".encode())
        for path in files:
            h.update(f"\0{path.name}\0".encode())
            h.update(path.read_bytes() if path.exists() else b"-")
        return h.hexdigest()

    def ingest(self, progress: Callable[[int, int], None] | None = None) -> IngestReport:
        """Embed what changed (question documents, the key points' follow-up questions and the
        entries' search phrasings, and the glossary's concept names as query vectors).
        With the embedded index, a manifest says when nothing changed since the last ingest:
        then neither Chroma nor the model is loaded now (a warm start). When not even the input
        files changed, the manifest is trusted without deriving the documents' digest."""
        chroma = None if self.settings.chroma_url else self.settings.chroma_path
        manifest = chroma / INDEX_MANIFEST if chroma else None
        inputs = chroma / INDEX_INPUTS if chroma else None
        inputs_digest = self._inputs_digest() if inputs else ""
        if manifest and manifest.exists() and inputs and _holds(inputs, inputs_digest):
            return self._current(progress)
        digest = self._index_digest()
        if manifest and _holds(manifest, digest):
            if inputs:
                inputs.write_text(inputs_digest + "\n")
            return self._current(progress)
        done = self.vector_store.ingest(self.documents, progress, probes=self.probe_documents)
        self.vector_store.named_query_vectors(self._concept_names())
        if manifest and inputs:
            manifest.write_text(digest + "\n")
            inputs.write_text(inputs_digest + "\n")
        return IngestReport(
            embedded=done.embedded,
            deleted=done.deleted,
            unchanged=done.unchanged,
            cached=done.cached,
        )

    def _current(self, progress: Callable[[int, int], None] | None) -> IngestReport:
        if progress:
            progress(0, 0)
        return IngestReport(
            embedded=0, deleted=0, unchanged=len(self.documents) + len(self.probe_documents)
        )

    @cached_property
    def searcher(self) -> QuestionSearcher:
        return QuestionSearcher(
            self.bank,
            self.documents,
            self.vector_store,
            rrf_k=self.settings.rrf_k,
            glossary=self.glossary,
        )

    @cached_property
    def glossary(self) -> Glossary:
        return Glossary.load(self.settings.corpus_dir / "glossary.yaml")

    @cached_property
    def coding_tasks(self) -> CodingTasks:
        return load_coding_tasks(self.settings.coding_dir, self.bank)

    @cached_property
    def code_grader(self) -> CodeGrader | None:
        if not self.settings.sandbox_enabled:
            return None
        limits = SandboxLimits(
            wall_seconds=self.settings.sandbox_wall_seconds,
            cpu_seconds=self.settings.sandbox_cpu_seconds,
            memory_mb=self.settings.sandbox_memory_mb,
            max_parallel=self.settings.sandbox_max_parallel,
            pool_size=self.settings.sandbox_pool_size,
            torch_pool_size=self.settings.sandbox_torch_pool_size,
        )
        return CodeGrader(self.coding_tasks, Sandbox(limits))

    @cached_property
    def grading(self) -> GradingService:
        return GradingService(self.settings, self.code_grader, self.bank)

    @cached_property
    def database(self) -> Database:
        return Database(self.settings)

    @cached_property
    def engine(self) -> InterviewEngine:
        return InterviewEngine(self.bank, self.grading, self.searcher, self.phrasing)

    @cached_property
    def phrasing(self) -> Phrasing:
        """Template lines; with an LLM configured, the LLM interviewer (templates as fallback)."""
        if self.settings.llm_configured and self.settings.llm_interviewer:
            from server.interview.llm_interviewer import LlmInterviewer

            return LlmInterviewer(self.settings, self.topic_names)
        return Phrasing(self.settings.prompts_dir, self.topic_names)

    @cached_property
    def topic_names(self) -> TopicNames:
        return load_topic_names(self.settings.corpus_dir)


def _holds(path: Path, digest: str) -> bool:
    return path.exists() and path.read_text().strip() == digest
