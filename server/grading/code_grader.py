"""Grade the code in an answer to a coding question by running it against the task's hidden tests.

Scoring (issue #23): the prose and the code are credited separately, and code can only add.
1. The prose grader (rubric or LLM) judges the explanation. A key point the tests map to cases is
   *raised* to covered (the `def` line as evidence) when all its cases pass; a failing case never
   takes a point the prose explained — the feedback says "explained ✓, your implementation fails
   case X". The explanation score is the prose score plus what the raised points add.
2. The code's share is the fraction of hidden cases passed: 0 when there is no code, it does not
   parse, hits a limit, or cannot be called as the contract says; in between for partly right code.
3. A 手撕 (type coding) question: score = (1 − CODE_WEIGHT) · explanation + CODE_WEIGHT · 10 · share.
   Without code the explanation alone earns at most 5 of 10, never more than the same explanation
   with code that runs but is wrong. A concept question that shares a task: working code closes
   part of the remaining gap, score = explanation + CONCEPT_CODE_WEIGHT · share · (10 − explanation),
   and code that fails or does not run costs nothing (a snippet in a spoken answer is illustration).
So, with the same prose: correct > partly correct > running but wrong ≥ not running / wrong
signature / absent. When the server cannot isolate code at all, the prose grade stands.

Cases are drawn fresh per submission (`PreparedTask.draw(seed)`); the seed is in each test result,
so `CodeGrader.apply(..., seed=N)` reproduces a grade. The first failing case of each kind reports
its inputs, the expected and returned values and the first differing index, in the session's
language: nothing in it helps the next submission, whose numbers differ.

The answer's function need not carry the contract's name or argument order
(`code_extract.match_signature`): the one function whose arity fits is called, its arguments placed
by name where names say which is which, else by position; the answer is flagged
`signature_mismatch` with a note of how it was called. A function that cannot be called as the
contract says (wrong arity, several candidates) is not run: flag `signature_mismatch`, share 0.

A concept question's tests run only when the answer's code is an attempt at the task's function
(its name or arguments resemble the contract's)."""

from __future__ import annotations

import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from server.corpus.coding import CodingTasks, PreparedCase, PreparedTask
from server.corpus.schema import QuestionEntry, QuestionType
from server.grading.code_extract import (
    SignatureMatch,
    defines,
    defining_line,
    extract_code,
    match_signature,
    point_line,
    uses_torch,
)
from server.grading.feedback import write_feedback
from server.grading.models import Grade, KeyPointResult, TestResult
from server.grading.sandbox import CaseOutput, Sandbox, SandboxRun
from server.grading.scoring import analytic_score, score_from

CODE_WEIGHT = 0.5  # a coding question: the share of the score the hidden tests decide
CONCEPT_CODE_WEIGHT = 0.5  # a concept question: the share of the missing points working code adds
SHOWN_CHARS = 160  # one shortened input, expected or returned value


def combined_score(
    explained: float, tests: list[TestResult] | None, coding_question: bool, cap: float = 10.0
) -> float:
    """The question's score from its explanation score and its hidden tests (None: no code was
    run because there was none or it was not an attempt; [] is treated the same)."""
    share = sum(t.passed for t in tests) / len(tests) if tests else 0.0
    if coding_question:
        value = (1.0 - CODE_WEIGHT) * explained + CODE_WEIGHT * 10.0 * share
    else:
        value = explained + CONCEPT_CODE_WEIGHT * share * max(0.0, 10.0 - explained)
    return round(max(0.0, min(cap, value)), 1)


@dataclass(frozen=True)
class _Verdict:
    kind: str  # ok, values, shape, nonfinite, count, error
    message: str
    expected: Any = None
    returned: Any = None
    index: list[int] | None = None


@dataclass(frozen=True)
class CodeAttempt:
    prepared: PreparedTask
    code: str | None  # the answer's code, None when it has none
    call: SignatureMatch | None  # how the tests call it; None when it is not an attempt


class CodeGrader:
    def __init__(self, tasks: CodingTasks, sandbox: Sandbox) -> None:
        self.tasks = tasks
        self.sandbox = sandbox

    def task_for(self, entry: QuestionEntry) -> PreparedTask | None:
        return self.tasks.for_question(entry.id)

    def read(self, entry: QuestionEntry, answer: str) -> CodeAttempt | None:
        """The answer's code and how the tests would call it, parsed once per answer; None for a
        question without a task."""
        prepared = self.task_for(entry)
        if prepared is None or entry.rubric is None:
            return None
        code = extract_code(answer)
        if code is None:
            return CodeAttempt(prepared, None, None)
        return CodeAttempt(
            prepared, code, self._call_for(prepared, code, entry.type == QuestionType.coding)
        )

    def tests_decide(self, attempt: CodeAttempt | None) -> bool:
        """Whether the answer's code will be judged by hidden tests (it attempts the task's
        function and the sandbox can run it): then its code is not read as explanation."""
        return attempt is not None and attempt.call is not None and self.sandbox.isolation.available

    def apply(
        self,
        entry: QuestionEntry,
        answer: str,
        grade: Grade,
        language: str,
        seed: int | None = None,
        attempt: CodeAttempt | None = None,
    ) -> Grade:
        """Return `grade` revised by the hidden tests (unchanged for questions without a task).
        `seed` draws the cases (fresh per submission when None; the one used is in `tests`);
        `attempt` is `read(entry, answer)` when the caller already has it."""
        attempt = attempt or self.read(entry, answer)
        if attempt is None:
            return grade
        prepared, code, call = attempt.prepared, attempt.code, attempt.call
        coding_question = entry.type == QuestionType.coding
        if code is None:
            if coding_question:
                grade.flags.append("no_code")
                grade.score = combined_score(grade.score, None, True)
                grade.feedback = (
                    write_feedback(
                        entry, grade.key_points, grade.misconceptions, grade.flags, language
                    )
                    + "\n\n"
                    + no_code_notice(language)
                )
            return grade
        if call is None:
            # A concept question that also accepts code: an illustrative snippet that is not the
            # task's function is left to the prose grader.
            return grade
        if not call.matched:
            # The function cannot be called as the contract says: the code is not run. Its
            # share is 0; the explanation keeps what it earned.
            if coding_question:
                grade.score = combined_score(grade.score, None, True)
            return _with_notice(entry, grade, "signature_mismatch", language, call)
        isolation = self.sandbox.isolation
        if not isolation.available:
            # No isolation, no execution: the prose grade stands and the candidate is told why.
            grade.flags.append("code_not_run")
            grade.feedback = (
                write_feedback(entry, grade.key_points, grade.misconceptions, grade.flags, language)
                + "\n\n"
                + not_run_notice(isolation.reason, language)
            )
            return grade
        seed = secrets.randbits(63) if seed is None else seed
        cases = prepared.draw(seed)
        run = _run_cases(self.sandbox, prepared, cases, code, call)
        tests = _test_results(prepared, cases, run, language, seed)
        passed = {t.name for t in tests if t.passed}
        evidence = defining_line(code, run.function or call.function or prepared.task.function)
        before = [kp.model_copy() for kp in grade.key_points]
        failing_explained: list[tuple[KeyPointResult, list[str]]] = []
        rubric_points = {kp.id: kp for kp in entry.rubric.key_points}
        quoted: set[str] = set()
        for kp in grade.key_points:
            mapped = prepared.key_point_cases(entry.id).get(kp.id)
            if not mapped:
                continue
            if set(mapped) <= passed:
                kp.covered, kp.confidence = True, 1.0
                if not kp.evidence:
                    source = rubric_points.get(kp.id)
                    texts = [source.text_en, *source.aliases] if source else [kp.text_en]
                    kp.evidence = point_line(code, texts, quoted) or evidence
                    quoted.add(kp.evidence or "")
            elif kp.covered:
                failing_explained.append((kp, [c for c in mapped if c not in passed]))
        explained = _explained(grade, before)
        if run.error is not None:
            grade.flags.append("code_error")
        if not call.exact:
            grade.flags.append("signature_mismatch")
        grade.tests = tests
        grade.score = combined_score(explained, tests, coding_question)
        grade.feedback = write_feedback(
            entry, grade.key_points, grade.misconceptions, grade.flags, language, tests
        )
        extra = [
            explained_but_failing(prepared, failing_explained, tests, language),
            failure_details(tests, language),
            score_notice(explained, tests, coding_question, language),
        ]
        if not call.exact:
            extra.append(signature_notice(prepared, call, language))
        grade.feedback += "".join(f"\n\n{e}" for e in extra if e)
        return grade

    @staticmethod
    def _call_for(
        prepared: PreparedTask, code: str, coding_question: bool
    ) -> SignatureMatch | None:
        """How the tests call the answer's function; None when the code is not an attempt at the
        task (a concept question's illustrative snippet)."""
        task = prepared.task
        match = match_signature(
            code, task.function, task.params, task.param_aliases, set(task.id.split("-"))
        )
        if match.reason == "syntax":
            # Unparsable code: on a coding question the sandbox reports the syntax error.
            if coding_question or defines(code, task.function):
                return SignatureMatch(function=task.function, order=tuple(range(len(task.params))))
            return None
        if coding_question or match.related:
            return match
        return None


def _explained(grade: Grade, before: list[KeyPointResult]) -> float:
    """The prose score plus what the points raised by passing tests add (never less)."""
    if all(a.confidence == b.confidence for a, b in zip(before, grade.key_points, strict=True)):
        return grade.score
    misconceptions = len(grade.misconceptions)
    scorer = analytic_score if grade.grader.startswith("llm") else score_from
    gain = scorer(grade.key_points, misconceptions, grade.flags) - scorer(
        before, misconceptions, grade.flags
    )
    return min(10.0, grade.score + max(0.0, gain))


def _with_notice(
    entry: QuestionEntry, grade: Grade, flag: str, language: str, call: SignatureMatch
) -> Grade:
    grade.flags.append(flag)
    grade.feedback = write_feedback(
        entry, grade.key_points, grade.misconceptions, grade.flags, language
    )
    grade.feedback += "\n\n" + mismatch_notice(call, language)
    return grade


def mismatch_notice(call: SignatureMatch, language: str) -> str:
    """Why the code could not be called as the contract says (it was not run)."""
    if language == "en":
        return (
            f"Signature mismatch: {call.reason}. The code was not run and the answer was graded "
            "on its explanation; write the function with the contract's signature to have the "
            "hidden tests run it."
        )
    return (
        f"函数签名与约定不符：{call.reason}。代码没有运行，本题按文字讲解评分；"
        "按约定的签名写函数，隐藏测试才能运行它。"
    )


def signature_notice(prepared: PreparedTask, call: SignatureMatch, language: str) -> str:
    """How the tests called a function whose name or argument order differs from the contract."""
    params = prepared.task.params
    as_called = f"{call.function}({', '.join(params[i] for i in call.order)})"
    en = language == "en"
    if en:
        text = (
            f"Signature mismatch: the contract is {prepared.task.signature}; your code defines "
            f"{call.found}. The hidden tests called it as {as_called}"
        )
        text += (
            ", matching arguments by name."
            if call.by_name
            else " (arguments matched by position where their names did not say which is "
            "which; a failed test therefore does not take away what your explanation earned)."
        )
        return text
    text = (
        f"函数签名与约定不同：约定是 {prepared.task.signature}，你的代码定义的是 {call.found}。"
        f"隐藏测试以 {as_called} 的方式调用了它"
    )
    text += (
        "（按参数名对应）。"
        if call.by_name
        else "（参数名看不出对应关系的按位置对应；因此未通过的测试不扣文字讲解已得的分）。"
    )
    return text


def not_run_notice(reason: str, language: str) -> str:
    if language == "en":
        return (
            f"Your code was not run: this server cannot isolate candidate code ({reason}), "
            "so the answer was graded on its explanation only."
        )
    return f"代码未运行：本服务器无法隔离运行候选代码（{reason}），本题只按文字讲解评分。"


def no_code_notice(language: str) -> str:
    cap = round((1.0 - CODE_WEIGHT) * 10, 1)
    if language == "en":
        return (
            f"No code: on a 手撕 question the explanation earns at most {cap:g} of 10; the hidden "
            "tests decide the rest. Write the function to have them run it."
        )
    return f"没有代码：手撕题的文字讲解最多得 {cap:g}/10 分，其余由隐藏测试决定；写出函数才会运行测试。"


def score_notice(
    explained: float, tests: list[TestResult], coding_question: bool, language: str
) -> str:
    passed, total = sum(t.passed for t in tests), len(tests)
    en = language == "en"
    if coding_question:
        code_part = round(CODE_WEIGHT * 10 * passed / total, 1) if total else 0.0
        prose_part = round((1 - CODE_WEIGHT) * explained, 1)
        if en:
            return (
                f"Score: explanation {explained:.1f} × {1 - CODE_WEIGHT:g} = {prose_part:g}, plus "
                f"hidden tests {passed}/{total} × {CODE_WEIGHT * 10:g} = {code_part:g}."
            )
        return (
            f"得分：文字讲解 {explained:.1f} × {1 - CODE_WEIGHT:g} = {prose_part:g}，"
            f"加隐藏测试 {passed}/{total} × {CODE_WEIGHT * 10:g} = {code_part:g}。"
        )
    if not passed:
        return ""
    if en:
        return (
            f"Your code passed {passed}/{total} hidden tests, which adds to the explanation's "
            f"{explained:.1f} (failing tests take nothing from it)."
        )
    return f"代码通过了 {passed}/{total} 个隐藏测试，在文字讲解的 {explained:.1f} 分上加分（未通过的测试不扣分）。"


def explained_but_failing(
    prepared: PreparedTask,
    points: list[tuple[KeyPointResult, list[str]]],
    tests: list[TestResult],
    language: str,
) -> str:
    """Points the prose explained whose cases the code fails: the credit stays, the bug is named."""
    if not points:
        return ""
    en = language == "en"
    by_name = {t.name: t for t in tests}
    lines = ["Explained, but the code disagrees:" if en else "讲解正确，但代码没有做到："]
    for kp, cases in points:
        text = (kp.text_en or kp.text) if en else kp.text
        named = ", ".join(f"{c} ({by_name[c].explain})" if c in by_name else c for c in cases[:2])
        lines.append(
            f"- explained ✓ {text} — your implementation fails case {named}"
            if en
            else f"- 讲解 ✓ {text} —— 你的实现未通过用例 {named}"
        )
    return "\n".join(lines)


def failure_details(tests: list[TestResult], language: str) -> str:
    """The first failing case of each kind, with its inputs, expected and returned values."""
    shown = [t for t in tests if not t.passed and (t.inputs is not None or t.expected)]
    if not shown:
        return ""
    en = language == "en"
    lines = ["First failing case of each kind:" if en else "每类失败的第一个用例："]
    for t in shown:
        lines.append(f"- {t.name}: {t.message}")
        for name, value in (t.inputs or {}).items():
            lines.append(f"  - {name} = {value}")
        if t.expected is not None:
            lines.append(f"  - {'expected' if en else '应为'}: {t.expected}")
        if t.returned is not None:
            lines.append(f"  - {'returned' if en else '实际返回'}: {t.returned}")
    return "\n".join(lines)


def startup_line(grader: CodeGrader | None) -> str:
    """What `sparring serve` says about running candidates' code (sets up isolation once)."""
    if grader is None:
        reason = "the sandbox is disabled (SPARRING_SANDBOX_ENABLED=false)"
        return f"Sandbox off: code questions fall back to prose grading: {reason}"
    isolation = grader.sandbox.isolation
    if not isolation.available:
        return f"Sandbox unavailable: code questions fall back to prose grading: {isolation.reason}"
    grader.sandbox.warm()  # the pool's containers import numpy/torch while the server starts
    return f"Candidate code runs isolated in {isolation.summary}"


def verify_known_answers(
    prepared: PreparedTask, sandbox: Sandbox, seeds: tuple[int | None, ...] = (None,)
) -> list[str]:
    """Problems with a task's hidden tests: the reference and each alternative must pass every case,
    and each known answer must fail exactly the cases it lists (so the tests tell right from wrong),
    for every draw in `seeds` (None: each case's own seed)."""
    if not sandbox.isolation.available:
        return [f"{prepared.task.id}: code cannot be run here: {sandbox.isolation.reason}"]
    samples = [("reference", prepared.task.reference, [])]
    samples += [(f"alternative {i + 1}", c, []) for i, c in enumerate(prepared.task.alternatives)]
    samples += [(k.name, k.code, k.fails) for k in prepared.task.known_answers]
    jobs = [(sample, seed) for seed in seeds for sample in samples]

    def verdict(job: tuple[tuple[str, str, list[str]], int | None]) -> str | None:
        (name, code, fails), seed = job
        cases = prepared.cases if seed is None else prepared.draw(seed)
        run = _run_cases(sandbox, prepared, cases, code)
        results = _test_results(prepared, cases, run, "en", seed)
        failed = sorted(r.name for r in results if not r.passed)
        if failed == sorted(fails):
            return None
        detail = "; ".join(f"{r.name}: {r.message}" for r in results if not r.passed)
        return (
            f"{prepared.task.id}/{name} (seed {seed}): failed {failed}, expected {sorted(fails)}"
            + (f" ({detail})" if detail else "")
        )

    with ThreadPoolExecutor(max_workers=sandbox.limits.max_parallel) as pool:
        problems = [p for p in pool.map(verdict, jobs) if p is not None]
    return problems


def _run_cases(
    sandbox: Sandbox,
    prepared: PreparedTask,
    cases: tuple[PreparedCase, ...],
    code: str,
    call: SignatureMatch | None = None,
) -> SandboxRun:
    """Run every case; `call` names the answer's function and the order its arguments take."""
    function = call.function if call is not None and call.function else prepared.task.function
    order = call.order if call is not None and call.order else range(len(prepared.task.params))
    return sandbox.run(
        code,
        function,
        [(p.case.name, [p.args[i] for i in order]) for p in cases],
        use_torch=uses_torch(code),
    )


RUN_ERRORS_ZH = {
    "cpu": "超出 CPU 时间限制（死循环？）",
    "wall": "超时：达到墙钟时间限制（代码在等待，或机器非常繁忙）",
    "memory": "超出内存限制",
    "output": "输出过多",
    "crash": "运行进程崩溃",
    "start": "沙箱未能启动",
    "malformed": "沙箱返回的结果格式不对",
    "code": "代码无法运行",
}


def _run_error(run: SandboxRun, language: str) -> str:
    assert run.error is not None
    if language == "en":
        return run.error
    kind = run.kind or ("malformed" if "malformed" in run.error else "code")
    return f"{RUN_ERRORS_ZH.get(kind, '代码无法运行')}：{run.error}"


def _test_results(
    prepared: PreparedTask,
    cases: tuple[PreparedCase, ...],
    run: SandboxRun,
    language: str,
    seed: int | None,
) -> list[TestResult]:
    outputs = {c.name: c for c in run.cases}
    results = []
    shown: set[str] = set()  # kinds whose first failing case already carries the details
    for p in cases:
        explain = p.case.explain_en if language == "en" else p.case.explain
        if run.error is not None:
            # A run that failed as a whole fails every case with its reason.
            results.append(
                TestResult(
                    name=p.case.name,
                    passed=False,
                    explain=explain,
                    message=_run_error(run, language),
                    kind="run",
                    seed=seed,
                )
            )
            continue
        verdict = _verdict(p, outputs.get(p.case.name), language)
        result = TestResult(
            name=p.case.name,
            passed=verdict.kind == "ok",
            explain=explain,
            message=verdict.message,
            kind=verdict.kind,
            seed=seed,
        )
        if verdict.kind != "ok" and verdict.kind not in shown:
            shown.add(verdict.kind)
            result.inputs = {
                name: shorten(value)
                for name, value in zip(prepared.task.params, p.values, strict=False)
            }
            result.expected = None if verdict.expected is None else shorten(verdict.expected)
            result.returned = None if verdict.returned is None else shorten(verdict.returned)
            result.index = verdict.index
        results.append(result)
    return results


def shorten(value: Any, limit: int = SHOWN_CHARS) -> str:
    """A value as a candidate would print it: shape and dtype, then the numbers, cut to `limit`."""
    if isinstance(value, list | tuple) and value and isinstance(value[0], np.ndarray):
        return "(" + ", ".join(shorten(v, limit // max(1, len(value))) for v in value) + ")"
    if isinstance(value, dict) and "__array__" in value:
        value = np.asarray(value["__array__"], dtype=np.float64)
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return f"{float(value):.6g}"
        body = np.array2string(
            value, precision=4, threshold=12, edgeitems=3, separator=", ", max_line_width=10_000
        )
        body = " ".join(body.split())
        text = f"shape {list(value.shape)} {body}"
    elif isinstance(value, float):
        text = f"{value:.6g}"
    else:
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _verdict(prepared: PreparedCase, output: CaseOutput | None, language: str) -> _Verdict:
    """ok when the function returned the expected values, else why not (first accepted output
    as the expected one in the report)."""
    en = language == "en"
    if output is None:
        return _Verdict("error", "not run" if en else "未运行")
    if output.error is not None:
        return _Verdict("error", output.error if en else f"函数抛出异常：{output.error}")
    verdicts = []
    for expected in prepared.accepted:
        got, want = _checked(output.output, expected, prepared.case.outputs)
        verdict = _compare(got, want, prepared.case.rtol, prepared.case.atol, en)
        if verdict.kind == "ok":
            return verdict
        verdicts.append(verdict)
    return verdicts[0]


def _checked(got: Any, expected: Any, outputs: list[int] | None) -> tuple[Any, Any]:
    """The return values a case checks: all, or the ones it names (when the count is right)."""
    if outputs is None or not isinstance(got, list) or len(got) != len(expected):
        return got, expected
    return [got[i] for i in outputs], [expected[i] for i in outputs]


def _as_array(encoded: Any) -> np.ndarray:
    return np.asarray(encoded["__array__"], dtype=np.float64)


def _compare(got: Any, expected: Any, rtol: float, atol: float, en: bool) -> _Verdict:
    if isinstance(expected, list):
        returned = [_as_array(g) for g in got] if isinstance(got, list) else _as_array(got)
        if not isinstance(got, list) or len(got) != len(expected):
            return _Verdict(
                "count",
                f"expected {len(expected)} return values" if en else f"应返回 {len(expected)} 个值",
                expected,
                returned,
            )
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            verdict = _compare(g, e, rtol, atol, en)
            if verdict.kind != "ok":
                where = f"return value {i + 1}: " if en else f"第 {i + 1} 个返回值："
                return _Verdict(
                    verdict.kind, where + verdict.message, e, _as_array(g), verdict.index
                )
        return _Verdict("ok", "ok")
    if isinstance(got, list):
        return _Verdict(
            "count",
            "returned several values where one was expected"
            if en
            else "应返回一个值，却返回了多个",
            expected,
            [_as_array(g) for g in got],
        )
    value = _as_array(got)
    if value.size == expected.size and value.shape != expected.shape:
        value = value.reshape(expected.shape)  # [B, 1] for [B]: the numbers are what matter
    if value.shape != expected.shape:
        return _Verdict(
            "shape",
            f"shape {list(value.shape)}, expected {list(expected.shape)}"
            if en
            else f"形状为 {list(value.shape)}，应为 {list(expected.shape)}",
            expected,
            value,
        )
    if not np.all(np.isfinite(value)) and np.all(np.isfinite(expected)):
        bad = [int(i) for i in np.argwhere(~np.isfinite(value))[0]] if value.ndim else []
        return _Verdict(
            "nonfinite",
            f"the result contains nan or inf (first at index {bad})"
            if en
            else f"结果中有 nan 或 inf（第一个在索引 {bad}）",
            expected,
            value,
            bad,
        )
    close = np.isclose(value, expected, rtol=rtol, atol=atol)
    if not np.all(close):
        index = [int(i) for i in np.argwhere(~close)[0]] if value.ndim else []
        got_at = float(value[tuple(index)]) if index else float(value)
        want_at = float(expected[tuple(index)]) if index else float(expected)
        where = f" at index {index}" if index else ""
        return _Verdict(
            "values",
            f"wrong values{where}: expected {want_at:.6g}, returned {got_at:.6g}"
            if en
            else f"数值错误{f'：索引 {index} 处' if index else '：'}应为 {want_at:.6g}，实际返回 {got_at:.6g}",
            expected,
            value,
            index,
        )
    return _Verdict("ok", "ok")
