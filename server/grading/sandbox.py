"""Run untrusted candidate code in a confined subprocess and collect what its function returns.

Confinement, outermost first:
- a fresh interpreter (`python -I`) in its own session and an empty scratch directory that is
  removed afterwards, with a minimal environment;
- a wall-clock timeout enforced here (the whole process group is killed) and, inside the child,
  CPU, memory, file-size and core-dump limits;
- a fresh network namespace and, when the server runs as root, the `nobody` user (both best effort:
  some machines forbid them);
- an audit hook in the child that refuses sockets, new processes, native calls and writes outside the
  scratch directory, whatever the OS allows.
Output goes to files capped by the file-size limit, so a flood of prints cannot exhaust the server.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server.grading import sandbox_child

CHILD_SCRIPT = Path(sandbox_child.__file__)
NOBODY_UID = 65534


@dataclass(frozen=True)
class SandboxLimits:
    wall_seconds: float = 15.0  # importing torch alone takes 2–3 s on two cores
    cpu_seconds: int = 8
    memory_mb: int = 2048
    file_bytes: int = 1_000_000
    max_parallel: int = 2


@dataclass
class CaseOutput:
    name: str
    output: Any = None  # {"__array__": nested lists} or a list of those
    error: str | None = None


@dataclass
class SandboxRun:
    error: str | None = None  # the code did not run at all (syntax error, timeout, limit hit…)
    cases: list[CaseOutput] = field(default_factory=list)
    stdout: str = ""
    isolation: list[str] = field(default_factory=list)
    function: str | None = None


class Sandbox:
    """Thread-safe; at most `max_parallel` children run at once so grading cannot fork-bomb the host."""

    def __init__(self, limits: SandboxLimits | None = None) -> None:
        self.limits = limits or SandboxLimits()
        self._slots = threading.BoundedSemaphore(self.limits.max_parallel)

    def run(
        self, code: str, function: str, cases: list[tuple[str, list[Any]]], *, use_torch: bool
    ) -> SandboxRun:
        job = {
            "code": code,
            "function": function,
            "use_torch": use_torch,
            "cases": [{"name": name, "args": args} for name, args in cases],
            "limits": {
                "memory_bytes": self.limits.memory_mb << 20,
                "cpu_seconds": self.limits.cpu_seconds,
                "file_bytes": self.limits.file_bytes,
                "uid": NOBODY_UID,
            },
        }
        with self._slots:
            return self._run_child(json.dumps(job, allow_nan=True))

    def _run_child(self, payload: str) -> SandboxRun:
        workdir = tempfile.mkdtemp(prefix="sparring-sandbox-")
        outdir = tempfile.mkdtemp(prefix="sparring-sandbox-out-")
        try:
            if os.geteuid() == 0:
                os.chown(workdir, NOBODY_UID, NOBODY_UID)  # the child drops to nobody
            env = {
                "PATH": "/usr/bin:/bin",
                "HOME": workdir,
                "TMPDIR": workdir,
                "LANG": "C.UTF-8",
                "OMP_NUM_THREADS": "1",
                "OPENBLAS_NUM_THREADS": "1",
                "MKL_NUM_THREADS": "1",
            }
            out_path = Path(outdir, "stdout")
            with open(out_path, "wb") as out, open(Path(outdir, "stderr"), "wb") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-I", str(CHILD_SCRIPT)],
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=err,
                    cwd=workdir,
                    env=env,
                    start_new_session=True,
                )
                try:
                    proc.communicate(payload.encode(), timeout=self.limits.wall_seconds)
                except subprocess.TimeoutExpired:
                    return SandboxRun(
                        error=f"timed out after {self.limits.wall_seconds:g} s (infinite loop?)"
                    )
                finally:
                    _kill_group(proc)  # also whatever the child left running
            text = out_path.read_bytes().decode("utf-8", "replace")
            return _parse(text, proc.returncode, Path(outdir, "stderr"))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
            shutil.rmtree(outdir, ignore_errors=True)


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _parse(text: str, returncode: int | None, stderr_path: Path) -> SandboxRun:
    marker = sandbox_child.RESULT_MARKER
    if marker not in text:
        return SandboxRun(error=_crash_reason(returncode, stderr_path))
    data = json.loads(text.rsplit(marker, 1)[1].strip().splitlines()[0])
    return SandboxRun(
        error=data.get("error"),
        cases=[
            CaseOutput(name=c["name"], output=c.get("output"), error=c.get("error"))
            for c in data.get("cases", [])
        ],
        stdout=data.get("stdout", ""),
        isolation=data.get("isolation", []),
        function=data.get("function"),
    )


def _crash_reason(returncode: int | None, stderr_path: Path) -> str:
    if returncode is not None and returncode < 0:
        sig = signal.Signals(-returncode)
        reasons = {
            signal.SIGXCPU: "CPU time limit exceeded",
            signal.SIGXFSZ: "output limit exceeded",
            signal.SIGKILL: "killed (memory or time limit)",
            signal.SIGSEGV: "crashed (segmentation fault)",
        }
        return reasons.get(sig, f"killed by {sig.name}")
    tail = stderr_path.read_text("utf-8", "replace")[-300:].strip()
    if "MemoryError" in tail:
        return "memory limit exceeded"
    if "File too large" in tail:
        return "output limit exceeded (too much printed)"
    return (
        f"the sandbox process failed (exit {returncode}): {tail.splitlines()[-1] if tail else ''}"
    )
