"""Labels for the turns of a session ("第 2 题 · 追问 1" / "Q2 · Follow-up 1"), in both languages,
so a client can show one labelled message per interviewer turn and tie feedback to its question."""

from __future__ import annotations

from server.storage.models import AskedQuestion, InterviewSession

WORDS = {
    "zh": {
        "question": "第 {n} 题",
        "related": "相关问题",
        "probe": "追问 {k}",
        "hint": "提示 {k}",
        "skip": "跳过",
        "answer": "你的回答",
        "ask": "你的提问",
        "clarify": "答疑",
        "end": "面试结束",
        "sep": " · ",
    },
    "en": {
        "question": "Q{n}",
        "related": "Related question",
        "probe": "Follow-up {k}",
        "hint": "Hint {k}",
        "skip": "Skipped",
        "answer": "Your answer",
        "ask": "Your question",
        "clarify": "Clarification",
        "end": "Interview over",
        "sep": " · ",
    },
}


def question_numbers(session: InterviewSession) -> dict[int, int]:
    """Asked-question row id -> the number the candidate sees (a dropped question gives its number
    to the related question that replaced it)."""
    numbers: dict[int, int] = {}
    for q in sorted(session.questions, key=lambda q: q.position):
        numbers[q.id] = 1 + sum(
            o.status != "dropped" for o in session.questions if o.position < q.position
        )
    return numbers


def question_label(number: int, kind: str = "question") -> dict[str, str]:
    out = {}
    for lang, w in WORDS.items():
        label = w["question"].format(n=number)
        if kind == "followup":
            label += w["sep"] + w["related"]
        out[lang] = label
    return out


def turn_labels(session: InterviewSession) -> list[dict[str, str]]:
    """One {"zh", "en"} label per turn, in turn order."""
    numbers = question_numbers(session)
    by_id: dict[int, AskedQuestion] = {q.id: q for q in session.questions}
    probes: dict[int, int] = {}
    hints: dict[int, int] = {}
    labels = []
    for turn in session.turns:
        asked = by_id.get(turn.question_id) if turn.question_id else None
        if asked is None:
            labels.append({lang: w["end"] for lang, w in WORDS.items()})
            continue
        qid = asked.id
        base = question_label(numbers[qid])
        tail: dict[str, str] = {lang: "" for lang in WORDS}
        for lang, w in WORDS.items():
            if turn.role == "interviewer":
                if turn.kind == "probe":
                    k = probes.get(qid, 0) + 1
                    tail[lang] = w["probe"].format(k=k)
                elif turn.kind == "hint":
                    k = hints.get(qid, 0) + 1
                    tail[lang] = w["hint"].format(k=k)
                elif turn.kind == "followup":
                    tail[lang] = w["related"]
                elif turn.kind == "skip":
                    tail[lang] = w["skip"]
                elif turn.kind == "clarify":
                    tail[lang] = w["clarify"]
            elif turn.kind == "skip":
                tail[lang] = w["skip"]
            else:
                # a clarifying question is the candidate asking, not answering
                said = w["ask"] if turn.kind == "ask" else w["answer"]
                after_probe = probes.get(qid, 0)
                tail[lang] = (
                    w["probe"].format(k=after_probe) + w["sep"] if after_probe else ""
                ) + said
        # counters move once per turn, after both languages were labelled
        if turn.role == "interviewer" and turn.kind == "probe":
            probes[qid] = probes.get(qid, 0) + 1
        if turn.role == "interviewer" and turn.kind == "hint":
            hints[qid] = hints.get(qid, 0) + 1
        labels.append(
            {
                lang: base[lang] + (WORDS[lang]["sep"] + tail[lang] if tail[lang] else "")
                for lang in WORDS
            }
        )
    return labels
