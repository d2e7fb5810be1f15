"""Labels for the turns of a session ("第 2 题 · 追问 1" / "Q2 · Follow-up 1"), in both languages,
so a client can show one labelled message per interviewer turn and tie feedback to its question."""

from __future__ import annotations

import re

from server.storage.models import AskedQuestion, InterviewSession

WORDS = {
    "zh": {
        "question": "第 {n} 题",
        "related": "相关问题",
        "probe": "追问 {k}",
        "hint": "提示 {k}",
        "skip": "已跳过",
        "skip_self": "你选择跳过",
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
        "skip_self": "You skipped",
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
                tail[lang] = w["skip_self"]  # the candidate's side: who skipped
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


# Grade flags and question statuses as words (a report or card never shows a raw code).
FLAG_WORDS = {
    "zh": {
        "late": "超时",
        "hint_used": "用了提示",
        "skipped": "跳过",
        "probe_skipped": "跳过了追问",
        "unanswered": "未作答",
        "empty": "没有作答",
        "timeout": "超时未作答",
        "off_topic": "离题",
        "other_question": "答的是另一道题",
        "no_code": "没有代码",
        "code_error": "代码出错",
        "code_not_run": "代码没有运行",
        "signature_mismatch": "函数签名不符",
        "code_only": "只有代码",
        "injection": "含指令注入",
        "hedged": "含糊其辞",
        "denied": "否定了要点",
        "keyword_list": "只列关键词",
        "repetition": "重复堆砌",
        "llm_fallback": "LLM 评分失败，改用离线评分",
        "llm_answer_cut": "回答被截断后评分",
        "llm_rubric_trimmed": "评分标准被截短后评分",
        "llm_ids_repaired": "LLM 评分的要点编号已修正",
        "done": "已答",
        "dropped": "换成了相关问题",
    },
    "en": {
        "late": "late",
        "hint_used": "hint used",
        "skipped": "skipped",
        "probe_skipped": "follow-up skipped",
        "unanswered": "not answered",
        "empty": "no answer",
        "timeout": "time ran out",
        "off_topic": "off topic",
        "other_question": "answers another question",
        "no_code": "no code",
        "code_error": "code error",
        "code_not_run": "code not run",
        "signature_mismatch": "signature does not match",
        "code_only": "code only",
        "injection": "instructions in the answer",
        "hedged": "hedged",
        "denied": "denied a point",
        "keyword_list": "bare keyword list",
        "repetition": "repetition",
        "llm_fallback": "LLM grader failed, rubric used",
        "llm_answer_cut": "answer cut before grading",
        "llm_rubric_trimmed": "rubric shortened for the LLM",
        "llm_ids_repaired": "LLM point ids repaired",
        "done": "answered",
        "dropped": "replaced by a related question",
    },
}


def flag_word(flag: str, language: str) -> str:
    """A flag or status as words; an unknown code reads with spaces rather than underscores."""
    words = FLAG_WORDS["en" if language == "en" else "zh"]
    return words.get(flag) or flag.replace("_", " ")


# Why a hidden test failed, as the code grader and sandbox word it (English), in Chinese.
# Anything not matched (a Python exception "ValueError: …") stays as it is: it is the code's own.
_TEST_MESSAGES_ZH: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^not run$"), "没有运行"),
    (re.compile(r"^expected (\d+) return values$"), r"应当返回 \1 个值"),
    (
        re.compile(r"^returned several values where one was expected$"),
        "应当只返回一个值，却返回了多个",
    ),
    (re.compile(r"^shape (\[[^\]]*\]), expected (\[[^\]]*\])$"), r"形状是 \1，应为 \2"),
    (re.compile(r"^the result contains nan or inf$"), "结果里有 nan 或 inf"),
    (re.compile(r"^wrong values \(max abs error ([^)]*)\)$"), r"数值不对（最大绝对误差 \1）"),
    (re.compile(r"^no function named (\S+) was defined$"), r"没有定义名为 \1 的函数"),
    (
        re.compile(r"^timed out after ([\d.]+) s \(infinite loop\?\)$"),
        r"运行超过 \1 秒被终止（死循环？）",
    ),
    (
        re.compile(r"^the result was too large \(the function returned too much data\)$"),
        "返回的数据太大",
    ),
    (re.compile(r"^output limit exceeded \(too much printed\)$"), "打印输出超过上限"),
    (re.compile(r"^code was not run: (.*)$"), r"代码没有运行：\1"),
    (re.compile(r"^the sandbox could not start: (.*)$"), r"沙箱没能启动：\1"),
    (re.compile(r"^the sandbox returned a malformed result.*$"), "沙箱返回的结果无法解析"),
]
_RETURN_VALUE = re.compile(r"^return value (\d+): (.*)$")
_LINE_OF_CODE = re.compile(r" \(line (\d+) of your code\)$")


def failure_reason(message: str, language: str) -> str:
    """A hidden test's failure reason in the session language."""
    if language == "en" or not message:
        return message
    found = _RETURN_VALUE.match(message)
    if found:
        return f"第 {found.group(1)} 个返回值：{failure_reason(found.group(2), language)}"
    for pattern, zh in _TEST_MESSAGES_ZH:
        if pattern.match(message):
            return pattern.sub(zh, message)
    return _LINE_OF_CODE.sub(r"（你的代码第 \1 行）", message)
