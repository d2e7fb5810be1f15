"""The sandbox that runs candidates' code: limits, isolation and clean-up, exercised for real."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from server.config import PROJECT_ROOT
from server.grading.sandbox import (
    CHILD_INSIDE,
    CHILD_SCRIPT,
    UID_RANGE,
    USERNS_UID,
    Sandbox,
    SandboxLimits,
    _host_env,
    _Layout,
    _seccomp_fd,
    parse_result,
)

ARRAY = {"__array__": [1.0, 2.0, 3.0], "dtype": "float64"}


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox(SandboxLimits(wall_seconds=10, cpu_seconds=3, memory_mb=1024))


def run(sandbox: Sandbox, body: str, *, use_torch: bool = False):
    code = ("import torch\n" if use_torch else "import numpy as np\n") + body
    return sandbox.run(code, "f", [("case", [ARRAY])], use_torch=use_torch)


def output(result) -> list[float]:
    assert result.error is None, result.error
    assert result.cases[0].error is None, result.cases[0].error
    return result.cases[0].output["__array__"]


def test_runs_numpy_and_torch_functions(sandbox):
    assert output(run(sandbox, "def f(x):\n    return np.cumsum(x)\n")) == [1.0, 3.0, 6.0]
    torch_result = run(sandbox, "def f(x):\n    return torch.cumsum(x, 0) * 2\n", use_torch=True)
    assert output(torch_result) == [2.0, 6.0, 12.0]


def test_prints_are_kept_apart_from_results(sandbox):
    result = run(sandbox, "def f(x):\n    print('@@SPARRING_RESULT@@ {}')\n    return x\n")
    assert output(result) == [1.0, 2.0, 3.0]
    assert "{}" in result.stdout


def test_errors_name_the_line_of_the_candidates_code(sandbox):
    result = run(sandbox, "def f(x):\n    y = 1\n    return x / undefined_name\n")
    assert (
        "NameError" in result.cases[0].error and "line 4" in result.cases[0].error
    )  # the import line is line 1
    syntax = sandbox.run("def f(x)\n    return x\n", "f", [("case", [ARRAY])], use_torch=False)
    assert syntax.error and "SyntaxError" in syntax.error and not syntax.cases


def test_infinite_loop_is_stopped_by_the_cpu_limit(sandbox):
    result = run(sandbox, "def f(x):\n    while True:\n        pass\n")
    assert result.error and ("CPU" in result.error or "timed out" in result.error)


def test_memory_is_limited(sandbox):
    result = run(sandbox, "def f(x):\n    block = bytearray(4 << 30)\n    return x\n")
    assert result.error or "MemoryError" in (result.cases[0].error or "")


def test_flooding_output_is_cut_off(sandbox):
    result = run(
        sandbox, "import os\ndef f(x):\n    while True:\n        os.write(1, b'x' * 65536)\n"
    )
    assert result.error and "output" in result.error


def test_no_network_even_to_loopback(sandbox):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.settimeout(0.5)
        port = server.getsockname()[1]
        reached = threading.Event()

        def accept() -> None:
            try:
                conn, _ = server.accept()
                conn.close()
                reached.set()
            except OSError:
                pass

        thread = threading.Thread(target=accept)
        thread.start()
        body = (
            "def f(x):\n    import socket\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=1)\n    return x\n"
        )
        result = run(sandbox, body)
        thread.join()
    assert not reached.is_set()
    failure = result.error or result.cases[0].error
    assert failure  # import refused, socket refused, or network unreachable


@pytest.mark.parametrize(
    "body",
    [
        "import os\ndef f(x):\n    os.system('echo hi')\n    return x\n",
        "import subprocess\ndef f(x):\n    subprocess.run(['true'])\n    return x\n",
        "import os\ndef f(x):\n    os.fork()\n    return x\n",
    ],
)
def test_no_new_processes(sandbox, body):
    result = run(sandbox, body)
    assert result.error or result.cases[0].error


def test_writes_stay_inside_a_private_scratch_that_vanishes(sandbox):
    # The sandbox's /tmp is its own size-limited tmpfs: a write there never reaches the host's.
    target = Path(tempfile.gettempdir()) / "sparring-sandbox-escape-test"
    target.unlink(missing_ok=True)
    before = set(Path(tempfile.gettempdir()).iterdir())
    contained = run(
        sandbox, f"def f(x):\n    open({str(target)!r}, 'w').write('x')\n    return x\n"
    )
    assert output(contained) == [1.0, 2.0, 3.0]
    assert not target.exists()
    for path in ("/etc/sparring-escape", "/opt/sparring/escape", "/usr/escape"):
        escape = run(sandbox, f"def f(x):\n    open({path!r}, 'w').write('x')\n    return x\n")
        assert escape.cases[0].error, path
    scratch = run(sandbox, "def f(x):\n    open('notes.txt', 'w').write('ok')\n    return x\n")
    assert output(scratch) == [1.0, 2.0, 3.0]
    assert not {
        p for p in set(Path(tempfile.gettempdir()).iterdir()) - before if "sparring" in p.name
    }


def test_the_code_sees_a_minimal_read_only_root_under_its_own_uid(sandbox):
    body = (
        "import os\n"
        "def f(x):\n"
        "    status = open('/proc/self/status').read()\n"
        "    caps = [l.split()[1] for l in status.splitlines() if l.startswith('CapEff')]\n"
        "    print(os.getuid(), caps[0], sorted(os.listdir('/')), os.getpid())\n"
        f"    print(os.path.exists({str(PROJECT_ROOT)!r}))\n"
        "    return x\n"
    )
    result = run(sandbox, body)
    assert output(result) == [1.0, 2.0, 3.0]
    first, second = result.stdout.splitlines()[:2]
    uid, caps = first.split()[:2]
    assert caps == "0000000000000000"
    if os.geteuid() == 0:
        assert UID_RANGE[0] <= int(uid) < UID_RANGE[1]
    assert "'work'" not in first and "'home'" not in first and "'var'" not in first
    assert second == "False"  # the project (answer key, data, .env) is not there


def test_leftovers_of_earlier_runs_are_removed_even_when_locked(tmp_path):
    old = tmp_path / "sparring-sandbox-abc123"
    (old / "a" / "b").mkdir(parents=True)
    (old / "a" / "b" / "f.txt").write_text("x")
    (old / "a" / "b").chmod(0)
    (old / "a").chmod(0)
    keep = tmp_path / "other-dir"
    keep.mkdir()
    Sandbox(leftovers_dir=tmp_path)
    assert not old.exists() and keep.exists()


def test_without_isolation_no_code_runs_and_the_reason_is_given(tmp_path):
    missing = Sandbox(bwrap="", leftovers_dir=tmp_path)
    assert not missing.isolation.available and "not installed" in missing.isolation.reason
    broken = Sandbox(bwrap="/bin/false", leftovers_dir=tmp_path)
    assert not broken.isolation.available and "self-test" in broken.isolation.reason
    result = broken.run("def f(x):\n    return x\n", "f", [("c", [ARRAY])], use_torch=False)
    assert result.error and "not run" in result.error and not result.cases


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        b'{"cases": [], "extra": 1}',
        b'{"cases": [{"name": "other", "output": null}]}',
        b'{"cases": [{"name": "case", "output": {"__array__": [[1, 2], [3]]}}]}',
        b'{"cases": [{"name": "case", "output": {"__array__": ["1"]}}]}',
        b'{"cases": [{"name": "case", "output": {"__array__": [true]}}]}',
        b'{"cases": [{"name": "case", "output": {"__array__": [[[[[1]]]]]}}]}',
        b'{"cases": [{"name": "case", "output": {"__array__": [1], "x": 2}}]}',
        b'{"cases": [{"name": "case"}, {"name": "case"}]}',
        b'{"error": 5}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"cases": [{"name": "case", "output": {"__array__": ['
        + b",".join([b"0"] * 200_000)
        + b"]}}]}",
    ],
)
def test_malformed_or_forged_results_are_a_run_error(raw):
    result = parse_result(raw, ["case"], SandboxLimits())
    assert result.error and "malformed" in result.error and not result.cases


def test_a_well_formed_result_passes_the_checks():
    raw = b'{"cases": [{"name": "case", "output": [{"__array__": [[1, 2.5]]}, {"__array__": 3}]}]}'
    result = parse_result(raw, ["case", "other"], SandboxLimits())
    assert result.error is None
    assert result.cases[0].output == [{"__array__": [[1, 2.5]]}, {"__array__": 3}]


def test_wall_clock_timeout_kills_a_sleeping_child():
    sandbox = Sandbox(SandboxLimits(wall_seconds=2, cpu_seconds=5))
    result = sandbox.run(
        "import time\ndef f(x):\n    time.sleep(30)\n    return x\n",
        "f",
        [("c", [ARRAY])],
        use_torch=False,
    )
    assert result.error and "timed out" in result.error


@pytest.mark.skipif(
    os.geteuid() != 0
    or not Path("/usr/sbin/runuser").exists()
    or not Path("/usr/bin/python3").exists(),
    reason="needs root (to become nobody) and Debian's python3",
)
def test_an_unprivileged_server_gets_a_user_namespace_that_cannot_nest(tmp_path):
    """The same sandbox started by an ordinary user (here nobody): bwrap makes a user namespace,
    and the code inside can make no further namespaces."""
    sandbox = Sandbox(leftovers_dir=tmp_path)
    sandbox._as_root = False  # build the command an unprivileged server would run
    layout = _Layout(
        binds=((str(CHILD_SCRIPT), CHILD_INSIDE),), python="/usr/bin/python3", site_dirs=()
    )
    probe = (
        "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); "
        "print(os.getuid(), libc.unshare(0x10000000), 'work' in os.listdir('/'))"
    )
    with _seccomp_fd() as filter_fd:
        argv = sandbox._argv(layout, USERNS_UID, ["-c", probe], filter_fd)
        out = subprocess.run(
            ["/usr/sbin/runuser", "-u", "nobody", "--", *argv],
            capture_output=True,
            text=True,
            env=_host_env(),
            pass_fds=() if filter_fd is None else (filter_fd,),
            timeout=30,
            check=False,
        )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(USERNS_UID), "-1", "False"]


def test_without_isolation_coding_answers_are_graded_on_prose_and_told_why(services, tmp_path):
    from server.grading.code_grader import CodeGrader, startup_line

    grader = CodeGrader(services.coding_tasks, Sandbox(bwrap="", leftovers_dir=tmp_path))
    entry = services.bank.get("gae-intro")
    answer = (
        "GAE 从后往前递推 TD 残差。\n```python\ndef compute_gae(r, v, d, g, l):\n    return r\n```"
    )
    prose = services.grading.rubric.grade(entry, answer, "zh")
    before = prose.score
    grade = grader.apply(entry, answer, prose, "zh")
    assert "code_not_run" in grade.flags and grade.tests == []
    assert grade.score == before  # the prose grade stands
    assert "代码未运行" in grade.feedback and "not installed" in grade.feedback
    assert startup_line(grader).endswith(
        "code questions fall back to prose grading: bubblewrap (bwrap) is not installed"
    )
    assert "fall back to prose grading" in startup_line(None)
    assert startup_line(services.code_grader).startswith(
        "Candidate code runs isolated in bubblewrap"
    )


# ---------- issue #23: the warm pool, limits that count the code, messages that name the limit --


def test_the_cpu_limit_counts_the_code_not_the_imports():
    """torch's import alone takes more than a second of CPU; with a 1 s CPU limit a torch answer
    still runs, because the limit starts when the code is handed over."""
    small = Sandbox(SandboxLimits(cpu_seconds=1, wall_seconds=60, pool_size=1, torch_pool_size=1))
    try:
        result = run(small, "def f(x):\n    return torch.cumsum(x, 0)\n", use_torch=True)
        assert output(result) == [1.0, 3.0, 6.0]
        looping = run(small, "def f(x):\n    while True:\n        pass\n")
        assert looping.kind == "cpu", looping.error
        assert "CPU time limit" in looping.error and "1 s of CPU" in looping.error
    finally:
        small.close()


def test_a_sleeping_answer_is_stopped_by_the_wall_clock_and_told_so():
    small = Sandbox(SandboxLimits(cpu_seconds=5, wall_seconds=3, pool_size=1, torch_pool_size=0))
    try:
        result = run(small, "import time\ndef f(x):\n    time.sleep(60)\n")
        assert result.kind == "wall" and "3 s wall-clock limit" in result.error
        assert 3 <= result.seconds < 10  # counted from the hand-over, not from the start-up
    finally:
        small.close()


def test_each_warm_container_serves_one_run_and_nothing_carries_over(sandbox):
    probe = (
        "import os\ndef f(x):\n"
        "    seen = os.path.exists('/tmp/mark')\n"
        "    open('/tmp/mark', 'w').write('x')\n"
        "    return [float(seen), float(os.getuid()), float(os.getpid())]\n"
    )
    first, second = output(run(sandbox, probe)), output(run(sandbox, probe))
    assert first[0] == 0.0 and second[0] == 0.0  # a fresh scratch each time
    if os.geteuid() == 0:
        assert first[1] != second[1]  # a fresh uid each time


def test_a_correct_torch_answer_passes_every_case_with_the_cores_busy(tmp_path):
    """Two busy processes on the cores (as in the issue: 3 of 7 correct torch answers timed out
    importing torch). The pool imports ahead of need and the limits count the code only."""
    from server.corpus.coding import load_coding_tasks
    from server.grading.code_grader import verify_known_answers

    tasks = load_coding_tasks(PROJECT_ROOT / "corpus" / "coding")
    gae = next(t for t in tasks.tasks if t.task.id == "gae")
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    box = Sandbox(leftovers_dir=tmp_path)
    try:
        box.warm()
        # every known answer of the task (the correct torch one among them) gets its verdict
        assert verify_known_answers(gae, box, seeds=(None, 7)) == []
    finally:
        box.close()
        for p in busy:
            p.kill()
            p.wait()
