"""The `sparring` command line: serve, ingest, search, eval, corpus."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from server.config import PROJECT_ROOT, Settings

if TYPE_CHECKING:
    from server.services import IngestReport

app = typer.Typer(
    help="Sparring: mock interviews for RL and LLM post-training.", no_args_is_help=True
)
eval_app = typer.Typer(help="Measure retrieval and grading quality.", no_args_is_help=True)
corpus_app = typer.Typer(help="Inspect and validate the question bank.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")
app.add_typer(corpus_app, name="corpus")
console = Console()

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _services(settings: Settings | None = None):
    from server.corpus.bank import BankError
    from server.retrieval.embedding_cache import EmbeddingCacheError
    from server.services import Services

    svc = Services(settings or Settings())
    try:
        _ = svc.bank
    except BankError as exc:
        console.print(f"[red]The question bank is invalid:[/red]\n{exc}")
        raise typer.Exit(2) from exc
    try:  # a setting that cannot work says so now, not as a traceback in the middle of an ingest
        _ = svc.embedding_cache
    except EmbeddingCacheError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from exc
    return svc


def _ready_line(embedder: str, report: IngestReport) -> str:
    written = f"{report.embedded} embedded"
    if report.cached:
        encoded = report.embedded - report.cached
        written = f"{report.embedded} indexed ({report.cached} from the embedding cache, {encoded} encoded)"
    return (
        f"Index ready ({embedder}): {written}, {report.unchanged} unchanged, "
        f"{report.deleted} deleted."
    )


def _ingest_with_progress(svc) -> None:
    if not console.is_terminal:
        # Output going to a file or a service manager's journal: a progress bar would show
        # nothing until the end, so plain lines (about every 10%) say how far embedding is.
        _ingest_with_lines(svc)
        return
    with Progress(
        TextColumn("[bold]Embedding questions[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task("embed", total=None)

        def update(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        report = svc.ingest(update)
    console.print(_ready_line(svc.embedder.name, report))


def _ingest_with_lines(svc) -> None:
    import time

    started = time.monotonic()
    said = {"step": -1}

    def update(done: int, total: int) -> None:
        if total == 0:
            return
        step = done * 10 // total
        if step > said["step"]:
            said["step"] = step
            elapsed = time.monotonic() - started
            console.print(f"Embedding questions: {done}/{total} ({elapsed:.0f} s)", soft_wrap=True)

    report = svc.ingest(update)
    console.print(_ready_line(svc.embedder.name, report))


@app.command()
def ingest() -> None:
    """Embed the question bank into Chroma (only new or changed entries)."""
    _ingest_with_progress(_services())


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (default 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8000)")] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=64,
            help="API worker processes (default 1); more than 1 needs SPARRING_CHROMA_URL",
        ),
    ] = None,
) -> None:
    """Serve the HTTP API (and the UI at /ui)."""
    from server.asgi import ScaleOutError, check_workers

    settings = Settings()
    host = host or settings.host
    port = port or settings.port
    workers = workers or settings.workers
    try:
        check_workers(settings, workers)
    except ScaleOutError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from exc
    if host not in LOOPBACK and not settings.auth_tokens:
        console.print(
            f"[red]Refusing to bind {host} without auth.[/red] Set SPARRING_AUTH_TOKENS="
            "'token:user,...' or bind 127.0.0.1."
        )
        raise typer.Exit(2)
    from server.api.app import create_app

    settings = settings.model_copy(update={"host": host, "port": port, "workers": workers})
    svc = _services(settings)
    _ingest_with_progress(svc)
    from server.grading.code_grader import startup_line

    console.print(startup_line(svc.code_grader))  # sets up and self-tests the code sandbox once
    from server.serving import announce_when_healthy, local_url, serve_app, serve_workers

    def ready() -> None:  # printed only once the server accepts connections
        console.print(f"Sparring on http://{host}:{port}  (UI: http://{host}:{port}/ui)")

    def listening() -> None:
        # The API answers now; "Sparring on" follows once the UI (built meanwhile) serves too.
        console.print(f"API answering at http://{host}:{port}/healthz; loading the UI…")

        def when_ui_ready() -> None:
            app_.state.ui_ready.wait()
            ready()

        threading.Thread(target=when_ui_ready, daemon=True).start()

    def stopping() -> None:
        console.print(
            f"Stopping (open browser tabs are closed after {settings.shutdown_grace_seconds:g} s)…"
        )

    if workers == 1:
        console.print("Starting the server (loading the UI)…")
        app_ = create_app(settings, svc, ui_in_background=True)
        serve_app(app_, settings, listening, stopping)
        console.print("Sparring stopped.")
        return
    # Each worker process builds its own app from the environment (server/asgi.py); the index is
    # embedded and the sandbox checked once, here, before they start.
    del svc
    os.environ.update(SPARRING_HOST=host, SPARRING_PORT=str(port), SPARRING_WORKERS=str(workers))
    console.print(f"{workers} worker processes, database {settings.sqlalchemy_url.split(':')[0]}")
    announce_when_healthy(local_url(host, port), ready)
    serve_workers(settings)


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to look for, in Chinese or English")],
    k: Annotated[int, typer.Option(min=1, max=50)] = 5,
    mode: Annotated[str, typer.Option(help="v3 | v2 | hybrid | bm25 | dense")] = "v3",
) -> None:
    """Search the question bank."""
    from server.retrieval.search import SearchMode

    if not query.strip():
        console.print("[red]Give a non-empty query.[/red]")
        raise typer.Exit(2)
    try:
        search_mode = SearchMode(mode)
    except ValueError as exc:
        console.print(f"[red]Unknown mode {mode!r}; use v3, v2, hybrid, bm25 or dense.[/red]")
        raise typer.Exit(2) from exc
    svc = _services()
    svc.ingest()
    if search_mode in (SearchMode.v3, SearchMode.v2):
        outcome = svc.searcher.find(query, k=k, mode=search_mode)
        hits = outcome.hits
    else:
        outcome, hits = None, svc.searcher.search(query, k=k, mode=search_mode)
    table = Table("#", "id", "topic", "question", "score", "relevance")
    for n, hit in enumerate(hits, start=1):
        relevance = "" if hit.relevance is None else f"{hit.relevance:.2f}"
        table.add_row(
            str(n),
            hit.entry.id,
            hit.entry.topic,
            hit.entry.text[:80],
            f"{hit.score:.4f}",
            relevance,
        )
    console.print(table)
    if outcome is not None:
        if outcome.match == "none":
            topics = ", ".join(outcome.nearest_topics)
            console.print(f"match: none — no close match in the bank — nearest topics: {topics}")
        else:
            console.print(f"match: {outcome.match.value}")


@app.command()
def interview(
    url: Annotated[str, typer.Option(help="Sparring server URL")] = "http://127.0.0.1:8000",
    token: Annotated[str, typer.Option(help="Bearer token, if the server requires one")] = "",
    mode: Annotated[str, typer.Option(help="interview | practice | review")] = "interview",
    minutes: Annotated[int, typer.Option(min=1, max=240)] = 30,
    questions: Annotated[int, typer.Option(min=1, max=50)] = 5,
    topic: Annotated[list[str] | None, typer.Option(help="Topic or area (repeatable)")] = None,
    company: Annotated[list[str] | None, typer.Option(help="Company (repeatable)")] = None,
    language: Annotated[str, typer.Option(help="zh | en")] = "zh",
    grader: Annotated[str, typer.Option(help="auto | rubric | llm")] = "auto",
    seed: Annotated[int | None, typer.Option(help="Fix the question order")] = None,
) -> None:
    """Run a mock interview in the terminal against a running server."""
    import sys

    from ui.api_client import SparringClient
    from ui.terminal import run_interview

    client = SparringClient(url, token)
    body = {
        "mode": mode,
        "duration_minutes": minutes,
        "num_questions": questions,
        "topics": topic or [],
        "companies": company or [],
        "language": language,
        "grader": grader,
    }
    if seed is not None:
        body["seed"] = seed
    try:
        sid = run_interview(client, body, console, sys.stdin)
    finally:
        client.close()
    if sid is None:
        raise typer.Exit(1)


@eval_app.command("retrieval")
def eval_retrieval(
    dataset: Annotated[
        list[Path] | None,
        typer.Option(
            help="JSONL of {q, expect} or {q, ids} (repeatable; default: tests/eval sets)"
        ),
    ] = None,
    split: Annotated[str, typer.Option(help="test (held out) | train | all")] = "test",
    show_misses: Annotated[bool, typer.Option(help="List the queries v3 missed")] = False,
) -> None:
    """BM25, dense, hybrid (v1), v2 and v3 side by side, overall and by language: recall@1/@5,
    MRR@10, the share of answerable queries told `none`, and the no-match AUC."""
    from server.evaluation.retrieval import RETRIEVAL_SETS, load_many
    from server.evaluation.retrieval import evaluate as evaluate_retrieval
    from server.retrieval.search import SearchMode

    paths = dataset or RETRIEVAL_SETS
    missing = [p for p in paths if not p.exists()]
    if missing or split not in ("test", "train", "all"):
        console.print(
            f"[red]No such dataset: {missing[0]}[/red]"
            if missing
            else "[red]split: test|train|all[/red]"
        )
        raise typer.Exit(2)
    cases = load_many(paths, None if split == "all" else split)
    svc = _services()
    svc.ingest()
    n_none = sum(c.no_match for c in cases)
    n_zh = sum(not c.no_match and c.language == "zh" for c in cases)
    title = (
        f"Retrieval, {split} split of {', '.join(p.name for p in paths)}: "
        f"{len(cases) - n_none} answerable ({n_zh} zh, {len(cases) - n_none - n_zh} en) "
        f"+ {n_none} no-match queries"
    )

    def num(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    columns = ("retriever", "recall@1", "recall@5", "MRR@10", "said none", "no-match AUC")
    table = Table(*columns, title=title)
    by_lang = Table("lang", *columns, title="By language (zh: the query has Chinese characters)")
    by_origin = Table(
        "origin",
        *columns,
        title="By origin (notes: as written in public notes and threads; team: our wording)",
    )
    modes = (SearchMode.bm25, SearchMode.dense, SearchMode.hybrid, SearchMode.v2, SearchMode.v3)
    results = {mode: evaluate_retrieval(svc.searcher, svc.bank, cases, mode) for mode in modes}
    for mode, s in results.items():
        table.add_row(
            mode.value,
            num(s.recall_at_1),
            num(s.recall_at_5),
            num(s.mrr_at_10),
            num(s.said_none),
            num(s.no_match_auc),
        )
    for breakdown, groups in ((by_lang, ("zh", "en")), (by_origin, ("notes", "team"))):
        for group in groups:
            # (only the ranked modes count no-match queries: label the group by v3's counts)
            counts = results[SearchMode.v3].by_group.get(group, {})
            label = f"{group} ({int(counts.get('queries') or 0)}+"
            label += f"{int(counts.get('no_match_queries') or 0)})"
            for mode, s in results.items():
                d = s.by_group.get(group, {})
                breakdown.add_row(
                    label,
                    mode.value,
                    num(d.get("recall_at_1")),
                    num(d.get("recall_at_5")),
                    num(d.get("mrr_at_10")),
                    num(d.get("said_none")),
                    num(d.get("no_match_auc")),
                )
    console.print(table)
    console.print(by_lang)
    console.print(by_origin)
    v3 = results[SearchMode.v3]
    console.print(
        f"embedder: {svc.embedder.name}; 'said none': answerable queries whose match was none; "
        f"no-match AUC: top-1 relevance, answerable vs no-match (v2, v3); "
        f"v3 told {num(v3.no_match_said_none)} of the no-match queries none"
    )
    if show_misses:
        for q in v3.misses:
            console.print(f"  miss: {q}")


def _fitting_searcher():
    """The services with a current index, and a searcher built with placeholder ranker weights (the
    stored ranker may not match the current features): what the ranker fits read candidates from."""
    from server.retrieval.ranker import RankerModel
    from server.retrieval.search import QuestionSearcher

    svc = _services()
    svc.ingest()
    searcher = QuestionSearcher(
        svc.bank,
        svc.documents,
        svc.vector_store,
        glossary=svc.glossary,
        ranker=RankerModel.untrained(),
    )
    return svc, searcher


@eval_app.command("fit-ranker")
def eval_fit_ranker(
    dataset: Annotated[
        list[Path] | None, typer.Option(help="JSONL sets; only their train split is used")
    ] = None,
) -> None:
    """Refit search v3's ranker and match thresholds on the train split; writes ranker.json."""
    from server.evaluation.fit_ranker import fit
    from server.evaluation.retrieval import RETRIEVAL_SETS, load_many
    from server.retrieval.ranker import MODEL_PATH

    svc, searcher = _fitting_searcher()
    report = fit(searcher, svc.bank, load_many(dataset or RETRIEVAL_SETS, "train"))
    report.model.save()
    meta = report.model.meta
    console.print(
        f"fitted on {report.queries} train queries ({report.rows} candidate rows); "
        f"5-fold CV: recall@1 {meta['cv_recall_at_1']}, recall@5 {report.cv_recall_at_5:.3f}, "
        f"answerable said none {meta['cv_answerable_said_none']}, "
        f"no-match AUC {report.cv_auc:.3f}, no-match said none {meta['cv_no_match_said_none']}; "
        f"strong >= {report.model.strong_at:.3f}, weak >= {report.model.weak_at:.3f} -> {MODEL_PATH}"
    )


@eval_app.command("ranker-cv")
def eval_ranker_cv(
    dataset: Annotated[
        list[Path] | None, typer.Option(help="JSONL sets; only their train split is used")
    ] = None,
    weight: Annotated[
        list[float] | None,
        typer.Option(help="listwise weights to compare (repeatable; 0 = pointwise only)"),
    ] = None,
    without: Annotated[
        Path | None,
        typer.Option(help="also score this set's train rows with a fit that leaves them out"),
    ] = None,
) -> None:
    """Out-of-fold figures of the ranker's fit on the train split, one line per listwise weight
    (all queries and those in real candidates' words), and optionally a set fitted without its
    own rows. Writes nothing: `fit-ranker` is what changes ranker.json."""
    from server.evaluation.ranker_cv import compare
    from server.evaluation.retrieval import RETRIEVAL_SETS, load_many

    paths = dataset or RETRIEVAL_SETS
    missing = [p for p in [*paths, *([without] if without else [])] if not p.exists()]
    if missing:
        console.print(f"[red]No such dataset: {missing[0]}[/red]")
        raise typer.Exit(2)
    if weight and any(w < 0 for w in weight):
        console.print("[red]--weight must be 0 or more[/red]")
        raise typer.Exit(2)
    svc, searcher = _fitting_searcher()
    lines = compare(searcher, svc.bank, load_many(paths, "train"), weight, without)
    table = Table(title="Ranker fit, out of fold on the train split (5 folds grouped by query)")
    for column in ("fit / rows", "queries", "recall@1", "recall@5", "MRR@10", "AUC", "nm none"):
        table.add_column(column)
    show = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for line in lines:
        table.add_row(
            escape(line.label),
            f"{line.answerable}+{line.queries - line.answerable}",
            show(line.recall_at_1),
            show(line.recall_at_5),
            show(line.mrr_at_10),
            show(line.no_match_auc),
            show(line.no_match_said_none),
        )
    console.print(table)
    console.print(
        "queries: answerable + no-match; AUC: top relevance, answerable vs no-match; nm none: "
        "no-match queries under the cut that keeps 92% of the answerable ones"
    )


DEFAULT_GRADING_SETS = [
    PROJECT_ROOT / "tests" / "eval" / "grading.jsonl",
    PROJECT_ROOT / "tests" / "eval" / "grading_v2",
]


def _grading_tables(title: str, cases, reports) -> None:
    questions = len({c.entry.id for c in cases})
    table = Table(
        "grader",
        "Spearman",
        "Kendall",
        "MAE",
        "adversarial failures",
        title=f"{title} ({len(cases)} answers, {questions} questions)",
    )
    for r in reports:
        table.add_row(
            r.name,
            f"{r.spearman:.3f}",
            f"{r.kendall:.3f}",
            f"{r.mae:.2f}",
            f"{len(r.adversarial_failures)} / {sum(1 for c in cases if c.max_ok is not None)}",
        )
    console.print(table)
    kinds = sorted({c.kind for c in cases})
    by_kind = Table("kind", "n", "label", *[r.name for r in reports], title="Mean score per kind")
    for kind in kinds:
        labels = [c.label for c in cases if c.kind == kind]
        by_kind.add_row(
            kind,
            str(len(labels)),
            f"{sum(labels) / len(labels):.1f}",
            *[f"{r.mean_by_kind.get(kind, 0):.1f}" for r in reports],
        )
    console.print(by_kind)
    failures = reports[0].adversarial_failures
    if failures:
        console.print(f"[bold]Adversarial failures of {reports[0].name}[/bold] (first 20):")
        for f in failures[:20]:
            console.print(f"  {escape(f)}")


def _llm_outcomes_table(outcomes) -> None:
    """How many grades the model gave, how many fell back and why (issue #18)."""
    console.print(escape(outcomes.summary()))
    table = Table("outcome", "grades", "first detail", title="LLM grading outcomes")
    table.add_row("graded by the model", str(outcomes.by_model), "")
    for reason, n in outcomes.fallbacks.most_common():
        table.add_row(f"fallback: {reason}", str(n), escape(outcomes.details[reason][:100]))
    table.add_row("no model call (empty answer)", str(outcomes.no_call), "")
    for flag, n in outcomes.process.most_common():
        table.add_row(f"model grade with {flag}", str(n), "")
    console.print(table)


def _fairness_tables(cases, svc) -> None:
    """Grader v3's fairness section (server/evaluation/fairness.py), per split."""
    from server.evaluation import fairness

    def grade(entry, answer):
        return svc.grading.rubric.grade(entry, answer)

    table = Table(
        "split",
        "cases",
        "clause found",
        "mean loss",
        "p95 loss",
        "> 3 points",
        "uncovers > 1 point",
        title="One wrong clause added to an honest answer (a misconception of its entry)",
    )
    for name in ("train", "test"):
        subset = [c for c in cases if c.split == name]
        if not subset:
            continue
        w = fairness.wrong_clause(subset, svc.grading.rubric).summary()
        table.add_row(
            name,
            f"{w['cases']:.0f}",
            f"{w['detected']:.0%}",
            f"{w['loss_mean']:.2f}",
            f"{w['loss_p95']:.1f}",
            f"{w['over_3_points']:.1%}",
            f"{w['uncovered_over_1']:.1%}",
        )
    console.print(table)
    t = fairness.true_statements(svc.bank, grade)
    console.print(
        f"True statements (corpus/true_statements.yaml): {t.statements} statements × every "
        f"entry = {t.gradings} grades, {len(t.flagged)} with a wrong claim listed"
    )
    for line in t.flagged[:10]:
        console.print(f"  [yellow]{escape(line)}[/yellow]")
    x = fairness.cross_question(cases, svc.bank, grade)
    over = len(x.over)
    console.print(
        f"Cross-question credit: {x.pairs} honest answers graded as a related question, mean "
        f"{sum(x.scores) / max(1, len(x.scores)):.2f}, {over} above {fairness.MISMATCH_CEILING}"
    )


@eval_app.command("grading")
def eval_grading(
    dataset: Annotated[
        list[Path] | None,
        typer.Option(help="JSONL files or directories (default: tests/eval grading sets)"),
    ] = None,
    grader: Annotated[str, typer.Option(help="rubric | llm (needs SPARRING_LLM_MODEL)")] = "rubric",
    split: Annotated[
        str, typer.Option(help="train (out-of-fold) | test (held out) | both | all (as is)")
    ] = "both",
    fairness: Annotated[
        bool, typer.Option(help="Also run the fairness checks (a few minutes)")
    ] = True,
) -> None:
    """Spearman, Kendall, MAE, per-kind means and adversarial failures, beside two baselines;
    then fairness: one wrong clause added to honest answers, true statements, cross-question credit.

    `train` refits the calibration per fold (grouped by question) and scores each answer with a
    model that never saw its question; `test` scores the held-out questions with the shipped
    calibration; `all` grades every answer of the given files as the server would."""
    from server.evaluation.fit_grader import out_of_fold, signals_for
    from server.evaluation.grading import (
        LlmOutcomes,
        evaluate_grader,
        length_baseline,
        load_datasets,
        report,
        tfidf_baseline,
    )
    from server.grading.models import GraderChoice
    from server.grading.service import GraderUnavailable

    if grader not in ("rubric", "llm") or split not in ("train", "test", "both", "all"):
        console.print(
            "[red]--grader must be rubric or llm; --split train, test, both or all.[/red]"
        )
        raise typer.Exit(2)
    paths = dataset or DEFAULT_GRADING_SETS
    missing = [p for p in paths if not p.exists()]
    if missing:
        console.print(f"[red]No such dataset: {missing[0]}[/red]")
        raise typer.Exit(2)
    svc = _services()
    try:
        cases = load_datasets(paths, svc.bank)
    except ValueError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc
    choice = GraderChoice(grader)
    outcomes = LlmOutcomes()

    def grade(case) -> float:
        result = svc.grading.grade(case.entry, case.answer, choice)
        outcomes.add(result)
        return result.score

    def baselines(subset):
        return [
            report("length-only", subset, length_baseline(subset)),
            report("tfidf-cosine", subset, tfidf_baseline(subset)),
        ]

    name = grader if grader == "rubric" else "llm"
    try:
        if split in ("train", "both") and grader == "rubric":
            train = [c for c in cases if c.split == "train"]
            if train:
                oof = out_of_fold(train, signals_for(train, svc.grading.rubric))
                reports = [report("rubric (out-of-fold)", train, oof), *baselines(train)]
                _grading_tables("Training split, out-of-fold", train, reports)
        if split in ("test", "both", "all"):
            subset = cases if split == "all" else [c for c in cases if c.split == "test"]
            if subset:
                main = evaluate_grader(name, subset, grade)
                title = "All answers" if split == "all" else "Held-out test split"
                _grading_tables(title, subset, [main, *baselines(subset)])
                console.print(f"Blank answers scored: {main.blank_scores}")
                if grader == "llm":
                    _llm_outcomes_table(outcomes)
        if fairness and grader == "rubric":
            _fairness_tables(cases, svc)
    except GraderUnavailable as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from exc


@eval_app.command("fit-grader")
def eval_fit_grader(
    dataset: Annotated[
        list[Path] | None,
        typer.Option(help="JSONL files or directories (default: tests/eval grading sets)"),
    ] = None,
) -> None:
    """Fit the rubric grader's calibration on the training split (never the test split) and
    write server/grading/calibration.json; prints the out-of-fold figures first."""
    from server.evaluation.fit_grader import fit_and_save, out_of_fold, signals_for
    from server.evaluation.grading import load_datasets, report
    from server.grading.calibration import FEATURE_NAMES

    svc = _services()
    cases = [
        c for c in load_datasets(dataset or DEFAULT_GRADING_SETS, svc.bank) if c.split == "train"
    ]
    signals = signals_for(cases, svc.grading.rubric)
    oof = report("rubric (out-of-fold)", cases, out_of_fold(cases, signals))
    console.print(
        f"{len(cases)} training answers: out-of-fold Spearman {oof.spearman:.3f}, "
        f"MAE {oof.mae:.2f}, adversarial failures {len(oof.adversarial_failures)}"
    )
    model = fit_and_save(cases, signals)
    for feature, coef in zip(FEATURE_NAMES, model.coef, strict=True):
        console.print(f"  {feature:24s} {coef:7.3f}")
    console.print(f"  intercept {model.intercept:.3f}; written server/grading/calibration.json")


@corpus_app.command("validate")
def corpus_validate() -> None:
    """Check every bank entry against the schema and the raw source."""
    from server.corpus.bank import BankError, check_against_source, load_bank
    from server.corpus.parser import parse_file

    settings = Settings()
    try:
        bank = load_bank(settings.questions_dir)
    except BankError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from exc
    parsed = [p for f in sorted(settings.raw_dir.glob("*.txt")) for p in parse_file(f)]
    from server.corpus.content_rules import content_problems
    from server.corpus.hygiene import hygiene_problems

    problems = check_against_source(bank, parsed)
    problems += [p for entry in bank for p in hygiene_problems(entry)]
    problems += [p for entry in bank for p in content_problems(entry)]
    from server.corpus.phrase_check import phrase_problems

    problems += phrase_problems(list(bank))
    for p in problems:
        console.print(f"[red]{p}[/red]")
    console.print(
        f"{len(bank)} entries, {len(problems)} problem(s) (source, schema, alias hygiene, content "
        "rules, wrong-claim phrases against every true sentence of the bank)."
    )
    if problems:
        raise typer.Exit(1)


@corpus_app.command("coding")
def corpus_coding(
    task: Annotated[str, typer.Option(help="Check only this task id")] = "",
) -> None:
    """Check the coding tasks: each reference passes its hidden tests and each known wrong answer
    fails exactly the tests it lists (runs them all in the sandbox)."""
    from server.corpus.bank import load_bank
    from server.corpus.coding import CodingTaskError, load_coding_tasks
    from server.grading.code_grader import verify_known_answers
    from server.grading.sandbox import Sandbox

    settings = Settings()
    try:
        tasks = load_coding_tasks(settings.coding_dir, load_bank(settings.questions_dir))
    except CodingTaskError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from exc
    sandbox = Sandbox()
    problems: list[str] = []
    for prepared in tasks.tasks:
        if task and prepared.task.id != task:
            continue
        found = verify_known_answers(prepared, sandbox)
        problems += found
        questions = ", ".join(prepared.task.questions)
        status = "[green]ok[/green]" if not found else f"[red]{len(found)} problem(s)[/red]"
        console.print(
            f"{prepared.task.id}: {len(prepared.cases)} cases, "
            f"{len(prepared.task.known_answers)} known answers, questions {questions}: {status}"
        )
    for p in problems:
        console.print(f"[red]{p}[/red]")
    if problems:
        raise typer.Exit(1)


@corpus_app.command("stats")
def corpus_stats(
    by: Annotated[str, typer.Option(help="Group by 'topic' (the source tag) or 'area'")] = "topic",
) -> None:
    """Per-topic rubric coverage."""
    from server.corpus.stats import rubric_coverage

    if by not in ("topic", "area"):
        console.print("[red]--by must be 'topic' or 'area'.[/red]")
        raise typer.Exit(2)
    settings = Settings()
    rows, total = rubric_coverage(settings.questions_dir, by=by)
    table = Table(by, "entries", "with rubric", "coverage", title=f"Rubric coverage by {by}")
    for area, n, done in rows:
        table.add_row(area, str(n), str(done), f"{100 * done / max(n, 1):.0f}%")
    n, done = total
    table.add_row("[bold]all[/bold]", str(n), str(done), f"{100 * done / max(n, 1):.0f}%")
    console.print(table)


if __name__ == "__main__":
    app()
