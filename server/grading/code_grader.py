"""Grade the code in an answer to a coding question by running it against the task's hidden tests.

The prose grader (rubric or LLM) judges the explanation first. Then, for the key points a task maps
to test cases, the tests decide: all of a point's cases pass → covered, with the function's `def`
line as evidence; any case fails → not covered, whatever the prose said, because the code shows the
candidate cannot yet do it. Code that does not run at all leaves those points at half their prose
credit. Points no test covers keep the prose grader's judgement. The score goes through the one
score formula.

The answer's function need not carry the contract's name or argument order
(`code_extract.match_signature`): the one function whose arity fits is called, its arguments placed
by name where names say which is which, else by position. Such an answer is flagged
`signature_mismatch` with a note of how it was called, and it is graded on its merits: when every
argument was placed by name the tests count as for the contract's own name; when some were placed
by position alone, a failed test takes nothing from the prose (the order may be our guess). A
function that cannot be called as the contract says (wrong arity, several candidates) is not run:
flag `signature_mismatch`, and the prose grade stands.

A concept question can share a task (GAE, say): there the tests run only when the answer's code is
an attempt at the task's function (its name or arguments resemble the contract's), and code that
does not run costs nothing, because a snippet in a spoken-style answer is illustration."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
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
    uses_torch,
)
from server.grading.feedback import write_feedback
from server.grading.models import Grade, TestResult
from server.grading.sandbox import CaseOutput, Sandbox, SandboxRun
from server.grading.scoring import COVERED_AT, score_from

CODE_ERROR_CREDIT = 0.5


class CodeGrader:
    def __init__(self, tasks: CodingTasks, sandbox: Sandbox) -> None:
        self.tasks = tasks
        self.sandbox = sandbox

    def task_for(self, entry: QuestionEntry) -> PreparedTask | None:
        return self.tasks.for_question(entry.id)

    def apply(self, entry: QuestionEntry, answer: str, grade: Grade, language: str) -> Grade:
        """Return `grade` revised by the hidden tests (unchanged for questions without a task)."""
        prepared = self.task_for(entry)
        if prepared is None or entry.rubric is None:
            return grade
        code = extract_code(answer)
        coding_question = entry.type == QuestionType.coding
        if code is None:
            if coding_question:
                grade.flags.append("no_code")
                grade.feedback = write_feedback(
                    entry, grade.key_points, grade.misconceptions, grade.flags, language
                )
            return grade
        call = self._call_for(prepared, code, coding_question)
        if call is None:
            # A concept question that also accepts code: an illustrative snippet that is not the
            # task's function is left to the prose grader.
            return grade
        if not call.matched:
            # The function cannot be called as the contract says: the code is not run, and the
            # prose grade stands (a signature is no reason to lose what the explanation earned).
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
        run = _run_cases(self.sandbox, prepared, code, call)
        tests = _test_results(prepared, run, language)
        passed = {t.name for t in tests if t.passed}
        evidence = defining_line(code, run.function or call.function or prepared.task.function)
        for kp in grade.key_points:
            cases = prepared.key_point_cases(entry.id).get(kp.id)
            if not cases:
                continue
            if run.error is not None:
                if coding_question:  # the code was the answer, and it does not run
                    kp.confidence = round(kp.confidence * CODE_ERROR_CREDIT, 3)
                    kp.covered = kp.confidence >= COVERED_AT
            elif set(cases) <= passed:
                kp.covered, kp.confidence, kp.evidence = True, 1.0, evidence or kp.evidence
            elif call.by_name:
                kp.covered, kp.confidence, kp.evidence = False, 0.0, None
            # else: some arguments were placed by position alone, so a failed case may be our
            # guess of the order rather than the candidate's bug: the prose judgement stands.
        if run.error is not None:
            grade.flags.append("code_error")
        grade.tests = tests
        if not call.exact:
            grade.flags.append("signature_mismatch")
        grade.score = score_from(grade.key_points, len(grade.misconceptions), grade.flags)
        grade.feedback = write_feedback(
            entry, grade.key_points, grade.misconceptions, grade.flags, language, tests
        )
        if not call.exact:
            grade.feedback += "\n\n" + signature_notice(prepared, call, language)
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


def startup_line(grader: CodeGrader | None) -> str:
    """What `sparring serve` says about running candidates' code (sets up isolation once)."""
    if grader is None:
        reason = "the sandbox is disabled (SPARRING_SANDBOX_ENABLED=false)"
        return f"Sandbox off: code questions fall back to prose grading: {reason}"
    isolation = grader.sandbox.isolation
    if not isolation.available:
        return f"Sandbox unavailable: code questions fall back to prose grading: {isolation.reason}"
    return f"Candidate code runs isolated in {isolation.summary}"


def verify_known_answers(prepared: PreparedTask, sandbox: Sandbox) -> list[str]:
    """Problems with a task's hidden tests: the reference and each alternative must pass every case,
    and each known answer must fail exactly the cases it lists (so the tests tell right from wrong)."""
    if not sandbox.isolation.available:
        return [f"{prepared.task.id}: code cannot be run here: {sandbox.isolation.reason}"]
    samples = [("reference", prepared.task.reference, [])]
    samples += [(f"alternative {i + 1}", c, []) for i, c in enumerate(prepared.task.alternatives)]
    samples += [(k.name, k.code, k.fails) for k in prepared.task.known_answers]

    def verdict(sample: tuple[str, str, list[str]]) -> str | None:
        name, code, fails = sample
        results = _test_results(prepared, _run_cases(sandbox, prepared, code), "en")
        failed = sorted(r.name for r in results if not r.passed)
        if failed == sorted(fails):
            return None
        detail = "; ".join(f"{r.name}: {r.message}" for r in results if not r.passed)
        return f"{prepared.task.id}/{name}: failed {failed}, expected {sorted(fails)}" + (
            f" ({detail})" if detail else ""
        )

    with ThreadPoolExecutor(max_workers=sandbox.limits.max_parallel) as pool:
        problems = [p for p in pool.map(verdict, samples) if p is not None]
    return problems


def _run_cases(
    sandbox: Sandbox, prepared: PreparedTask, code: str, call: SignatureMatch | None = None
) -> SandboxRun:
    """Run every case; `call` names the answer's function and the order its arguments take."""
    function = call.function if call is not None and call.function else prepared.task.function
    order = call.order if call is not None and call.order else range(len(prepared.task.params))
    return sandbox.run(
        code,
        function,
        [(p.case.name, [p.args[i] for i in order]) for p in prepared.cases],
        use_torch=uses_torch(code),
    )


def _test_results(prepared: PreparedTask, run: SandboxRun, language: str) -> list[TestResult]:
    outputs = {c.name: c for c in run.cases}
    results = []
    for p in prepared.cases:
        # A run that failed as a whole fails every case with its reason.
        reason = run.error or _verdict(p, outputs.get(p.case.name))
        results.append(
            TestResult(
                name=p.case.name,
                passed=reason is None,
                explain=p.case.explain_en if language == "en" else p.case.explain,
                message=reason or "ok",
            )
        )
    return results


def _verdict(prepared: PreparedCase, output: CaseOutput | None) -> str | None:
    """None when the function returned the expected values, else why not."""
    if output is None:
        return "not run"
    if output.error is not None:
        return output.error
    reasons = [
        _compare(
            *_checked(output.output, expected, prepared.case.outputs),
            prepared.case.rtol,
            prepared.case.atol,
        )
        for expected in prepared.accepted
    ]
    return None if None in reasons else reasons[0]


def _checked(got: Any, expected: Any, outputs: list[int] | None) -> tuple[Any, Any]:
    """The return values a case checks: all, or the ones it names (when the count is right)."""
    if outputs is None or not isinstance(got, list) or len(got) != len(expected):
        return got, expected
    return [got[i] for i in outputs], [expected[i] for i in outputs]


def _as_array(encoded: Any) -> np.ndarray:
    return np.asarray(encoded["__array__"], dtype=np.float64)


def _compare(got: Any, expected: Any, rtol: float, atol: float) -> str | None:
    if isinstance(expected, list):
        if not isinstance(got, list) or len(got) != len(expected):
            return f"expected {len(expected)} return values"
        for i, (g, e) in enumerate(zip(got, expected, strict=True)):
            reason = _compare(g, e, rtol, atol)
            if reason:
                return f"return value {i + 1}: {reason}"
        return None
    if isinstance(got, list):
        return "returned several values where one was expected"
    value = _as_array(got)
    if value.size == expected.size and value.shape != expected.shape:
        value = value.reshape(expected.shape)  # [B, 1] for [B]: the numbers are what matter
    if value.shape != expected.shape:
        return f"shape {list(value.shape)}, expected {list(expected.shape)}"
    if not np.all(np.isfinite(value)) and np.all(np.isfinite(expected)):
        return "the result contains nan or inf"
    if not np.allclose(value, expected, rtol=rtol, atol=atol):
        return f"wrong values (max abs error {float(np.max(np.abs(value - expected))):.3g})"
    return None
