"""Feedback text: what was covered, what was missed (with what to study), what was wrong."""

from __future__ import annotations

from server.corpus.schema import QuestionEntry
from server.grading.models import KeyPointResult, MisconceptionHit, TestResult

FLAG_TEXT = {
    "zh": {
        "empty": "没有作答，本题记 0 分。",
        "skipped": "本题跳过，记 0 分。",
        "probe_skipped": "追问已跳过；本题按已作答的内容计分。",
        "timeout": "超时未作答，本题记 0 分。",
        "injection": "回答中包含针对评分器的指令，已作为普通内容处理，不计分。",
        "keyword_list": "回答主要是关键词罗列，没有解释，只得部分分。",
        "repetition": "回答有大量重复，重复内容不加分且扣分。",
        "off_topic": "回答与本题关系不大。",
        "other_question": "这个回答更像是在答另一道相关的题，本题只按它真正回答到的要点计分。",
        "llm_fallback": "LLM 评分失败，已改用离线评分标准评分。",
        "late": "本题在截止时间之后作答。",
        "hint_used": "使用了提示，本题得分有上限。",
        "code_error": "代码没能运行（原因见下方隐藏测试）；编程题里，测试覆盖的要点只按文字解释给一半分。",
        "no_code": "这道题要手写代码，回答里没有找到代码，隐藏测试没有运行。",
        "signature_mismatch": "函数名或参数与题目约定的签名不同；签名不同本身不扣分。",
        "code_only": "回答只有代码、没有文字讲解：讲解部分记 0 分，代码由隐藏测试评判。",
    },
    "en": {
        "empty": "No answer was given; this question scores 0.",
        "skipped": "Skipped; this question scores 0.",
        "probe_skipped": "The follow-up was skipped; the question keeps the grade of the answers already given.",
        "timeout": "Time ran out before an answer; this question scores 0.",
        "injection": "The answer contains instructions aimed at the grader; they were treated as plain content and earn nothing.",
        "keyword_list": "The answer is mostly a list of keywords without explanation, so it earns only partial credit.",
        "repetition": "The answer repeats itself; repetition earns nothing and costs a point.",
        "off_topic": "The answer does not address this question.",
        "other_question": "This answer reads like an answer to a related question; it earns only the points of this one it actually addresses.",
        "llm_fallback": "The LLM grader failed; the offline rubric grader was used instead.",
        "late": "This answer came after the deadline.",
        "hint_used": "A hint was used, so this question's score is capped.",
        "code_error": "The code did not run (see the hidden tests below); on a coding question the points its tests cover earn half their credit from the prose alone.",
        "no_code": "This question asks for code; none was found in the answer, so the hidden tests did not run.",
        "signature_mismatch": "The function's name or arguments differ from the contract's signature; the difference itself costs nothing.",
        "code_only": "The answer is code without any explanation: the explanation part scores 0 and the hidden tests judge the code.",
    },
}


def write_feedback(
    entry: QuestionEntry,
    key_points: list[KeyPointResult],
    misconceptions: list[MisconceptionHit],
    flags: list[str],
    language: str = "zh",
    tests: list[TestResult] | None = None,
) -> str:
    en = language == "en"
    rubric = entry.rubric
    assert rubric is not None
    probes = {kp.id: (kp.probe_en if en else kp.probe) for kp in rubric.key_points}
    lines: list[str] = []
    texts = FLAG_TEXT["en" if en else "zh"]
    lines += [texts[f] for f in flags if f in texts]
    covered = [kp for kp in key_points if kp.covered]
    missed = [kp for kp in key_points if not kp.covered]
    label = (lambda kp: kp.text_en or kp.text) if en else (lambda kp: kp.text)
    if covered:
        lines.append("Covered:" if en else "已覆盖：")
        lines += [f"- ✓ {label(kp)}" for kp in covered]
    if missed:
        lines.append("Missed (study this):" if en else "遗漏（建议复习）：")
        lines += [f"- ✗ {label(kp)} — {probes.get(kp.id, '')}" for kp in missed]
    if misconceptions:
        lines.append("Wrong statements:" if en else "错误说法：")
        for m in misconceptions:
            fix = "Correction" if en else "更正"
            if en:
                wrong = m.text_en or m.text
                lines.append(
                    f"- “{m.evidence}” → {wrong}. {fix}: {m.correction_en or m.correction}"
                )
            else:
                lines.append(f"- “{m.evidence}” → {m.text}。{fix}：{m.correction}")
    if tests:
        passed = sum(t.passed for t in tests)
        lines.append(
            f"Hidden tests: {passed}/{len(tests)} passed"
            if en
            else f"隐藏测试：{passed}/{len(tests)} 通过"
        )
        lines += [
            f"- {'✓' if t.passed else '✗'} {t.explain}" + ("" if t.passed else f" — {t.message}")
            for t in tests
        ]
    return "\n".join(lines)
