"""`sparring interview`: a mock interview in the terminal, against the HTTP API (rich panels)."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.markdown import Markdown
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from ui.api_client import ApiError, SparringClient, mm_ss, seconds_left

COMMANDS = {
    "/hint": "hint",
    "/skip": "skip",
    "/followup": "followup",
    "/end": "end",
    "/quit": "end",
}
HELP = "Answer, then press Enter (end a line with \\ to continue it). Commands: /hint /skip /followup /end"


def remaining(deadline: str | None) -> str:
    if not deadline:
        return "untimed"
    left = seconds_left(deadline)
    if left <= 0:
        return "time is up"
    return f"{mm_ss(left)} left"


def read_answer(console: Console, stream: TextIO) -> str | None:
    lines: list[str] = []
    while True:
        console.print("[bold cyan]>[/bold cyan] ", end="")
        line = stream.readline()
        if not line:
            return None if not lines else "\n".join(lines)
        line = line.rstrip("\n")
        if line.endswith("\\"):
            lines.append(line[:-1])
            continue
        lines.append(line)
        return "\n".join(lines)


def grade_panel(grade: dict, late: bool) -> Panel:
    table = Table.grid(padding=(0, 1))
    for kp in grade["key_points"]:
        mark = "[green]✓[/green]" if kp["covered"] else "[red]✗[/red]"
        evidence = f" [dim]“{escape(kp['evidence'])}”[/dim]" if kp.get("evidence") else ""
        table.add_row(mark, f"{escape(kp['text'])}{evidence}")
    for m in grade["misconceptions"]:
        table.add_row("[yellow]⚠[/yellow]", escape(f"{m['text']} → {m['correction']}"))
    for t in grade.get("tests", []):
        mark = "[green]✓ test[/green]" if t["passed"] else "[red]✗ test[/red]"
        reason = "" if t["passed"] else f" [dim]— {escape(t['message'])}[/dim]"
        table.add_row(mark, f"{escape(t['explain'])}{reason}")
    flags = ", ".join(grade.get("flags", [])) + (
        " (late)" if late and "late" not in grade.get("flags", []) else ""
    )
    title = f"score {grade['score']} / 10 · grader {grade['grader']}" + (
        f" · {flags}" if flags else ""
    )
    return Panel(table, title=title, border_style="green" if grade["score"] >= 6 else "yellow")


def run_interview(
    client: SparringClient,
    settings: dict,
    console: Console,
    stream: TextIO,
) -> str | None:
    """Run one interview; returns the session id (None if it could not start)."""
    try:
        session = client.start(**settings)
    except ApiError as exc:
        console.print(f"[red]Could not start the interview:[/red] {exc}")
        return None
    sid, deadline = session["id"], session["deadline"]
    console.print(Panel(HELP, title=f"Sparring · session {sid[:8]} · {remaining(deadline)}"))
    console.print(
        Panel(escape(session["question"]["prompt"]), title="Interviewer", border_style="cyan")
    )
    while True:
        text = read_answer(console, stream)
        action = "end" if text is None else COMMANDS.get(text.strip().lower(), "answer")
        try:
            if action == "hint":
                hint = client.hint(sid)
                console.print(
                    Panel(
                        f"{hint['hint']}\n[dim]score cap now {hint['score_cap']}[/dim]",
                        title="Hint",
                    )
                )
                continue
            if action == "end":
                client.end(sid)
                break
            if action == "followup":
                nxt = client.followup(sid)
                console.print(
                    Panel(escape(nxt["prompt"]), title="Interviewer", border_style="cyan")
                )
                continue
            result = client.skip(sid) if action == "skip" else client.answer(sid, text or "")
        except ApiError as exc:
            console.print(f"[red]{escape(str(exc))}[/red]")
            if exc.code in ("session_ended", "not_found"):
                break
            continue
        if action == "answer":
            console.print(grade_panel(result["grade"], result.get("late", False)))
        nxt = result["next"]
        console.print(
            Panel(
                escape(nxt["prompt"]),
                title=f"Interviewer · {remaining(deadline)}",
                border_style="cyan",
            )
        )
        if nxt["kind"] == "end":
            break
    show_report(client, sid, console)
    return sid


def show_report(client: SparringClient, sid: str, console: Console) -> None:
    try:
        report = client.report(sid)
    except ApiError as exc:
        console.print(f"[red]No report: {exc}[/red]")
        return
    table = Table(
        "#",
        "question",
        "score",
        "covered",
        "missed",
        title=f"Report · overall {report['overall_score']} / 10",
    )
    for q in report["questions"]:
        table.add_row(
            str(q["number"]),
            escape(q["text"][:50]),
            f"{q['score']}",
            str(len(q["covered"])),
            escape(", ".join(m["text"][:24] for m in q["missed"][:3])),
        )
    console.print(table)
    topics = " · ".join(f"{area} {avg}" for area, avg in report["per_topic"].items())
    console.print(Markdown(f"**Per topic:** {topics}"))
