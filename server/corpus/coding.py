"""Coding tasks: the function a candidate writes for a 手撕 question, and the hidden tests it must pass.

A task lives in `corpus/coding/<id>.yaml`. Its reference implementation (numpy, trusted: it is part
of the repository) runs in the server process once at load time to produce the expected outputs; the
candidate's code only ever runs in the sandbox and never sees them. Each question that uses the task
maps some of its rubric key points to the cases that evidence them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from server.corpus.bank import QuestionBank


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


@dataclass(frozen=True)
class PreparedTask:
    task: CodingTask
    cases: tuple[PreparedCase, ...]

    def key_point_cases(self, question_id: str) -> dict[str, list[str]]:
        return self.task.questions.get(question_id, {})


class CodingTaskError(ValueError):
    pass


def _define(task: CodingTask, code: str, label: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(code, f"<{label} {task.id}>", "exec"), namespace)
    fn = namespace.get(task.function)
    if not callable(fn):
        raise CodingTaskError(f"{task.id}: the {label} does not define {task.function}")
    return fn


def _case_args(task: CodingTask, case: CodingCase) -> list[Any]:
    if case.args_code is not None:
        rng = np.random.default_rng(case.seed)
        # eval is safe here: args_code is repository data written by maintainers, never input.
        args = list(eval(case.args_code, {"np": np, "rng": rng}))
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


def _prepare(task: CodingTask) -> tuple[PreparedCase, ...]:
    """Run the reference (and alternatives) on every case: these are trusted repository code."""
    functions = [_define(task, task.reference, "reference")] + [
        _define(task, code, f"alternative {i + 1}") for i, code in enumerate(task.alternatives)
    ]
    prepared = []
    for case in task.cases:
        args = _case_args(task, case)
        accepted = tuple(_output(fn, args) for fn in functions)
        if case.outputs is not None and not all(
            isinstance(a, list) and all(0 <= i < len(a) for i in case.outputs) for a in accepted
        ):
            raise CodingTaskError(f"{task.id}/{case.name}: outputs {case.outputs} out of range")
        prepared.append(PreparedCase(case=case, args=encode(args), accepted=accepted))
    return tuple(prepared)


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
            tests=len(prepared.cases),
        )


def load_coding_tasks(coding_dir: Path, bank: QuestionBank | None = None) -> CodingTasks:
    """Load and check every task; with a bank, also check that questions and key points exist."""
    problems: list[str] = []
    tasks: list[PreparedTask] = []
    claimed: dict[str, str] = {}
    for path in sorted(coding_dir.glob("*.yaml")) if coding_dir.is_dir() else []:
        try:
            task = CodingTask.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
            tasks.append(PreparedTask(task=task, cases=_prepare(task)))
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
