"""Coding tasks: the function a candidate writes for a 手撕 question, and the hidden tests it must pass.

A task lives in `corpus/coding/<id>.yaml`. Its reference implementation (numpy, trusted: it is part
of the repository) runs in the server process to produce the expected outputs; the candidate's code
only ever runs in the sandbox and never sees them. Each question that uses the task maps some of its
rubric key points to the cases that evidence them.

Cases are drawn fresh for every submission (issue #23): a case is a *generator*, `args_code`, that
keeps the case's structure (λ=0, a done in the middle, a masked token, a huge margin…) and draws its
numbers from `rng`, a `numpy.random.Generator` seeded per submission. A failure report can then show
the case's inputs and expected values without giving anything to hard-code: the next submission gets
other numbers. The format of a case:

    - name: done_stops_bootstrap          # [a-z0-9_]+, unique in the task
      explain: 回合在中途结束时……            # zh, shown after grading; describe the structure, not numbers
      explain_en: When an episode ends mid-sequence …
      args_code: |-                      # an expression returning the argument list, or
        [rng.normal(size=8), rng.normal(size=9),   # statements that assign it to `args`; names:
         np.array([0, 0, 1, 0, 0, 0, 1, 0.0]),     # np, rng (a per-submission Generator)
         rng.uniform(0.9, 0.999), rng.uniform(0.8, 0.99)]
      rtol: 1.0e-4                         # optional tolerances (defaults 1e-4, 1e-6)
      atol: 1.0e-6
      outputs: [0]                         # optional: which return values the case checks
      seed: 4                              # optional: the draw used by `sparring` docs/verification

Write sizes and structural constants literally and draw only what the structure does not fix;
keep every draw inside the range where the case still isolates its bug (a margin stays huge, a
ratio stays outside the clip range…): each task's `known_answers` must fail exactly their listed
cases for every seed (tests/test_coding_tasks_v2.py checks many seeds). The literal form
`args: [...]` still loads, but its values never change between submissions, so a test rejects it in
the repository."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from server.corpus.bank import QuestionBank
from server.yaml_files import read_yaml


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CodingCase(_Strict):
    name: str = Field(pattern=r"^[a-z0-9_]+$")
    explain: str  # zh: what the case checks, shown to the candidate after grading
    explain_en: str
    # Either literal arguments, or a Python expression (with `np` and a seeded `rng`) returning them.
    args: list[Any] | None = None
    args_code: str | None = None
    seed: int = 0
    rtol: float = 1e-4
    atol: float = 1e-6
    # For a function returning several values: which of them (0-based) this case checks, so a case
    # can isolate one output (the token ratios, say). None checks them all.
    outputs: list[int] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> CodingCase:
        if (self.args is None) == (self.args_code is None):
            raise ValueError(f"case {self.name}: give exactly one of args or args_code")
        return self


class KnownAnswer(_Strict):
    """A sample implementation with its expected verdict: it proves the cases tell right from wrong."""

    name: str
    code: str
    fails: list[str] = Field(default_factory=list)  # the case names it must fail; [] = passes all


class CodingTask(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    title: str
    title_en: str
    function: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    params: list[str]
    # Other names a candidate may give a parameter (besides common synonyms), for matching an
    # answer's function to the contract by argument name.
    param_aliases: dict[str, list[str]] = Field(default_factory=dict)
    contract: str  # zh: signature, shapes and conventions, shown with the question
    contract_en: str
    reference: str
    # Other implementations whose outputs are equally right (another std convention, another
    # normalisation the question leaves open). A case passes if the output matches any of them.
    alternatives: list[str] = Field(default_factory=list)
    cases: list[CodingCase] = Field(min_length=3)
    # question id → key point id → names of the cases that evidence that point
    questions: dict[str, dict[str, list[str]]] = Field(min_length=1)
    known_answers: list[KnownAnswer] = Field(min_length=2)

    @model_validator(mode="after")
    def _names_resolve(self) -> CodingTask:
        names = {c.name for c in self.cases}
        if len(names) != len(self.cases):
            raise ValueError("case names must be unique")
        for qid, mapping in self.questions.items():
            for kp, case_names in mapping.items():
                unknown = set(case_names) - names
                if unknown:
                    raise ValueError(f"{qid}/{kp}: unknown cases {sorted(unknown)}")
        for kp in set(self.param_aliases) - set(self.params):
            raise ValueError(f"param_aliases: {kp} is not a parameter")
        for known in self.known_answers:
            unknown = set(known.fails) - names
            if unknown:
                raise ValueError(f"known answer {known.name}: unknown cases {sorted(unknown)}")
        return self

    @property
    def signature(self) -> str:
        return f"{self.function}({', '.join(self.params)})"


class CodingContract(BaseModel):
    """What the candidate is told about a coding task (never the hidden cases)."""

    task_id: str
    title: str = ""
    title_en: str = ""
    function: str
    params: list[str] = Field(default_factory=list, description="The arguments, in call order")
    signature: str
    contract: str = Field(description="zh: signature, shapes and conventions")
    contract_en: str
    tests: int = Field(description="How many hidden tests the code is run against")


def encode(value: Any) -> Any:
    """Arguments and outputs cross the process boundary as JSON; arrays keep their dtype."""
    if isinstance(value, np.ndarray):
        return {"__array__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, tuple | list):
        return [encode(v) for v in value]
    return value


@dataclass(frozen=True)
class PreparedCase:
    case: CodingCase
    args: list[Any]  # encoded
    accepted: tuple[Any, ...]  # right outputs: each a numpy array or a list of arrays
    values: tuple[Any, ...] = ()  # the arguments as drawn (numpy), for failure reports


@dataclass(frozen=True)
class PreparedTask:
    task: CodingTask
    functions: tuple[Any, ...] = ()  # the reference, then the alternatives (trusted code)

    def key_point_cases(self, question_id: str) -> dict[str, list[str]]:
        return self.task.questions.get(question_id, {})

    def draw(self, seed: int) -> tuple[PreparedCase, ...]:
        """Every case with numbers drawn for one submission, and the outputs that count as right."""
        return _prepare(self.task, self.functions, seed)

    @property
    def cases(self) -> tuple[PreparedCase, ...]:
        """The cases as drawn from each case's own `seed` (documentation, verification)."""
        return _prepare(self.task, self.functions, None)


class CodingTaskError(ValueError):
    pass


def _define(task: CodingTask, code: str, label: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(code, f"<{label} {task.id}>", "exec"), namespace)
    fn = namespace.get(task.function)
    if not callable(fn):
        raise CodingTaskError(f"{task.id}: the {label} does not define {task.function}")
    return fn


def case_rng(case: CodingCase, index: int, seed: int | None) -> np.random.Generator:
    """The generator a case draws from: per submission (`seed`, case index), else the case's own."""
    if seed is None:
        return np.random.default_rng(case.seed)
    return np.random.default_rng([seed & 0xFFFFFFFFFFFFFFFF, index])


def _case_args(task: CodingTask, case: CodingCase, rng: np.random.Generator) -> list[Any]:
    if case.args_code is not None:
        scope: dict[str, Any] = {"np": np, "rng": rng}
        # eval/exec are safe here: args_code is repository data written by maintainers, never input.
        try:
            args = list(eval(compile(case.args_code, f"<{task.id}/{case.name}>", "eval"), scope))
        except SyntaxError:
            exec(compile(case.args_code, f"<{task.id}/{case.name}>", "exec"), scope)
            if "args" not in scope:
                raise CodingTaskError(f"{task.id}/{case.name}: args_code sets no `args`") from None
            args = list(scope["args"])
    else:
        args = [
            np.asarray(a, dtype=np.float64) if isinstance(a, list) else a for a in case.args or []
        ]
    if len(args) != len(task.params):
        raise CodingTaskError(f"{task.id}/{case.name}: {len(args)} args for {task.signature}")
    return args


def _output(fn: Any, args: list[Any]) -> Any:
    out = fn(*[a.copy() if isinstance(a, np.ndarray) else a for a in args])
    if isinstance(out, tuple):
        return [np.asarray(o, dtype=np.float64) for o in out]
    return np.asarray(out, dtype=np.float64)


def _functions(task: CodingTask) -> tuple[Any, ...]:
    """The reference and the alternatives, defined once: they are trusted repository code."""
    alternatives = [
        _define(task, code, f"alternative {i + 1}") for i, code in enumerate(task.alternatives)
    ]
    return (_define(task, task.reference, "reference"), *alternatives)


def _prepare(
    task: CodingTask, functions: tuple[Any, ...], seed: int | None
) -> tuple[PreparedCase, ...]:
    """Draw every case's arguments and run the reference (and alternatives) on them."""
    prepared = []
    for index, case in enumerate(task.cases):
        args = _case_args(task, case, case_rng(case, index, seed))
        accepted = tuple(_output(fn, args) for fn in functions)
        if case.outputs is not None and not all(
            isinstance(a, list) and all(0 <= i < len(a) for i in case.outputs) for a in accepted
        ):
            raise CodingTaskError(f"{task.id}/{case.name}: outputs {case.outputs} out of range")
        prepared.append(
            PreparedCase(case=case, args=encode(args), accepted=accepted, values=tuple(args))
        )
    return tuple(prepared)


def prepare_task(task: CodingTask) -> PreparedTask:
    """Define the reference, and check that its cases draw and run (with their own seeds and two
    fresh ones), so a broken generator fails at load time rather than in a candidate's grade."""
    prepared = PreparedTask(task=task, functions=_functions(task))
    for seed in (None, 1, 2):
        _prepare(task, prepared.functions, seed)
    return prepared


@dataclass(frozen=True)
class CodingTasks:
    tasks: tuple[PreparedTask, ...]

    def for_question(self, question_id: str) -> PreparedTask | None:
        for prepared in self.tasks:
            if question_id in prepared.task.questions:
                return prepared
        return None

    def __len__(self) -> int:
        return len(self.tasks)

    def contract_for(self, question_id: str) -> CodingContract | None:
        prepared = self.for_question(question_id)
        if prepared is None:
            return None
        task = prepared.task
        return CodingContract(
            task_id=task.id,
            title=task.title,
            title_en=task.title_en,
            function=task.function,
            params=list(task.params),
            signature=task.signature,
            contract=task.contract,
            contract_en=task.contract_en,
            tests=len(task.cases),
        )


def load_coding_tasks(coding_dir: Path, bank: QuestionBank | None = None) -> CodingTasks:
    """Load and check every task; with a bank, also check that questions and key points exist."""
    problems: list[str] = []
    tasks: list[PreparedTask] = []
    claimed: dict[str, str] = {}
    for path in sorted(coding_dir.glob("*.yaml")) if coding_dir.is_dir() else []:
        try:
            task = CodingTask.model_validate(read_yaml(path))
            tasks.append(prepare_task(task))
        except Exception as exc:  # report every broken task together, not only the first
            problems.append(f"{path.name}: {exc}")
            continue
        if task.id != path.stem:
            problems.append(f"{path.name}: id {task.id!r} does not match the file name")
        for qid, mapping in task.questions.items():
            if qid in claimed:
                problems.append(f"{path.name}: question {qid} already uses task {claimed[qid]}")
            claimed[qid] = task.id
            entry = bank.get(qid) if bank is not None else None
            if bank is not None and entry is None:
                problems.append(f"{path.name}: unknown question {qid}")
            elif entry is not None and entry.rubric is not None:
                kp_ids = {kp.id for kp in entry.rubric.key_points}
                for kp in set(mapping) - kp_ids:
                    problems.append(f"{path.name}: {qid} has no key point {kp}")
    if problems:
        raise CodingTaskError("; ".join(problems))
    return CodingTasks(tuple(tasks))
