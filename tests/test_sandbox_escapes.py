"""Escape attempts against the code sandbox, each sent as a candidate's answer through
`POST /api/grade` of the real app over HTTP (issue #12).

Each attack's code runs at module level and ends by raising `RuntimeError("REPORT {json}")`, so
what it observed inside comes back as the first hidden test's message. Every attack must end in a
graded failure or a harmless outcome, with the server alive, `/healthz` ok and nothing left on the
host. Most attacks import only numpy (about 0.1 s a run); none imports torch."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from server.config import PROJECT_ROOT
from server.grading.sandbox import Sandbox
from tests.support.gae import gae_code

QID = "gae-intro"  # a concept question: the code runs when the answer defines compute_gae
PRELUDE = """\
import json, os, sys, errno, textwrap
import numpy as np
report = {}

def why(exc):
    if isinstance(exc, OSError) and exc.errno:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return type(exc).__name__

def done():
    raise RuntimeError("REPORT " + json.dumps(report, separators=(",", ":")))

def compute_gae(rewards, values, dones, gamma, lam):
    return np.zeros(len(rewards))
"""
# Start a process without the `subprocess` module (and so without its audit event), as the
# issue's attack did. Returns (pid, read end of its stdout+stderr, or None).
SPAWN = """\
import _posixsubprocess

def spawn(argv, setsid=False, capture=True):
    err_r, err_w = os.pipe()
    out_r, out_w = os.pipe() if capture else (-1, -1)
    args = [os.fsencode(a) for a in argv]
    keep = tuple(sorted(fd for fd in (err_w,) if fd >= 0))
    pid = _posixsubprocess.fork_exec(
        args, [args[0]], True, keep, None, None, -1, -1, -1, out_w, -1, out_w,
        err_r, err_w, True, setsid, -1, None, None, -1, -1, None, False)
    os.close(err_w)
    os.read(err_r, 1000)
    os.close(err_r)
    if capture:
        os.close(out_w)
    return pid, (out_r if capture else None)

def run(argv):
    pid, out = spawn(argv)
    chunks = []
    while True:
        chunk = os.read(out, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(out)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode(errors="replace")
"""
RIGHT = gae_code()


def answer(code: str) -> str:
    return f"GAE 是 TD 残差的 (γλ) 指数加权和，从后往前递推：\n```python\n{code}\n```"


def attack_code(body: str, *, spawn: bool = False) -> str:
    return PRELUDE + (SPAWN if spawn else "") + textwrap.dedent(body) + "\ndone()\n"


def processes_with(marker: str) -> list[int]:
    """Host processes whose command line contains `marker` (we run as root or as their owner)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                cmdline = Path(entry.path, "cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(entry.name))
    return found


def host_tmp_entries() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).iterdir() if "sparring" in p.name}


@pytest.fixture(scope="module")
def isolated(services) -> None:
    isolation = services.code_grader.sandbox.isolation
    assert isolation.available, f"the escape suite needs bubblewrap: {isolation.reason}"


@pytest.fixture()
def grade(alice, base_url, isolated) -> Iterator:
    """Grade an answer; afterwards the server must be healthy and the host's /tmp untouched."""
    tmp_before = host_tmp_entries()

    def post(code: str) -> dict:
        r = alice.post(
            "/api/grade", json={"question_id": QID, "answer": answer(code), "grader": "rubric"}
        )
        assert r.status_code == 200, r.text
        return r.json()

    yield post
    assert httpx.get(f"{base_url}/healthz", timeout=1).json() == {"status": "ok"}
    assert host_tmp_entries() <= tmp_before


def report_of(g: dict) -> dict:
    """What the attack saw inside, from the first test's message (the run's error)."""
    assert "code_error" in g["flags"], g["flags"]
    message = g["tests"][0]["message"]
    assert "REPORT " in message, message
    text = message.split("REPORT ", 1)[1].rsplit(" (line", 1)[0]
    return json.loads(text)


def assert_graded_failure(g: dict) -> None:
    assert g["tests"] and not all(t["passed"] for t in g["tests"])


# -- the audit hook, the second layer ----------------------------------------------------------


def test_rewriting_the_hooks_config_through_main_changes_nothing(grade):
    g = grade(
        attack_code(
            """
            main = sys.modules["__main__"]
            main.BLOCKED_EVENTS = ("x",)
            main.FILE_EVENTS = ()
            for name in ("BLOCKED_EVENTS", "FILE_EVENTS"):
                report[name] = str(getattr(main, name))[:10]
            try:
                os.system("true")
                report["system"] = "ran"
            except Exception as exc:
                report["system"] = "refused" if "not allowed" in str(exc) else why(exc)
            try:
                os.fork()
                report["fork"] = "ran"
            except Exception as exc:
                report["fork"] = "refused" if "not allowed" in str(exc) else why(exc)
            try:
                import gc
                gc.get_objects()
                report["gc"] = "ran"
            except Exception as exc:
                report["gc"] = "refused" if "not allowed" in str(exc) else why(exc)
            """
        )
    )
    seen = report_of(g)
    assert seen["BLOCKED_EVENTS"] == "('x',)"  # the rebinding happened…
    assert seen["system"] == seen["fork"] == seen["gc"] == "refused"  # …and the hook ignored it
    assert_graded_failure(g)


# -- processes -----------------------------------------------------------------------------


def test_fork_exec_of_a_shell_runs_only_inside_the_sandbox(grade):
    project = str(PROJECT_ROOT)
    g = grade(
        attack_code(
            f"""
            report["uid"] = run(["/usr/bin/id", "-u"]).strip()
            report["root"] = " ".join(run(["/bin/ls", "/"]).split())
            report["cat"] = run(["/bin/sh", "-c",
                "cat {project}/.env {project}/corpus/coding/gae.yaml 2>&1"])[:100]
            report["touch"] = run(["/bin/sh", "-c", "touch /pwned 2>&1"])[:60]
            """,
            spawn=True,
        )
    )
    seen = report_of(g)
    if os.geteuid() == 0:
        assert int(seen["uid"]) >= 2_000_000_000  # a uid nothing on the host uses
    assert "work" not in seen["root"].split() and "home" not in seen["root"].split()
    assert "No such file" in seen["cat"] and "reference" not in seen["cat"]
    assert "Read-only" in seen["touch"] or "denied" in seen["touch"]
    assert not Path("/pwned").exists()


def test_an_orphan_started_with_setsid_does_not_outlive_the_run(grade, alice):
    marker = f"sparring-escape-orphan-{uuid.uuid4().hex}"
    g = grade(
        attack_code(
            f"""
            import time
            pid, _ = spawn([sys.executable, "-I", "-S", "-c",
                            "import time; time.sleep(120)", "{marker}"],
                           setsid=True, capture=False)
            time.sleep(0.3)
            stat = open(f"/proc/{{pid}}/stat").read().rsplit(")", 1)[1].split()
            report["orphan"] = pid
            report["own_session"] = stat[3] == str(pid)
            """,
            spawn=True,
        )
    )
    seen = report_of(g)
    assert seen["orphan"] > 0 and seen["own_session"]  # the orphan was really started
    deadline = time.monotonic() + 3
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker) == []
    # Nothing left to SIGSTOP the next candidate: a right answer passes every test.
    right = alice.post(
        "/api/grade", json={"question_id": QID, "answer": answer(RIGHT), "grader": "rubric"}
    ).json()
    assert all(t["passed"] for t in right["tests"]), right["tests"]


def test_signals_reach_nothing_outside_the_run_and_the_server_survives(grade, alice):
    server_pid = os.getpid()  # the app under test runs in this process
    g = grade(
        attack_code(
            f"""
            import signal
            try:
                os.kill(os.getppid(), 9)
                report["kill_parent"] = "sent"
            except Exception as exc:
                report["kill_parent"] = "refused" if "not allowed" in str(exc) else why(exc)
            hits = []
            for pid in list(range(1, 64)) + [{server_pid}]:
                if pid == os.getpid():
                    continue
                try:
                    fd = os.pidfd_open(pid)
                except OSError:
                    continue
                try:
                    signal.pidfd_send_signal(fd, signal.SIGSTOP)
                    hits.append(pid)
                except OSError:
                    pass
                finally:
                    os.close(fd)
            report["stopped"] = hits
            report["ppid"] = os.getppid()
            report["sh"] = run(["/bin/sh", "-c",
                "kill -STOP 1; kill -9 1; kill -9 {server_pid}; echo done"])[-120:]
            """,
            spawn=True,
        )
    )
    seen = report_of(g)
    assert seen["kill_parent"] == "refused"
    assert seen["ppid"] != server_pid
    os.kill(server_pid, 0)  # still here
    right = alice.post(
        "/api/grade", json={"question_id": QID, "answer": answer(RIGHT), "grader": "rubric"}
    ).json()
    assert all(t["passed"] for t in right["tests"]), right["tests"]


def test_a_server_killed_mid_run_takes_its_sandbox_runs_with_it(tmp_path):
    """kill -9 of the process that started a run: the run (and what it started) dies too."""
    marker = f"sparring-escape-killed-{uuid.uuid4().hex}"
    code = f"import time\ndef f(x):\n    time.sleep(60)  # {marker}\n    return x\n"
    script = (
        "import sys\n"
        f"sys.path.insert(0, {str(PROJECT_ROOT)!r})\n"
        "from server.grading.sandbox import Sandbox, SandboxLimits\n"
        "sandbox = Sandbox(SandboxLimits(wall_seconds=60), "
        f"leftovers_dir=__import__('pathlib').Path({str(tmp_path)!r}))\n"
        f"print('start', flush=True)\n"
        f"sandbox.run({code!r}, 'f', [('c', [1.0])], use_torch=False)\n"
    )
    server = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        # The run's job (with the marker) is on stdin; find the run by its sleeping child.
        deadline = time.monotonic() + 20
        runs: list[int] = []
        while time.monotonic() < deadline and not runs:
            runs = _sandbox_children(server.pid)
            time.sleep(0.2)
        assert runs, "the sandbox run did not start"
        time.sleep(0.5)
        os.kill(server.pid, signal.SIGKILL)
        server.wait()
        deadline = time.monotonic() + 5
        while any(_alive(p) for p in runs) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(p) for p in runs)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def _sandbox_children(pid: int) -> list[int]:
    """bwrap processes descended from `pid`, with all their descendants."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
        names[int(entry.name)] = name
    found, todo, inside = [], [pid], False
    while todo:
        current = todo.pop()
        for child in children.get(current, []):
            inside = inside or names.get(child) == "bwrap"
            found.append(child)
            todo.append(child)
    return found if inside and len(found) >= 3 else []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


# -- files: the answer key, secrets, the host ------------------------------------------------


@pytest.fixture()
def canaries(monkeypatch) -> Iterator[dict[str, str]]:
    secret = f"canary-{uuid.uuid4().hex}"
    monkeypatch.setenv("SPARRING_ESCAPE_CANARY", secret)  # in the server's own environment
    host_tmp = Path(tempfile.gettempdir()) / f"escape-canary-{uuid.uuid4().hex}"
    host_tmp.write_text(secret)
    host_tmp.chmod(0o644)
    try:
        yield {"secret": secret, "host_tmp": str(host_tmp)}
    finally:
        host_tmp.unlink(missing_ok=True)


def test_answer_key_secrets_database_and_host_files_are_not_readable(grade, settings, canaries):
    data = Path(settings.data_dir)
    targets = {
        "yaml": PROJECT_ROOT / "corpus" / "coding" / "gae.yaml",
        "env": PROJECT_ROOT / ".env",
        "db": data / "sparring.db",
        "wal": data / "sparring.db-wal",
        "tmp": Path(canaries["host_tmp"]),
        "environ1": Path("/proc/1/environ"),
        "root1": Path("/proc/1/root") / str(PROJECT_ROOT).lstrip("/") / "corpus/coding/gae.yaml",
        "cwd1": Path("/proc/1/cwd/corpus/coding/gae.yaml"),
    }
    g = grade(
        attack_code(
            f"""
            targets = {json.dumps({k: str(v) for k, v in targets.items()})}
            for key, path in targets.items():
                try:
                    text = open(path, errors="replace").read()
                    leak = {canaries["secret"]!r} in text or "reference:" in text
                    report[key] = "LEAK" if leak else f"read:{{len(text)}}"
                except Exception as exc:
                    report[key] = why(exc)
            """
        )
    )
    seen = report_of(g)
    for key in targets:
        assert seen[key] != "LEAK" and not str(seen[key]).startswith("read:"), (key, seen)
    assert_graded_failure(g)


def test_open_with_a_dir_fd_cannot_write_outside_scratch(grade):
    name = f"pwned-{uuid.uuid4().hex[:8]}"
    dirs = ["/", "/etc", "/opt/sparring", "/usr", "/dev", "/dev/shm", "/proc/self"]
    g = grade(
        attack_code(
            f"""
            for d in {dirs!r}:
                try:
                    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
                    os.close(os.open("{name}", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
                    report[d] = "WROTE"
                except Exception as exc:
                    report[d] = why(exc)
            """
        )
    )
    seen = report_of(g)
    assert "WROTE" not in seen.values(), seen
    for d in dirs:
        assert not Path(d, name).exists()


def test_writing_gigabytes_stops_at_the_scratch_quota(grade):
    g = grade(
        attack_code(
            """
            block = b"x" * 500_000
            written = 0
            try:
                for i in range(3000):  # 1.5 GB in files of 0.5 MB
                    with open(f"f{i}", "wb") as f:
                        f.write(block)
                    written += len(block)
            except Exception as exc:
                report["stopped"] = why(exc)
            try:
                with open("big", "wb") as f:
                    f.write(block * 8)
                report["big"] = "ok"
            except Exception as exc:
                report["big"] = why(exc)
            report["mb"] = written >> 20  # MiB
            """
        )
    )
    seen = report_of(g)
    assert seen["stopped"] == "ENOSPC" and seen["mb"] <= 64
    assert seen["big"] != "ok"  # one file is capped too (RLIMIT_FSIZE, or the full disk)


def test_a_locked_scratch_subdirectory_leaves_nothing_behind(grade):
    marker = f"locked-{uuid.uuid4().hex[:8]}"
    g = grade(
        attack_code(
            f"""
            os.makedirs("{marker}/a/b")
            open("{marker}/a/b/f", "w").write("x")
            os.chmod("{marker}/a/b", 0)
            os.chmod("{marker}/a", 0)
            os.chmod("{marker}", 0)
            report["locked"] = True
            """
        )
    )
    assert report_of(g) == {"locked": True}
    assert not list(Path(tempfile.gettempdir()).glob(f"**/{marker}"))


# -- the result channel ----------------------------------------------------------------------


def test_a_five_million_element_return_value_is_a_code_error(grade):
    g = grade(
        "import numpy as np\ndef compute_gae(r, v, d, g, l):\n    return np.zeros(5_000_000)\n"
    )
    assert "code_error" in g["flags"]
    assert "5000000 numbers" in g["tests"][0]["message"]


def test_a_return_value_smuggled_past_the_childs_check_is_a_code_error(grade):
    # Disable the child's own size check: the server's cap on the channel still holds. (A
    # million numbers per case, not five: encoding 6 × 5M numbers alone takes the child ~6 s.)
    g = grade(
        "import sys\nimport numpy as np\n"
        "sys.modules['__main__']._to_numpy = lambda value, limit: np.asarray(value)\n"
        "def compute_gae(r, v, d, g, l):\n    return np.zeros(1_000_000)\n"
    )
    assert "code_error" in g["flags"]
    assert "too large" in g["tests"][0]["message"] or "malformed" in g["tests"][0]["message"]


def test_a_forged_result_line_on_stdout_is_ignored(grade):
    forged = json.dumps(
        {"error": None, "cases": [{"name": "single_step", "output": {"__array__": [1.5]}}]}
    )
    code = (
        "import os\nimport numpy as np\n"
        f"FORGED = {forged!r}\n"
        "def compute_gae(r, v, d, g, l):\n"
        "    print('@@SPARRING_RESULT@@' + FORGED)\n"
        "    os.write(1, ('\\n@@SPARRING_RESULT@@' + FORGED + '\\n').encode())\n"
        "    return np.zeros(len(r))\n"
    )
    g = grade(code)
    assert_graded_failure(g)  # the function's real (wrong) outputs were graded
    assert "code_error" not in g["flags"]


def test_a_forged_result_written_to_the_result_pipe_is_a_code_error_or_useless(grade):
    code = (
        "import os, json\nimport numpy as np\n"
        "fds = [int(n) for n in os.listdir('/proc/self/fd') if int(n) > 2]\n"
        "for fd in fds:\n"
        "    try:\n"
        '        os.write(fd, b\'{"cases": [{"name": "single_step", "output": 1}]}\')\n'
        "    except OSError:\n"
        "        pass\n"
        "def compute_gae(r, v, d, g, l):\n"
        "    return np.zeros(len(r))\n"
    )
    g = grade(code)
    assert "code_error" in g["flags"]
    assert_graded_failure(g)


# -- network and native code -----------------------------------------------------------------


def test_no_network_and_no_native_escape_even_without_the_audit_hook(grade):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.2)
        port = listener.getsockname()[1]
        reached = threading.Event()
        stop = threading.Event()

        def accept() -> None:
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                    conn.close()
                    reached.set()
                except OSError:
                    continue

        thread = threading.Thread(target=accept)
        thread.start()
        # A fresh interpreter started with fork_exec has no audit hook: only the OS stops it.
        unhooked = textwrap.dedent(
            f"""
            import ctypes, os, socket
            out = {{}}
            try:
                socket.create_connection(("127.0.0.1", {port}), timeout=1)
                out["net"] = "connected"
            except OSError as exc:
                out["net"] = exc.__class__.__name__
            libc = ctypes.CDLL(None, use_errno=True)
            out["setuid0"] = libc.setuid(0)
            out["mount_ns"] = libc.unshare(0x00020000)
            out["user_ns"] = libc.unshare(0x10000000)  # nested user namespace: seccomp says no
            out["uid"] = os.getuid()
            print(out)
            """
        )
        try:
            g = grade(
                attack_code(
                    f"""
                    import socket, ctypes
                    for what, act in (
                        ("socket", lambda: socket.socket()),
                        ("ctypes", lambda: ctypes.CDLL(None)),
                    ):
                        try:
                            act()
                            report[what] = "allowed"
                        except Exception as exc:
                            report[what] = "refused" if "not allowed" in str(exc) else why(exc)
                    report["unhooked"] = run([sys.executable, "-I", "-S", "-c", {unhooked!r}])[-200:]
                    """,
                    spawn=True,
                )
            )
        finally:
            stop.set()
            thread.join()
    seen = report_of(g)
    assert seen["socket"] == "refused" and seen["ctypes"] == "refused"
    assert "'net': 'connected'" not in seen["unhooked"]
    assert "'setuid0': -1" in seen["unhooked"] and "'mount_ns': -1" in seen["unhooked"]
    assert "'user_ns': -1" in seen["unhooked"]
    assert not reached.is_set()


def test_isolation_is_set_up_once_and_reported(services):
    sandbox: Sandbox = services.code_grader.sandbox
    first = sandbox.isolation
    assert first is sandbox.isolation  # one self-test per process
    assert first.available and "bubblewrap" in first.summary


# -- issue #24 items 6 and 7: socket families, and what the command lines inside show ------------


def test_sockets_of_every_family_but_unix_are_refused_even_without_the_audit_hook(grade):
    """AF_VSOCK reached the VM's host (a bind collided with a host listener): seccomp now refuses
    socket() for every family but AF_UNIX, so nothing can be created, let alone bound."""
    unhooked = textwrap.dedent(
        """
        import errno, socket
        out = {}
        tries = {
            "inet": (socket.AF_INET, socket.SOCK_STREAM, ("0.0.0.0", 0)),
            "inet6": (socket.AF_INET6, socket.SOCK_DGRAM, ("::", 0)),
            "packet": (17, socket.SOCK_RAW, None),
            "netlink": (16, socket.SOCK_RAW, None),
            "vsock": (40, socket.SOCK_STREAM, (0xFFFFFFFF, 1234)),
            "unix": (socket.AF_UNIX, socket.SOCK_STREAM, None),
        }
        for name, (family, kind, address) in tries.items():
            try:
                s = socket.socket(family, kind)
                if address is not None:
                    s.bind(address)
                out[name] = "bound" if address is not None else "created"
                s.close()
            except OSError as exc:
                out[name] = errno.errorcode.get(exc.errno, str(exc.errno))
        print(out)
        """
    )
    g = grade(
        attack_code(
            f"""
            report["unhooked"] = run([sys.executable, "-I", "-S", "-c", {unhooked!r}])[-250:]
            """,
            spawn=True,
        )
    )
    seen = report_of(g)["unhooked"]
    for family in ("inet", "inet6", "packet", "netlink", "vsock"):
        assert f"'{family}': 'EAFNOSUPPORT'" in seen, seen
    assert "'unix': 'created'" in seen, seen  # numpy/torch may need Unix sockets; they stay


def test_no_command_line_or_environment_inside_names_the_hosts_layout(grade, settings):
    """/proc/1/cmdline showed bwrap's command line: the checkout, the Python install, the uid.
    Now bwrap reads its options from a pipe and the command from a script it execs."""
    host = sorted(
        {
            str(PROJECT_ROOT.resolve()),
            os.path.realpath(sys.base_prefix),
            os.path.realpath(sys.prefix),
            str(Path(settings.data_dir).resolve()),
            "/root",
            "/home",
            "/work",
        }
    )
    g = grade(
        attack_code(
            f"""
            texts = {{}}
            for label, path in (("init", "/proc/1/cmdline"), ("self", "/proc/self/cmdline"),
                                ("init_env", "/proc/1/environ"), ("env", "/proc/self/environ")):
                try:
                    texts[label] = open(path, "rb").read().replace(b"\\0", b" ").decode()
                except OSError as exc:
                    texts[label] = why(exc)
            texts["exe"] = sys.executable + " " + sys.prefix
            everything = " ".join(texts.values())
            report["leaks"] = [p for p in {host!r} if p in everything]
            report["uid_seen"] = str(os.getuid()) in everything
            report["init"] = texts["init"][:40]
            report["self"] = texts["self"][:40]
            """
        )
    )
    seen = report_of(g)
    assert seen["leaks"] == [] and not seen["uid_seen"], seen
    assert seen["init"].startswith("/usr/bin/bwrap --args"), seen
    assert seen["self"].startswith(("/opt/python/", "/usr/")), seen
