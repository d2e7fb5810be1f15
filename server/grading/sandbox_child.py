"""Runs inside the sandbox subprocess: executes a candidate's code against hidden test cases.

Started by `server.grading.sandbox` as `python -I sandbox_child.py` with resource limits already
applied. Reads one JSON job from stdin and prints one JSON result line, prefixed by a marker so that
anything the candidate's code prints stays apart from the result. Expected values never enter this
process: it reports what the candidate's function returned and the parent compares. Uses only the
standard library and numpy (plus torch when the candidate's code asks for it)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback

RESULT_MARKER = "@@SPARRING_RESULT@@"
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


def _install_guard(workdir: str) -> None:
    """An audit hook (which user code cannot remove) that refuses network, processes, native
    calls and writes outside the scratch directory. It backs up the OS-level limits and the network
    namespace, which are not available on every machine."""

    def inside(path: object) -> bool:
        if not isinstance(path, str | bytes | os.PathLike):
            return True  # a file descriptor
        full = os.path.realpath(os.fsdecode(path))
        return full == workdir or full.startswith(workdir + os.sep)

    def hook(event: str, args: tuple) -> None:
        if event.startswith(BLOCKED_EVENTS):
            raise SandboxViolation(f"not allowed in the sandbox: {event}")
        if event == "open" and len(args) >= 3:
            path, mode, flags = args[0], args[1], args[2]
            if isinstance(mode, str):
                writing = any(c in mode for c in "wax+")
            else:
                writing = bool((flags or 0) & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND))
            if writing and not inside(path):
                raise SandboxViolation(f"writing outside the sandbox: {path}")
        if event in FILE_EVENTS and args and not inside(args[0]):
            raise SandboxViolation(f"not allowed in the sandbox: {event} {args[0]}")

    sys.addaudithook(hook)


def _to_framework(value, torch):
    if torch is None:
        return value
    import numpy as np

    if isinstance(value, np.ndarray):
        return torch.from_numpy(value.copy())
    return value


def _to_numpy(value):
    import numpy as np

    if isinstance(value, dict):
        raise TypeError("returned a dict; return the values in the documented order")
    if isinstance(value, tuple | list) and value and not isinstance(value[0], int | float):
        return [_to_numpy(v) for v in value]
    if hasattr(value, "detach"):  # a torch tensor
        value = value.detach().cpu().double().numpy()
    return np.asarray(value, dtype=np.float64)


def _encode(value):
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return {"__array__": value.tolist()}


def _decode(arg):
    import numpy as np

    if isinstance(arg, dict) and "__array__" in arg:
        return np.asarray(arg["__array__"], dtype=arg.get("dtype", "float64"))
    return arg


def _confine(limits: dict) -> list[str]:
    """OS-level limits, applied before any candidate code runs. Returns what could be applied."""
    import ctypes
    import resource

    applied = []
    for name, value in (
        ("RLIMIT_AS", limits["memory_bytes"]),
        ("RLIMIT_FSIZE", limits["file_bytes"]),
        ("RLIMIT_CORE", 0),
    ):
        resource.setrlimit(getattr(resource, name), (value, value))
    # Soft below hard, so the child gets SIGXCPU (reported as such) before SIGKILL.
    cpu = limits["cpu_seconds"]
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    applied.append("rlimits")
    libc = ctypes.CDLL(None, use_errno=True)
    clone_newnet, clone_newuser = 0x40000000, 0x10000000
    if libc.unshare(clone_newnet) == 0 or libc.unshare(clone_newuser | clone_newnet) == 0:
        applied.append("no_network")  # a fresh network namespace: not even loopback is up
    if os.geteuid() == 0:
        try:
            os.setgroups([])
            os.setgid(limits["uid"])
            os.setuid(limits["uid"])
            applied.append("unprivileged")
        except OSError:
            pass
    return applied


def main() -> None:
    job = json.loads(sys.stdin.read())
    workdir = os.path.realpath(os.getcwd())
    # Imported before confinement: afterwards the unprivileged user may not read the stdlib.
    for name in PRELOADED:
        __import__(name)

    torch = None
    if job.get("use_torch"):
        import torch  # type: ignore[no-redef]

        torch.set_num_threads(1)
    isolation = _confine(job["limits"])
    _install_guard(workdir)

    out = io.StringIO()
    namespace: dict = {"__name__": "candidate"}
    result: dict = {"error": None, "cases": [], "stdout": "", "isolation": isolation}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            exec(compile(job["code"], "<answer>", "exec"), namespace)
    # Any failure of the candidate's code, even SystemExit, is a result.
    except BaseException as exc:
        result["error"] = _describe(exc)
        _emit(result, out)
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
        _emit(result, out)
        return
    result["function"] = getattr(fn, "__name__", job["function"])
    for case in job["cases"]:
        entry: dict = {"name": case["name"], "output": None, "error": None}
        try:
            args = [_to_framework(_decode(a), torch) for a in case["args"]]
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                got = fn(*args)
            entry["output"] = _encode(_to_numpy(got))
        except BaseException as exc:
            entry["error"] = _describe(exc)
        result["cases"].append(entry)
    _emit(result, out)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SandboxViolation):
        return str(exc)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<answer>"]
    where = f" (line {frames[-1].lineno} of your code)" if frames else ""
    text = f"{type(exc).__name__}: {exc}"
    return (text[:300] + where) if not isinstance(exc, RecursionError) else "RecursionError"


def _emit(result: dict, out: io.StringIO) -> None:
    result["stdout"] = out.getvalue()[:PRINT_LIMIT].replace(RESULT_MARKER, "")
    sys.__stdout__.write("\n" + RESULT_MARKER + json.dumps(result, default=str) + "\n")
    sys.__stdout__.flush()


if __name__ == "__main__":
    main()
