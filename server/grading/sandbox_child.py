"""Runs inside the sandbox: executes a candidate's code against hidden test inputs.

Started by `server.grading.sandbox` inside bubblewrap as `python -I -S /opt/sparring/child.py`,
with namespaces and resource limits already in place, ahead of need (the warm pool). Reads a first
JSON line from stdin (where site-packages are, the result pipe's number, whether to import torch),
imports numpy (and torch), installs the audit hook and writes one byte, `R`, to the result pipe.
Then it waits for the job (the code, the function's name, the cases' inputs and the CPU seconds
the code may use), lowers its CPU limit to that much more than the imports used — so the limit
counts the candidate's code, not the imports — runs the cases and writes one JSON result to the
pipe. Expected values never enter this process: it reports what the candidate's function returned
and the server compares. Uses only the standard library and numpy (plus torch for torch answers).

The audit hook below is a second layer behind the OS isolation; its configuration lives in the
hook's closure as immutable values, so rebinding this module's globals (which the candidate can
reach as `sys.modules['__main__']`) changes nothing."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback

PRINT_LIMIT = 4000  # characters of the candidate's own output we keep
BLOCKED_EVENTS = (
    "socket.",
    "subprocess.",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.killpg",
    "ctypes.",
    "urllib.Request",
    "webbrowser.",
    # Ways to reach the hook's closure or other frames' objects.
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "sys._current_frames",
)
PRELOADED = (
    "numpy",
    "math",
    "cmath",
    "random",
    "typing",
    "collections",
    "functools",
    "itertools",
    "operator",
    "dataclasses",
    "statistics",
    "copy",
    "heapq",
    "bisect",
    "enum",
)
FILE_EVENTS = ("os.remove", "os.rename", "os.rmdir", "os.mkdir", "shutil.rmtree", "os.chmod")


class SandboxViolation(Exception):
    """The candidate's code tried something the sandbox forbids."""


class OutputTooLarge(Exception):
    """The function returned more numbers than any test needs: the whole run fails."""


def _install_guard(workdir: str) -> None:
    """An audit hook (which user code cannot remove) that refuses network, processes, native
    calls and writes outside the scratch directory."""
    # Frozen copies bound now: later changes to the module globals do not reach the hook.
    blocked = tuple(BLOCKED_EVENTS)
    file_events = frozenset(FILE_EVENTS)
    root = str(workdir)
    realpath, fsdecode, sep = os.path.realpath, os.fsdecode, os.sep
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND
    violation = SandboxViolation

    def inside(path: object) -> bool:
        if not isinstance(path, str | bytes | os.PathLike):
            return True  # a file descriptor
        full = realpath(fsdecode(path))
        return full == root or full.startswith(root + sep)

    def hook(event: str, args: tuple) -> None:
        if event.startswith(blocked):
            raise violation(f"not allowed in the sandbox: {event}")
        if event == "open" and len(args) >= 3:
            path, mode, flags = args[0], args[1], args[2]
            if isinstance(mode, str):
                writing = any(c in mode for c in "wax+")
            else:
                writing = bool((flags or 0) & write_flags)
            if writing and not inside(path):
                raise violation(f"writing outside the sandbox: {path}")
        if event in file_events and args and not inside(args[0]):
            raise violation(f"not allowed in the sandbox: {event} {args[0]}")

    sys.addaudithook(hook)


def _to_framework(value, torch):
    if torch is None:
        return value
    import numpy as np

    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    return value


def _to_numpy(value, max_numbers: int):
    import numpy as np

    if isinstance(value, dict):
        raise TypeError("returned a dict; return the values in the documented order")
    if isinstance(value, tuple | list) and value and not isinstance(value[0], int | float):
        return [_to_numpy(v, max_numbers) for v in value]
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().double().numpy()
    array = np.asarray(value, dtype=np.float64)
    if array.size > max_numbers:
        raise OutputTooLarge(
            f"the function returned {array.size} numbers; at most {max_numbers} are accepted"
        )
    return array


def _encode(value):
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return {"__array__": value.tolist()}


def _decode(arg):
    import numpy as np

    if isinstance(arg, dict) and "__array__" in arg:
        return np.asarray(arg["__array__"], dtype=arg.get("dtype", "float64"))
    return arg


def _limit_cpu(seconds: int) -> None:
    """From now on the process may use `seconds` more CPU (soft: SIGXCPU; hard: one more)."""
    import math
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = math.ceil(usage.ru_utime + usage.ru_stime)
    resource.setrlimit(resource.RLIMIT_CPU, (used + seconds, used + seconds + 1))


def main() -> None:
    setup = json.loads(sys.stdin.buffer.readline())
    result_fd = int(setup["result_fd"])
    # Nothing inherited but stdio and the result pipe (the launcher's script and args pipes).
    os.closerange(3, result_fd)
    os.closerange(result_fd + 1, 1024)
    max_numbers = int(setup.get("max_numbers", 100_000))
    workdir = os.path.realpath(os.getcwd())
    sys.path.extend(setup.get("site_dirs", []))
    for name in PRELOADED:
        __import__(name)
    import resource  # noqa: F401  (before the hook: _limit_cpu needs it)

    torch = None
    if setup.get("use_torch"):
        import torch  # type: ignore[no-redef]

        torch.set_num_threads(1)
        # The first tensor operations load kernels lazily (seconds on a busy machine): do it now,
        # before the clock starts, on throwaway tensors.
        probe = torch.from_numpy(__import__("numpy").arange(4.0)).requires_grad_()
        torch.nn.functional.logsigmoid(probe.cumsum(0)).sum().backward()
        torch.log_softmax(probe.reshape(2, 2), -1).gather(-1, torch.zeros(2, 1, dtype=torch.long))
    _install_guard(workdir)
    os.write(result_fd, b"R")  # ready: the server hands over the code and starts its clock
    job = json.loads(sys.stdin.buffer.read())
    _limit_cpu(int(job.get("cpu_seconds", 8)))

    out = io.StringIO()
    namespace: dict = {"__name__": "candidate"}
    result: dict = {"error": None, "cases": [], "stdout": ""}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            exec(compile(job["code"], "<answer>", "exec"), namespace)
    # Any failure of the candidate's code, even SystemExit, is a result.
    except BaseException as exc:
        result["error"] = _describe(exc)
        _emit(result, out, result_fd)
        return
    fn = namespace.get(job["function"])
    if not callable(fn):
        candidates = [
            v
            for k, v in namespace.items()
            if callable(v)
            and getattr(v, "__module__", None) == "candidate"
            and not k.startswith("_")
            and type(v).__name__ == "function"
        ]
        fn = candidates[-1] if candidates else None
    if fn is None:
        result["error"] = f"no function named {job['function']} was defined"
        _emit(result, out, result_fd)
        return
    result["function"] = str(getattr(fn, "__name__", job["function"]))
    for case in job["cases"]:
        entry: dict = {"name": case["name"], "output": None, "error": None}
        try:
            args = [_to_framework(_decode(a), torch) for a in case["args"]]
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                got = fn(*args)
            entry["output"] = _encode(_to_numpy(got, max_numbers))
        except OutputTooLarge as exc:
            result["error"], result["cases"] = str(exc), []
            break
        except BaseException as exc:
            entry["error"] = _describe(exc)
        result["cases"].append(entry)
    _emit(result, out, result_fd)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SandboxViolation):
        return str(exc)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<answer>"]
    where = f" (line {frames[-1].lineno} of your code)" if frames else ""
    text = f"{type(exc).__name__}: {exc}"
    return (text[:300] + where) if not isinstance(exc, RecursionError) else "RecursionError"


def _emit(result: dict, out: io.StringIO, fd: int) -> None:
    result["stdout"] = out.getvalue()[:PRINT_LIMIT]
    data = json.dumps(result, default=str).encode()
    while data:
        data = data[os.write(fd, data) :]
    os.close(fd)


if __name__ == "__main__":
    main()
    # The result is written: skip the interpreter's teardown (torch's alone took seconds on a busy
    # machine, and the server waits for the streams to close).
    os._exit(0)
