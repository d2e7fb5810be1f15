"""The end-of-interview report, as JSON and as Markdown."""

from __future__ import annotations

from server.corpus.bank import QuestionBank
from server.interview.progress import scored_questions
from server.interview.schemas import Mode, Report, ReportQuestion
from server.storage.models import InterviewSession, aware


def build_report(bank: QuestionBank, session: InterviewSession) -> Report:
    questions = []
    per_area: dict[str, list[float]] = {}
    for number, q in enumerate(scored_questions(session), start=1):
        entry = bank.get(q.entry_id)
        if entry is None or entry.rubric is None:
            continue
        result = q.result or {}
        points = result.get("key_points", [])
        probes = {kp.id: kp.probe for kp in entry.rubric.key_points}
        covered = [
            {"id": p["id"], "text": p["text"], "evidence": p.get("evidence")}
            for p in points
            if p.get("covered")
        ]
        missed = [
            {"id": kp.id, "text": kp.text, "probe": probes[kp.id]}
            for kp in entry.rubric.key_points
            if kp.id not in {c["id"] for c in covered}
        ]
        asked, answered = aware(q.asked_at), aware(q.answered_at)
        score = float(q.score or 0.0)
        per_area.setdefault(entry.area.value, []).append(score)
        questions.append(
            ReportQuestion(
                number=number,
                entry_id=entry.id,
                kind=q.kind,
                text=entry.text,
                topic=entry.topic,
                area=entry.area.value,
                status=q.status,
                score=score,
                grader=q.grader,
                covered=covered,
                missed=missed,
                misconceptions=result.get("misconceptions", []),
                reference_answer=entry.rubric.reference_answer,
                time_used_seconds=(answered - asked).total_seconds()
                if asked and answered
                else None,
                hints=len(q.hints or []),
                probes=len(q.probes or []),
                flags=result.get("flags", []) or ([q.status] if q.status != "done" else []),
            )
        )
    overall = round(sum(q.score for q in questions) / len(questions), 1) if questions else 0.0
    return Report(
        session_id=session.id,
        mode=Mode(session.mode),
        status=session.status,
        end_reason=session.end_reason,
        created_at=aware(session.created_at),
        ended_at=aware(session.ended_at),
        overall_score=overall,
        questions=questions,
        per_topic={a: round(sum(v) / len(v), 1) for a, v in sorted(per_area.items())},
    )


def report_markdown(report: Report) -> str:
    lines = [
        f"# Sparring interview report — {report.session_id}",
        "",
        f"- mode: {report.mode.value}; status: {report.status}"
        + (f" ({report.end_reason})" if report.end_reason else ""),
        f"- overall score: **{report.overall_score} / 10** over {len(report.questions)} question(s)",
        "",
        "## Per topic",
        "",
        "| topic | average |",
        "|---|---|",
        *[f"| {area} | {avg} |" for area, avg in report.per_topic.items()],
        "",
        "## Questions",
    ]
    for q in report.questions:
        used = f"{q.time_used_seconds:.0f}s" if q.time_used_seconds is not None else "—"
        lines += [
            "",
            f"### {q.number}. {q.text}",
            "",
            f"score **{q.score}** · grader {q.grader or '—'} · {q.status} · time {used}"
            f" · probes {q.probes} · hints {q.hints}"
            + (f" · flags: {', '.join(q.flags)}" if q.flags else ""),
            "",
        ]
        lines += [f"- ✓ {c['text']} — “{c.get('evidence') or ''}”" for c in q.covered]
        lines += [f"- ✗ {m['text']} — {m['probe']}" for m in q.missed]
        for m in q.misconceptions:
            lines.append(f"- ⚠ {m.get('text')} → {m.get('correction')}")
        lines += [
            "",
            "<details><summary>Reference answer</summary>",
            "",
            q.reference_answer,
            "",
            "</details>",
        ]
    return "\n".join(lines) + "\n"
