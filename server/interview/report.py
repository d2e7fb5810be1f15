"""The end-of-interview report, as JSON and as Markdown."""

from __future__ import annotations

from server.corpus.bank import QuestionBank
from server.corpus.markdown import bank_markdown, inline_quote, readable_math
from server.corpus.topic_names import TopicNames
from server.interview.labels import failure_reason, flag_word
from server.interview.progress import scored_questions
from server.interview.schemas import Mode, Report, ReportQuestion
from server.storage.models import InterviewSession, aware


def build_report(
    bank: QuestionBank, session: InterviewSession, names: TopicNames | None = None
) -> Report:
    questions = []
    per_area: dict[str, list[float]] = {}
    for number, q in enumerate(scored_questions(session), start=1):
        entry = bank.get(q.entry_id)
        if entry is None or entry.rubric is None:
            continue
        result = q.result or {}
        points = result.get("key_points", [])
        probes = {kp.id: kp.probe for kp in entry.rubric.key_points}
        english = {kp.id: (kp.text_en, kp.probe_en) for kp in entry.rubric.key_points}
        covered = [
            {
                "id": p["id"],
                "text": p["text"],
                "text_en": english.get(p["id"], ("", ""))[0],
                "evidence": p.get("evidence"),
            }
            for p in points
            if p.get("covered")
        ]
        asked_probes = set(q.probes or [])
        # Read from the bank, so a report of an old grade shows today's English text.
        wrong_en = {m.id: (m.text_en, m.correction_en or "") for m in entry.rubric.misconceptions}
        missed = [
            {
                "id": kp.id,
                "text": kp.text,
                "text_en": kp.text_en,
                "probe": probes[kp.id],
                "probe_en": kp.probe_en,
                # Whether the interviewer asked this probe; the others are the rubric's questions
                # for later review, not follow-ups the candidate saw.
                "asked": kp.id in asked_probes,
            }
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
                misconceptions=[
                    {
                        **m,
                        "text_en": wrong_en.get(str(m.get("id")), ("", ""))[0]
                        or m.get("text_en", ""),
                        "correction_en": wrong_en.get(str(m.get("id")), ("", ""))[1]
                        or m.get("correction_en", ""),
                    }
                    for m in result.get("misconceptions", [])
                ],
                reference_answer=entry.rubric.reference_answer,
                reference_answer_en=entry.rubric.reference_answer_en or None,
                probes_asked=[
                    {"id": pid, "probe": probes[pid], "probe_en": english[pid][1]}
                    for pid in q.probes or []
                    if pid in probes
                ],
                text_en=entry.text_en,
                topic_en=names.topic(entry.topic, "en") if names else entry.topic,
                tests=result.get("tests", []),
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
        language=session.language,
    )


MD = {
    "zh": {
        "title": "# Sparring 面试报告 — {id}",
        "mode": {"interview": "计时面试", "practice": "自由练习", "review": "弱项复习"},
        "status": {"ended": "已结束", "active": "进行中"},
        "reason": {
            "time": "时间到",
            "done": "题目答完",
            "exhausted": "题库用尽",
            "manual": "手动结束",
        },
        "line": "- 模式：{mode}；状态：{status}",
        "overall": "- 总分：**{score} / 10**，共 {n} 题",
        "per_topic": "## 各领域得分",
        "table": "| 领域 | 平均分 |",
        "questions": "## 逐题",
        "meta": "得分 **{score}** · 评分器 {grader} · {qstatus} · 用时 {used} · 追问 {probes} · 提示 {hints}",
        "qstatus": {"done": "已答", "skipped": "跳过", "unanswered": "未作答"},
        "flags": " · 标记：",
        "tests": "**隐藏测试：{passed}/{total} 通过**",
        "reference": "参考答案",
        "reference_en_missing": "",
        "probes_asked": "**追问过：**",
        "wrong": "错误说法",
        "asked": "已追问：",
        "review": "复习时想想：",
    },
    "en": {
        "title": "# Sparring interview report — {id}",
        "mode": {"interview": "timed interview", "practice": "practice", "review": "review"},
        "status": {"ended": "ended", "active": "running"},
        "reason": {
            "time": "time is up",
            "done": "all questions asked",
            "exhausted": "no questions left",
            "manual": "ended by you",
        },
        "line": "- mode: {mode}; status: {status}",
        "overall": "- overall score: **{score} / 10** over {n} question(s)",
        "per_topic": "## Per area",
        "table": "| area | average |",
        "questions": "## Questions",
        "meta": "score **{score}** · grader {grader} · {qstatus} · time {used} · follow-ups {probes}"
        " · hints {hints}",
        "qstatus": {"done": "answered", "skipped": "skipped", "unanswered": "not answered"},
        "flags": " · flags: ",
        "tests": "**Hidden tests: {passed}/{total} passed**",
        "reference": "Reference answer",
        "reference_en_missing": "*This question has no English reference yet; the Chinese one "
        "follows.*",
        "probes_asked": "**Follow-ups asked:**",
        "wrong": "wrong claim",
        "asked": "asked as a follow-up: ",
        "review": "to think about: ",
    },
}


def reference_for(q: ReportQuestion, language: str) -> tuple[str, bool]:
    """The reference answer to show in `language`, and whether it is a stand-in (an English
    report showing the Chinese reference because the bank has no English one yet)."""
    if language == "en":
        if q.reference_answer_en:
            return q.reference_answer_en, False
        return q.reference_answer, True
    return q.reference_answer, False


def question_markdown(q: ReportQuestion, language: str = "en") -> tuple[str, list[str]]:
    """One question's review as Markdown: its heading line and its body (meta, ✓/✗ per point with
    evidence, wrong claims with corrections, hidden tests, follow-ups asked, reference answer).
    The downloaded report and the Report tab both show exactly this."""
    lang = "zh" if language == "zh" else "en"
    en = lang == "en"
    w = MD[lang]
    used = f"{q.time_used_seconds:.0f}s" if q.time_used_seconds is not None else "—"
    text = q.text_en if en and q.text_en else q.text
    heading = f"{q.number}. {readable_math(text)}"
    flags = [flag_word(f, lang) for f in q.flags]
    lines = [
        w["meta"].format(
            score=q.score,
            grader=q.grader or "—",
            qstatus=w["qstatus"].get(q.status, flag_word(q.status, lang)),
            used=used,
            probes=q.probes,
            hints=q.hints,
        )
        + (w["flags"] + ", ".join(flags) if flags else ""),
        "",
    ]
    lines += [
        f"- ✓ {readable_math(c.get('text_en') if en and c.get('text_en') else c['text'])}"
        # a quote holding code becomes one code span: it cannot break the list
        + (f" — “{inline_quote(c['evidence'])}”" if c.get("evidence") else "")
        for c in q.covered
    ]
    lines += [
        f"- ✗ {readable_math(m.get('text_en') if en and m.get('text_en') else m['text'])}"
        f" — {w['asked'] if m.get('asked') else w['review']}"
        f"{readable_math(m.get('probe_en') if en and m.get('probe_en') else m['probe'])}"
        for m in q.missed
    ]
    for m in q.misconceptions:
        said = f"“{inline_quote(str(m['evidence']), 160)}” — " if m.get("evidence") else ""
        wrong = m.get("text_en") if en and m.get("text_en") else m.get("text")
        fix = m.get("correction_en") if en and m.get("correction_en") else m.get("correction")
        lines.append(f"- ⚠ {said}{readable_math(str(wrong))} → {readable_math(str(fix))}")
    if q.tests:
        passed = sum(bool(t.get("passed")) for t in q.tests)
        lines += ["", w["tests"].format(passed=passed, total=len(q.tests)), ""]
        for t in q.tests:
            explain = t.get("explain_en") if en and t.get("explain_en") else t.get("explain", "")
            why = (
                "" if t.get("passed") else f" — `{failure_reason(str(t.get('message', '')), lang)}`"
            )
            lines.append(f"- {'✓' if t.get('passed') else '✗'} {explain}{why}")
            lines += failing_case_details(t, en)
    if q.probes_asked:
        lines += ["", w["probes_asked"], ""]
        lines += [
            f"{i}. {readable_math(p.get('probe_en') if en and p.get('probe_en') else p['probe'])}"
            for i, p in enumerate(q.probes_asked, start=1)
        ]
    reference, stand_in = reference_for(q, lang)
    lines += [
        "",
        f"<details><summary>{w['reference']}</summary>",
        "",
        *([w["reference_en_missing"], ""] if stand_in else []),
        bank_markdown(reference),
        "",
        "</details>",
    ]
    return heading, lines


def report_markdown(report: Report, names: TopicNames | None = None, language: str = "en") -> str:
    """The report as Markdown in `language` (zh or en)."""
    lang = "zh" if language == "zh" else "en"
    w = MD[lang]
    status = w["status"].get(report.status, report.status)
    if report.end_reason:
        status += f" ({w['reason'].get(report.end_reason, report.end_reason)})"
    lines = [
        w["title"].format(id=report.session_id),
        "",
        w["line"].format(mode=w["mode"].get(report.mode.value, report.mode.value), status=status),
        w["overall"].format(score=report.overall_score, n=len(report.questions)),
        "",
        w["per_topic"],
        "",
        w["table"],
        "|---|---|",
        *[
            f"| {names.area(area, lang) if names else area} | {avg} |"
            for area, avg in report.per_topic.items()
        ],
        "",
        w["questions"],
    ]
    for q in report.questions:
        heading, body = question_markdown(q, lang)
        lines += ["", f"### {heading}", "", *body]
    return "\n".join(lines) + "\n"


def failing_case_details(test: dict, en: bool) -> list[str]:
    """The first failing case of each kind: its inputs, the expected and the returned value
    (drawn for that submission, so they help debugging and nothing else)."""
    if test.get("passed") or not (test.get("inputs") or test.get("expected")):
        return []
    lines = [f"  - `{name}` = `{value}`" for name, value in (test.get("inputs") or {}).items()]
    for key, label in (
        ("expected", "expected" if en else "应为"),
        ("returned", "returned" if en else "实际返回"),
    ):
        if test.get(key):
            lines.append(f"  - {label}: `{test[key]}`")
    return lines
