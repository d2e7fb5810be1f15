"""Run untrusted candidate code under bubblewrap and collect what its function returns.

Each run is a fresh `bwrap` with its own mount, PID, network, IPC, UTS (and cgroup) namespaces:
- the root is an empty read-only tmpfs holding only /usr (and the /bin, /lib… links), the Python
  installation at a neutral path (/opt/python when it lives outside /usr), the virtualenv's
  site-packages at /opt/sparring/site-packages-N, the child script (/opt/sparring/child.py) and
  /etc/ld.so.cache — nothing of the project, its data, `.env`, the host's /tmp or /dev/shm;
- bwrap reads its whole command line from a pipe (`bwrap --args FD`), so its init, PID 1 inside,
  shows `bwrap --args N` and nothing of the host's layout (checkout, Python install, uid);
- scratch is a private tmpfs on /tmp capped by size (the disk quota); it vanishes with the run;
- the PID namespace dies with its init, so nothing the code starts outlives the run, and
  --die-with-parent ties the run to the server process;
- the code runs under a uid used by nothing else: as root, a random uid from a high range per run
  (set by `setpriv` inside the sandbox, no capabilities, no new privileges); as an ordinary user,
  in a user namespace that cannot create further namespaces;
- a seccomp filter refuses new namespaces, sockets of any family but AF_UNIX and a few rarely
  needed kernel interfaces;
- `prlimit` caps processes, address space, file size and core dumps; CPU is capped twice: loosely
  while the interpreter imports numpy/torch, then, once the code is handed over, the child lowers
  its own limit to `cpu_seconds` more than it has used (the limit counts the candidate's code);
- a wall-clock timeout here kills the run; it starts when the code is handed over.

Warm pool: containers are started ahead of need (`pool_size` with numpy imported, `torch_pool_size`
with torch too), each waits for exactly one job and is discarded after it. Nothing is shared
between runs: each has its own container, uid, scratch and processes; only the import happened
before the code arrived. A dedicated thread starts them, because --die-with-parent follows the
thread that started bwrap.

The answer key never goes in: the child receives the code and the hidden tests' inputs on stdin
and returns the function's outputs over a pipe of capped size; this module checks the shape of
what comes back (bounded cases, nesting and numbers) and the server compares against expected
values. Anything malformed, oversized or forged is a run error, never an exception.

Where bubblewrap is missing or fails its one self-test per process, `run` runs nothing and
reports why (`isolation.reason`); the code grader then grades the prose only."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import importlib.util
import json
import os
import secrets
import selectors
import shlex
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server.config import PROJECT_ROOT
from server.grading import sandbox_child

CHILD_SCRIPT = Path(sandbox_child.__file__).resolve()
INSIDE = "/opt/sparring"  # neutral paths inside the sandbox: nothing names the project
CHILD_INSIDE = f"{INSIDE}/child.py"
PYTHON_INSIDE = "/opt/python"  # where a Python installed outside /usr appears
SCRATCH = "/tmp"
# Per-run uids when the server is root: above systemd-nspawn's container range (ends 0x6FFF0000)
# and below 2^31, so no login user, container or other tool on the host uses them.
UID_RANGE = (2_000_000_000, 2_100_000_000)
USERNS_UID = 1000  # the uid inside a user namespace (it maps to the server's own uid outside)
LEFTOVER_PREFIX = "sparring-sandbox-"  # scratch directories of earlier versions of this sandbox
STDERR_KEPT = 4000
READY = b"R"  # the child's first byte on the result pipe: imports done, waiting for the job


@dataclass(frozen=True)
class SandboxLimits:
    wall_seconds: float = 15.0  # from the moment the code is handed over
    cpu_seconds: int = 8  # the candidate's code, not the imports before it
    memory_mb: int = 2048  # address space per process
    file_bytes: int = 1_000_000  # largest file in scratch, and most raw output kept from stdout
    max_parallel: int = 2
    scratch_mb: int = 64  # the whole scratch tmpfs: a disk quota
    max_processes: int = 64  # threads count too (torch starts a few)
    result_bytes: int = 4_000_000  # the result channel
    max_numbers: int = 100_000  # numbers in one case's output
    max_return_values: int = 8
    max_dims: int = 4
    pool_size: int = 2  # warm containers with numpy imported
    torch_pool_size: int = 2  # warm containers with torch imported too (when torch is installed)
    warmup_seconds: float = 180.0  # how long a run waits for a container to finish its imports
    import_cpu_seconds: int = 120  # CPU allowed for the imports, before the code's own limit


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
    # Why a run failed as a whole, for messages in the session's language: "cpu", "wall",
    # "memory", "output", "crash", "start", "malformed", "code" (the code raised), or None.
    kind: str | None = None
    seconds: float = 0.0  # wall time from handing over the code to the result


@dataclass(frozen=True)
class Isolation:
    """Whether code can run here, and with what confinement (for start-up output and docs)."""

    available: bool
    reason: str = ""  # why not, when unavailable
    summary: str = ""  # what is in force, when available
    features: tuple[str, ...] = ()


class SandboxUnavailable(RuntimeError):
    pass


@dataclass(frozen=True)
class _Layout:
    """What of the host the sandbox sees: (source, destination) read-only binds and the Python."""

    binds: tuple[tuple[str, str], ...]
    python: str  # inside path of the interpreter
    site_dirs: tuple[str, ...]  # inside paths of site-packages, for the child's sys.path
    library_path: str = ""  # LD_LIBRARY_PATH for a relocated Python linked to its own libpython


class _Uids:
    """Per-run uids that no process on the host and no other run of ours is using."""

    def __init__(self, as_root: bool) -> None:
        self.as_root = as_root
        self._lock = threading.Lock()
        self._in_use: set[int] = set()

    def reserve(self) -> int:
        if not self.as_root:
            return USERNS_UID
        with self._lock:
            busy = _uids_of_processes()
            while True:
                uid = UID_RANGE[0] + secrets.randbelow(UID_RANGE[1] - UID_RANGE[0])
                if uid not in self._in_use and uid not in busy:
                    self._in_use.add(uid)
                    return uid

    def release(self, uid: int) -> None:
        with self._lock:
            self._in_use.discard(uid)


@dataclass
class _Warm:
    """One started container: waits for its job, runs it, and is then discarded."""

    proc: subprocess.Popen | None
    result_r: int
    uid: int
    torch: bool
    error: str | None = None  # it could not be started
    ready: bool = False


class _Launcher:
    """Builds bwrap command lines and starts containers (no reference back to the Sandbox, so a
    pool thread holding it does not keep the Sandbox alive)."""

    def __init__(self, limits: SandboxLimits, bwrap: str | None, as_root: bool) -> None:
        self.limits, self.bwrap, self.as_root = limits, bwrap, as_root
        self.uids = _Uids(as_root)

    def argv(
        self,
        layout: _Layout,
        uid: int,
        python_args: list[str],
        seccomp_fd: int | None = None,
        cpu_seconds: int | None = None,
    ) -> list[str]:
        limits = self.limits
        cpu = limits.cpu_seconds if cpu_seconds is None else cpu_seconds
        argv = [self.bwrap or "bwrap"]
        argv += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
        argv += ["--unshare-cgroup-try", "--die-with-parent", "--new-session"]
        argv += ["--hostname", "sandbox"]
        if not self.as_root:
            # Unprivileged bwrap needs a user namespace; the code may not make more of them.
            argv += ["--unshare-user", "--uid", str(USERNS_UID), "--gid", str(USERNS_UID)]
            argv += ["--disable-userns"]
        argv += _mount_ops(layout, limits.scratch_mb)
        argv += ["--chdir", SCRATCH, "--clearenv"]
        for key, value in _child_env(layout).items():
            argv += ["--setenv", key, value]
        if self.as_root:
            # Only to switch to the run's uid below; setpriv then drops every capability.
            argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        if seccomp_fd is not None:
            argv += ["--seccomp", str(seccomp_fd)]
        argv += ["--", "/usr/bin/prlimit"]
        argv += [
            f"--nproc={limits.max_processes}",
            f"--as={limits.memory_mb << 20}",
            # Soft below hard, so the child gets SIGXCPU (reported as such) before SIGKILL.
            f"--cpu={cpu}:{cpu + 1}",
            f"--fsize={limits.file_bytes}",
            "--core=0",
            "--nofile=256",
        ]
        if self.as_root:
            argv += ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
            argv += ["--inh-caps=-all", "--bounding-set=-all", "--"]
        argv += [layout.python, "-I", "-S", *python_args]
        return argv

    def popen(self, argv: list[str], extra_fds: tuple[int, ...], **kwargs: Any) -> subprocess.Popen:
        """Start a container so that no command line inside names the host's layout: bwrap reads
        its options from a pipe (`bwrap --args N`; its init is PID 1 inside, and /proc/1/cmdline is
        readable there), and the command — prlimit, setpriv with the run's uid, the interpreter —
        is a one-line script that /bin/sh reads from another pipe and `exec`s, so once started
        only the interpreter's own neutral command line remains."""
        split = argv.index("--")
        options, command = argv[1:split], argv[split + 1 :]
        args_r, args_w = _pipe()
        script_r, script_w = _pipe()
        try:
            with _seccomp_fd() as filter_fd:
                if filter_fd is not None:
                    options = ["--seccomp", str(filter_fd), *options]
                _write_all(args_w, b"".join(a.encode() + b"\0" for a in options))
                # The child closes every inherited fd but its result pipe (this one too).
                _write_all(script_w, f"exec {shlex.join(command)}\n".encode())
                os.close(args_w)
                os.close(script_w)
                args_w = script_w = -1
                fds = (args_r, script_r, *extra_fds)
                fds += () if filter_fd is None else (filter_fd,)
                return subprocess.Popen(
                    [argv[0], "--args", str(args_r), "--", "/bin/sh", f"/dev/fd/{script_r}"],
                    pass_fds=fds,
                    env=_host_env(),
                    start_new_session=True,
                    **kwargs,
                )
        finally:
            for fd in (args_r, args_w, script_r, script_w):
                if fd >= 0:
                    os.close(fd)

    def start(self, torch: bool) -> _Warm:
        """A container whose child imports numpy (and torch) and then waits for one job."""
        uid = self.uids.reserve()
        try:
            layout = _python_layout()
        except SandboxUnavailable as exc:
            self.uids.release(uid)
            return _Warm(None, -1, uid, torch, error=str(exc))
        result_r, result_w = _pipe()
        cpu = self.limits.import_cpu_seconds
        argv = self.argv(layout, uid, [CHILD_INSIDE], None, cpu_seconds=cpu)
        preamble = {
            "result_fd": result_w,  # pass_fds keeps the number in the child
            "site_dirs": list(layout.site_dirs),
            "use_torch": torch,
            "max_numbers": self.limits.max_numbers,
        }
        try:
            proc = self.popen(
                argv,
                (result_w,),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            os.close(result_r)
            os.close(result_w)
            self.uids.release(uid)
            return _Warm(None, -1, uid, torch, error=f"the sandbox could not start: {exc}")
        os.close(result_w)
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps(preamble).encode() + b"\n")  # tiny: fits the pipe
            proc.stdin.flush()
        except OSError:
            pass  # it died already: the run reports why
        return _Warm(proc, result_r, uid, torch)

    def discard(self, warm: _Warm) -> None:
        if warm.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                warm.proc.kill()  # bwrap's death takes the whole PID namespace with it
            warm.proc.wait()
            for f in (warm.proc.stdin, warm.proc.stdout, warm.proc.stderr):
                with contextlib.suppress(OSError):
                    f and f.close()
        if warm.result_r >= 0:
            with contextlib.suppress(OSError):
                os.close(warm.result_r)
            warm.result_r = -1
        self.uids.release(warm.uid)


class _Pool:
    """Containers started ahead of need, per kind (numpy, torch), by one long-lived thread."""

    def __init__(self, launcher: _Launcher, sizes: dict[bool, int]) -> None:
        self._launcher = launcher
        self._sizes = sizes
        self._cond = threading.Condition()
        self._ready: dict[bool, deque[_Warm]] = {False: deque(), True: deque()}
        self._wanted: dict[bool, int] = {False: 0, True: 0}
        self._thread: threading.Thread | None = None
        self._closed = False

    def fill(self, torch: bool) -> None:
        """Top up the kind to its size (at least one), without waiting."""
        with self._cond:
            self._top_up(torch, minimum=1)

    def take(self, torch: bool, timeout: float) -> _Warm | None:
        with self._cond:
            self._top_up(torch, minimum=1)
            deadline = time.monotonic() + timeout
            while not self._ready[torch]:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return None
                if not self._ready[torch] and self._wanted[torch] == 0:
                    self._top_up(torch, minimum=1)
                self._cond.wait(min(left, 1.0))
            warm = self._ready[torch].popleft()
            self._top_up(torch, minimum=0)  # its replacement starts importing now
            return warm

    def close(self) -> None:
        with self._cond:
            self._closed = True
            leftovers = [w for kind in self._ready.values() for w in kind]
            for kind in self._ready.values():
                kind.clear()
            self._cond.notify_all()
        for warm in leftovers:
            self._launcher.discard(warm)

    def _top_up(self, torch: bool, minimum: int) -> None:
        if self._closed:
            return
        size = max(self._sizes[torch], minimum)
        missing = size - len(self._ready[torch]) - self._wanted[torch]
        if missing > 0:
            self._wanted[torch] += missing
            self._cond.notify_all()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=_pool_loop, args=(self,), name="sandbox-pool", daemon=True
                )
                self._thread.start()

    def _next_wanted(self) -> bool | None:
        """The kind to start next (numpy first: most answers use it); None once closed."""
        with self._cond:
            while not self._closed:
                for kind in (False, True):
                    if self._wanted[kind] > 0:
                        self._wanted[kind] -= 1
                        return kind
                self._cond.wait()
            return None

    def _add(self, warm: _Warm) -> None:
        with self._cond:
            if self._closed:
                closed = True
            else:
                closed = False
                self._ready[warm.torch].append(warm)
                self._cond.notify_all()
        if closed:
            self._launcher.discard(warm)


def _pool_loop(pool: _Pool) -> None:
    while (kind := pool._next_wanted()) is not None:
        pool._add(pool._launcher.start(kind))


class Sandbox:
    """Thread-safe; at most `max_parallel` runs at once so grading cannot fork-bomb the host."""

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        bwrap: str | None = None,
        leftovers_dir: Path | None = None,
    ) -> None:
        self.limits = limits or SandboxLimits()
        self._slots = threading.BoundedSemaphore(self.limits.max_parallel)
        self._bwrap = bwrap if bwrap is not None else _find_bwrap()
        self._launcher = _Launcher(self.limits, self._bwrap, os.geteuid() == 0)
        torch_size = self.limits.torch_pool_size if torch_installed() else 0
        self._pool = _Pool(self._launcher, {False: self.limits.pool_size, True: torch_size})
        # Containers left waiting are killed when the sandbox goes (and by --die-with-parent
        # when the server does).
        self._finalizer = weakref.finalize(self, self._pool.close)
        self._probe_lock = threading.Lock()
        self._isolation: Isolation | None = None
        # A server killed mid-run by an earlier version could leave scratch directories behind.
        remove_leftovers(leftovers_dir or Path(tempfile.gettempdir()))

    @property
    def _as_root(self) -> bool:
        return self._launcher.as_root

    @_as_root.setter
    def _as_root(self, value: bool) -> None:
        self._launcher.as_root = value
        self._launcher.uids.as_root = value

    @property
    def isolation(self) -> Isolation:
        """Set up and self-test isolation once (about 20 ms); later calls reuse the verdict."""
        with self._probe_lock:
            if self._isolation is None:
                self._isolation = self._probe()
            return self._isolation

    def warm(self) -> None:
        """Start the pool's containers now (server start-up), so the first answers find them
        ready; without this they start at the first run of each kind."""
        if self.isolation.available:
            self._pool.fill(False)
            if torch_installed() and self.limits.torch_pool_size > 0:
                self._pool.fill(True)

    def close(self) -> None:
        """Kill the containers waiting in the pool."""
        self._finalizer()

    def run(
        self, code: str, function: str, cases: list[tuple[str, list[Any]]], *, use_torch: bool
    ) -> SandboxRun:
        isolation = self.isolation
        if not isolation.available:
            return SandboxRun(error=f"code was not run: {isolation.reason}", kind="start")
        job = {
            "code": code,
            "function": function,
            "cases": [{"name": name, "args": args} for name, args in cases],
            "cpu_seconds": self.limits.cpu_seconds,
        }
        names = [name for name, _ in cases]
        torch = use_torch and torch_installed()
        with self._slots:
            run = None
            for _ in range(2):  # a container that died while waiting is replaced once
                warm = self._pool.take(torch, self.limits.warmup_seconds)
                if warm is None:
                    run = SandboxRun(
                        error="the sandbox could not start in time (the machine is overloaded)",
                        kind="start",
                    )
                    break
                try:
                    run = self._run_on(warm, job, names)
                finally:
                    self._launcher.discard(warm)
                if run.kind != "start":
                    break
        assert run is not None
        run.isolation = list(isolation.features)
        return run

    # -- set-up ---------------------------------------------------------------------------

    def _argv(
        self, layout: _Layout, uid: int, python_args: list[str], seccomp_fd: int | None = None
    ) -> list[str]:
        """The plain command line of one container (tests run it as another user)."""
        return self._launcher.argv(layout, uid, python_args, seccomp_fd)

    def _probe(self) -> Isolation:
        if not self._bwrap:
            return Isolation(False, reason="bubblewrap (bwrap) is not installed")
        try:
            layout = _python_layout()
        except SandboxUnavailable as exc:
            return Isolation(False, reason=str(exc))
        # The self-test starts the real interpreter with the real mounts, filter and limits.
        uid = self._launcher.uids.reserve()
        try:
            argv = self._launcher.argv(layout, uid, ["-c", "import json, os; os.write(1, b'ok')"])
            proc = self._launcher.popen(argv, (), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            try:
                out, err = proc.communicate(timeout=30)
            except subprocess.TimeoutExpired as exc:
                proc.kill()
                proc.communicate()
                return Isolation(False, reason=f"bwrap failed its self-test: {exc}")
        except OSError as exc:
            return Isolation(False, reason=f"bwrap failed its self-test: {exc}")
        finally:
            self._launcher.uids.release(uid)
        if proc.returncode != 0 or out != b"ok":
            detail = err.decode("utf-8", "replace").strip().splitlines()
            return Isolation(
                False,
                reason=f"bwrap failed its self-test (exit {proc.returncode}"
                + (f": {detail[-1][:200]})" if detail else ")"),
            )
        seccomp = _seccomp_program() is not None
        features = (
            "bubblewrap",
            "namespaces:mount,pid,net,ipc,uts" + ("" if self._as_root else ",user"),
            "read-only minimal root",
            f"scratch tmpfs {self.limits.scratch_mb} MB",
            "per-run uid" if self._as_root else "user namespace uid",
            "rlimits:nproc,as,cpu,fsize,core",
            *(("seccomp:no-namespaces,af-unix-only",) if seccomp else ()),
            "audit hook",
            "warm pool",
        )
        who = (
            f"a fresh uid ≥ {UID_RANGE[0]} per run"
            if self._as_root
            else "the server's uid inside a user namespace"
        )
        filt = "a seccomp filter against new namespaces and non-Unix sockets, " if seccomp else ""
        summary = (
            f"{_bwrap_version(self._bwrap)}: own mount/PID/network/IPC/UTS namespaces, read-only "
            f"minimal root without the project, {self.limits.scratch_mb} MB private scratch, "
            f"{who}, {filt}"
            f"≤ {self.limits.max_processes} processes, {self.limits.memory_mb} MB memory, "
            f"{self.limits.cpu_seconds} s CPU, {self.limits.wall_seconds:g} s wall; "
            f"{self.limits.pool_size} warm containers kept ready"
        )
        return Isolation(True, summary=summary, features=features)

    # -- one run --------------------------------------------------------------------------

    def _run_on(self, warm: _Warm, job: dict, names: list[str]) -> SandboxRun:
        if warm.error is not None or warm.proc is None:
            return SandboxRun(error=warm.error or "the sandbox could not start", kind="start")
        proc = warm.proc
        problem = _await_ready(warm, self.limits)
        if problem is not None:
            return problem
        payload = json.dumps(job, allow_nan=True).encode()
        streams = _Streams(proc, warm.result_r, payload, self.limits)
        started = time.monotonic()  # the wall clock starts when the code is handed over
        problem_text = streams.pump(started + self.limits.wall_seconds)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
        seconds = time.monotonic() - started
        if problem_text is not None:
            kind = "wall" if problem_text.startswith("timed out") else "output"
            return SandboxRun(error=problem_text, kind=kind, seconds=seconds)
        if not streams.result:
            reason, kind = _crash_reason(proc.returncode, streams.stderr_text(), self.limits)
            return SandboxRun(error=reason, kind=kind, seconds=seconds)
        run = parse_result(bytes(streams.result), names, self.limits)
        run.seconds = seconds
        return run


def _await_ready(warm: _Warm, limits: SandboxLimits) -> SandboxRun | None:
    """Wait (outside the code's limits) until the container has imported and asks for its job."""
    proc = warm.proc
    assert proc is not None and proc.stderr is not None
    if warm.ready:
        return None
    deadline = time.monotonic() + limits.warmup_seconds
    stderr = bytearray()
    err_fd = proc.stderr.fileno()
    with selectors.DefaultSelector() as sel:
        sel.register(warm.result_r, selectors.EVENT_READ)
        sel.register(err_fd, selectors.EVENT_READ)
        while time.monotonic() < deadline:
            for key, _ in sel.select(min(1.0, max(0.0, deadline - time.monotonic()))):
                if key.fd == err_fd:
                    chunk = os.read(err_fd, 65536)
                    if chunk:
                        stderr += chunk[: max(0, STDERR_KEPT - len(stderr))]
                        continue
                    sel.unregister(err_fd)
                    continue
                first = os.read(warm.result_r, 1)
                if first == READY:
                    warm.ready = True
                    return None
                proc.wait()
                reason, _ = _crash_reason(
                    proc.returncode, stderr.decode("utf-8", "replace"), limits
                )
                return SandboxRun(error=f"the sandbox did not start: {reason}", kind="start")
    return SandboxRun(
        error="the sandbox could not start in time (the machine is overloaded)", kind="start"
    )


class _Streams:
    """Feeds the job to stdin and drains stdout, stderr and the result pipe, each with a cap."""

    def __init__(
        self, proc: subprocess.Popen, result_fd: int, payload: bytes, limits: SandboxLimits
    ) -> None:
        self.proc, self.limits = proc, limits
        self.result = bytearray()
        self.stdout_bytes = 0
        self.stderr = bytearray()
        self._payload = memoryview(payload)
        self._result_fd = result_fd

    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")

    def pump(self, deadline: float) -> str | None:
        """None when every stream closed in time; else why the run was stopped."""
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        sel = selectors.DefaultSelector()
        fds = {
            self.proc.stdout.fileno(): "stdout",
            self.proc.stderr.fileno(): "stderr",
            self._result_fd: "result",
        }
        for fd in fds:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        stdin = self.proc.stdin.fileno()
        os.set_blocking(stdin, False)
        sel.register(stdin, selectors.EVENT_WRITE)
        open_reads = len(fds)
        try:
            while open_reads:
                left = deadline - time.monotonic()
                if left <= 0:
                    return (
                        f"timed out: the {self.limits.wall_seconds:g} s wall-clock limit was "
                        "reached (the code waited, or the machine is very busy)"
                    )
                for key, _ in sel.select(min(left, 1.0)):
                    fd = key.fd
                    if fd == stdin:
                        if not self._feed(stdin):
                            sel.unregister(stdin)
                            self.proc.stdin.close()
                        continue
                    try:
                        chunk = os.read(fd, 65536)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        if fds[fd] == "result" and self.result:
                            return None  # the child wrote and closed its result: the run is over
                        sel.unregister(fd)
                        open_reads -= 1
                        continue
                    problem = self._take(fds[fd], chunk)
                    if problem:
                        return problem
        finally:
            sel.close()
        return None

    def _feed(self, fd: int) -> bool:
        """Write what the pipe takes; False once the job is written (or the child left)."""
        try:
            written = os.write(fd, self._payload[:65536])
        except BlockingIOError:
            return True
        except (BrokenPipeError, OSError):
            return False
        self._payload = self._payload[written:]
        return len(self._payload) > 0

    def _take(self, stream: str, chunk: bytes) -> str | None:
        if stream == "result":
            self.result += chunk
            if len(self.result) > self.limits.result_bytes:
                return "the result was too large (the function returned too much data)"
        elif stream == "stdout":
            self.stdout_bytes += len(chunk)
            if self.stdout_bytes > self.limits.file_bytes:
                return "output limit exceeded (too much printed)"
        else:
            self.stderr += chunk
            if len(self.stderr) > self.limits.file_bytes:
                return "output limit exceeded (too much printed)"
        return None


# -- the result channel --------------------------------------------------------------------


class _Malformed(ValueError):
    pass


def parse_result(raw: bytes, names: list[str], limits: SandboxLimits) -> SandboxRun:
    """The child's result, checked field by field; anything unexpected is a run error."""
    try:
        data = json.loads(raw.decode("utf-8"))
        return _checked(data, names, limits)
    except _Malformed as exc:
        return SandboxRun(error=f"the sandbox returned a malformed result ({exc})")
    except (ValueError, RecursionError, UnicodeDecodeError):
        return SandboxRun(error="the sandbox returned a malformed result")


def _checked(data: Any, names: list[str], limits: SandboxLimits) -> SandboxRun:
    if not isinstance(data, dict) or not set(data) <= {"error", "cases", "stdout", "function"}:
        raise _Malformed("not a result object")
    error = _opt_text(data.get("error"), 600)
    function = _opt_text(data.get("function"), 200)
    stdout = _opt_text(data.get("stdout"), sandbox_child.PRINT_LIMIT) or ""
    cases = data.get("cases", [])
    if not isinstance(cases, list) or len(cases) > len(names):
        raise _Malformed("wrong number of cases")
    outputs = []
    for expected_name, case in zip(names, cases, strict=False):
        if not isinstance(case, dict) or not set(case) <= {"name", "output", "error"}:
            raise _Malformed("not a case object")
        if case.get("name") != expected_name:
            raise _Malformed("cases out of order")
        case_error = _opt_text(case.get("error"), 600)
        output = case.get("output")
        if output is not None:
            output = _checked_output(output, limits)
        outputs.append(CaseOutput(name=expected_name, output=output, error=case_error))
    return SandboxRun(error=error, cases=outputs, stdout=stdout, function=function)


def _opt_text(value: Any, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _Malformed("text expected")
    return value[:limit]


def _checked_output(value: Any, limits: SandboxLimits) -> Any:
    if isinstance(value, list):
        if not 0 < len(value) <= limits.max_return_values:
            raise _Malformed("too many return values")
        return [_checked_array(v, limits) for v in value]
    return _checked_array(value, limits)


def _checked_array(value: Any, limits: SandboxLimits) -> dict:
    if not isinstance(value, dict) or set(value) != {"__array__"}:
        raise _Malformed("an array expected")
    numbers = _count_numbers(value["__array__"], limits.max_dims, limits.max_numbers)
    if numbers > limits.max_numbers:
        raise _Malformed("too many numbers")
    return {"__array__": value["__array__"]}


def _count_numbers(value: Any, depth: int, budget: int) -> int:
    """Numbers in a rectangular nested list of at most `depth` levels (bools and text refused)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return 1
    if not isinstance(value, list) or depth == 0:
        raise _Malformed("numbers expected")
    if len(value) > budget:
        raise _Malformed("too many numbers")
    if not value:
        return 0
    inner = isinstance(value[0], list)
    total = 0
    for item in value:
        if isinstance(item, list) != inner or (inner and len(item) != len(value[0])):
            raise _Malformed("ragged array")
        total += _count_numbers(item, depth - 1, budget)
        if total > budget:
            raise _Malformed("too many numbers")
    return total


def _crash_reason(returncode: int | None, stderr: str, limits: SandboxLimits) -> tuple[str, str]:
    """Why the child died without a result, and the kind of limit (names the one that was hit)."""
    # bwrap reports a child killed by a signal as 128 + the signal number.
    if returncode is not None and returncode > 128:
        with contextlib.suppress(ValueError):
            sig = signal.Signals(returncode - 128)
            cpu = f"CPU time limit exceeded: the code used its {limits.cpu_seconds} s of CPU"
            reasons = {
                signal.SIGXCPU: (f"{cpu} (infinite loop?)", "cpu"),
                # The hard CPU limit (one second above the soft one) kills with SIGKILL.
                signal.SIGKILL: (f"{cpu} and was killed", "cpu"),
                signal.SIGXFSZ: ("file size limit exceeded", "output"),
                signal.SIGSEGV: ("crashed (segmentation fault)", "crash"),
            }
            return reasons.get(sig, (f"killed by {sig.name}", "crash"))
    tail = stderr[-STDERR_KEPT:].strip()
    if "MemoryError" in tail:
        return f"memory limit exceeded ({limits.memory_mb} MB)", "memory"
    if "File too large" in tail:
        return "file size limit exceeded", "output"
    last = tail.splitlines()[-1][:300] if tail else ""
    return f"the sandbox process failed (exit {returncode}): {last}", "crash"


# -- host facts ----------------------------------------------------------------------------


def _find_bwrap() -> str | None:
    # A fixed search path: the server's PATH is not trusted to choose the sandbox binary.
    return shutil.which("bwrap", path="/usr/bin:/bin:/usr/local/bin")


@functools.cache
def _bwrap_version(bwrap: str) -> str:
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, timeout=10, check=False)
        return out.stdout.decode().strip() or "bubblewrap"
    except (OSError, subprocess.TimeoutExpired):
        return "bubblewrap"


@functools.cache
def _python_layout() -> _Layout:
    """Binds for this interpreter (cached: the interpreter does not change while we run). A Python
    installed outside /usr (pyenv, uv…) appears at /opt/python, so no path inside the sandbox
    names the host's home directories or checkout."""
    base_prefix = os.path.realpath(sys.base_prefix)
    python = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    binds: list[tuple[str, str]] = []
    relocated = not _under(base_prefix, "/usr")
    library_path = ""

    def inside(path: str) -> str:
        if relocated and _under(path, base_prefix):
            return PYTHON_INSIDE + path[len(base_prefix.rstrip("/")) :]
        return path

    if relocated:
        binds.append((base_prefix, PYTHON_INSIDE))
        # Such builds link libpython by an absolute RUNPATH into their prefix.
        if os.path.isdir(os.path.join(base_prefix, "lib")):
            library_path = f"{PYTHON_INSIDE}/lib"
    python_inside = inside(python)
    if not (_under(python, "/usr") or _under(python, base_prefix)):
        python_inside = f"{INSIDE}/bin/python3"
        binds.append((python, python_inside))
    site_dirs: list[str] = []
    seen: set[str] = set()
    for i, path in enumerate(site.getsitepackages()):
        real = os.path.realpath(path)
        if real in seen or not os.path.isdir(real):
            continue
        seen.add(real)
        if _under(real, "/usr") or _under(real, base_prefix):
            site_dirs.append(inside(real))
        else:
            dest = f"{INSIDE}/site-packages-{i}"
            binds.append((real, dest))
            site_dirs.append(dest)
    binds.append((str(CHILD_SCRIPT), CHILD_INSIDE))
    protected = [PROJECT_ROOT.resolve()]
    for source, _ in binds:
        if source != str(CHILD_SCRIPT) and any(_under(str(p), source) for p in protected):
            raise SandboxUnavailable(f"the Python installation at {source} contains the project")
    return _Layout(
        binds=tuple(binds),
        python=python_inside,
        site_dirs=tuple(site_dirs),
        library_path=library_path,
    )


@functools.cache
def torch_installed() -> bool:
    """Whether torch can be imported (from the same site-packages the sandbox sees)."""
    return importlib.util.find_spec("torch") is not None


# seccomp: the code may not make namespaces (nested user namespaces are the usual way from an
# unprivileged process to kernel attack surface), open sockets of any family but AF_UNIX (the
# network namespace has no interfaces, but AF_VSOCK reaches the VM's host and AF_PACKET/AF_NETLINK
# are kernel attack surface), nor use a few rarely needed kernel interfaces.
# Syscall numbers per architecture; elsewhere no filter is installed (the summary says so).
_SECCOMP_ARCHES = {
    # machine: (AUDIT_ARCH, {name: number})
    "x86_64": (
        0xC000003E,
        {
            "unshare": 272, "setns": 308, "clone": 56, "clone3": 435, "socket": 41,
            "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "keyctl": 250,
            "add_key": 248, "request_key": 249, "userfaultfd": 323, "perf_event_open": 298,
            "bpf": 321, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "unshare": 97, "setns": 268, "clone": 220, "clone3": 435, "socket": 198,
            "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "keyctl": 219,
            "add_key": 217, "request_key": 218, "userfaultfd": 282, "perf_event_open": 241,
            "bpf": 280, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        },
    ),
}  # fmt: skip
_CLONE_NAMESPACE_FLAGS = (
    0x7E020080  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET|NEWTIME
)
AF_UNIX = 1


@functools.cache
def _seccomp_program() -> bytes | None:
    """A classic-BPF seccomp filter for this machine's architecture, or None."""
    import errno
    import platform
    import struct

    arch = _SECCOMP_ARCHES.get(platform.machine())
    if arch is None:
        return None
    audit_arch, numbers = arch
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EPERM
    no_family = 0x00050000 | errno.EAFNOSUPPORT  # what a kernel without the family answers
    enosys = 0x00050000 | errno.ENOSYS  # clone3: glibc then falls back to clone, which we check
    # (code, jump-if-true label, jump-if-false label, k); labels resolved below.
    prog: list[tuple[int, str | None, str | None, int]] = [
        (ld, None, None, 4),  # seccomp_data.arch
        (jeq, None, "deny", audit_arch),
        (ld, None, None, 0),  # seccomp_data.nr
    ]
    if audit_arch == 0xC000003E:
        prog.append((jge, "deny", None, 0x40000000))  # the x32 ABI: another way to the same calls
    prog.append((jeq, "enosys", None, numbers["clone3"]))
    prog.append((jeq, "clone", None, numbers["clone"]))
    prog.append((jeq, "socket", None, numbers["socket"]))
    blocked = [n for name, n in numbers.items() if name not in ("clone", "clone3", "socket")]
    prog += [(jeq, "deny", None, n) for n in blocked]
    prog.append((ret, None, None, allow))
    labels = {"clone": len(prog)}
    prog.append((ld, None, None, 16))  # clone's flags: low word of args[0]
    prog.append((jset, "deny", "allow", _CLONE_NAMESPACE_FLAGS))
    labels["socket"] = len(prog)
    prog.append((ld, None, None, 16))  # socket's family: low word of args[0]
    prog.append((jeq, "allow", "no_family", AF_UNIX))
    labels["allow"] = len(prog)
    prog.append((ret, None, None, allow))
    labels["deny"] = len(prog)
    prog.append((ret, None, None, deny))
    labels["no_family"] = len(prog)
    prog.append((ret, None, None, no_family))
    labels["enosys"] = len(prog)
    prog.append((ret, None, None, enosys))
    out = b""
    for i, (code, jt, jf, k) in enumerate(prog):
        t = labels[jt] - i - 1 if jt else 0
        f = labels[jf] - i - 1 if jf else 0
        if t < 0 or f < 0:
            raise AssertionError("seccomp jumps go forward only")
        out += struct.pack("=HBBI", code, t, f, k)
    return out


def _pipe() -> tuple[int, int]:
    """os.pipe() with both ends above 2: a server started with stdin closed would otherwise get
    fd 0 for a pipe, and the child would take it for its stdin."""
    ends = []
    for fd in os.pipe():
        if fd < 3:
            moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
            os.close(fd)
            fd = moved
        ends.append(fd)
    return ends[0], ends[1]


def _write_all(fd: int, data: bytes) -> None:
    """Into a fresh pipe: a few KB fit its buffer, so this never blocks."""
    while data:
        data = data[os.write(fd, data) :]


@contextlib.contextmanager
def _seccomp_fd():
    """A pipe holding the filter, for `bwrap --seccomp FD` (closed once bwrap has started)."""
    program = _seccomp_program()
    if program is None:
        yield None
        return
    read_fd, write_fd = _pipe()
    try:
        os.write(write_fd, program)  # a few hundred bytes: fits the pipe buffer
        os.close(write_fd)
        write_fd = -1
        yield read_fd
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


def _mount_ops(layout: _Layout, scratch_mb: int) -> list[str]:
    ops = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = f"/{name}"
        if os.path.islink(host):
            ops += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            ops += ["--ro-bind", host, host]
    # bwrap makes missing parents 0700, which the unprivileged uid could not cross.
    parents = sorted(
        {str(p) for _, dest in layout.binds for p in Path(dest).parents if str(p) != "/"} | {"/etc"}
    )
    for parent in parents:
        ops += ["--perms", "0755", "--dir", parent]
    ops += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    for source, dest in layout.binds:
        ops += ["--ro-bind", source, dest]
    ops += ["--proc", "/proc", "--dev", "/dev"]
    ops += ["--perms", "1777", "--size", str(scratch_mb << 20), "--tmpfs", SCRATCH]
    # Last: nothing but the scratch tmpfs is writable (not /, not /dev or /dev/shm).
    ops += ["--remount-ro", "/dev", "--remount-ro", "/"]
    return ops


def _child_env(layout: _Layout | None = None) -> dict[str, str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": SCRATCH,
        "TMPDIR": SCRATCH,
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }
    if layout is not None and layout.library_path:
        env["LD_LIBRARY_PATH"] = layout.library_path
    return env


def _host_env() -> dict[str, str]:
    """bwrap's own environment: none of the server's (keys, tokens), since its init process is
    visible inside the sandbox."""
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _uids_of_processes() -> set[int]:
    uids = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    uids.add(entry.stat().st_uid)
    return uids


def remove_leftovers(tmp_dir: Path) -> list[str]:
    """Remove scratch directories that earlier sandbox versions left under `tmp_dir` (ours only),
    even where the code made a subdirectory unreadable (chmod 0)."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(tmp_dir):
            if not entry.name.startswith(LEFTOVER_PREFIX):
                continue
            with contextlib.suppress(OSError):
                if entry.is_symlink() or entry.stat(follow_symlinks=False).st_uid != os.geteuid():
                    continue
                _force_rmtree(entry.path)
                removed.append(entry.path)
    return removed


def _force_rmtree(path: str) -> None:
    def unlock(target: str) -> None:
        # O_PATH|O_NOFOLLOW: a planted symlink must not redirect the chmod outside the tree.
        with contextlib.suppress(OSError):
            fd = os.open(target, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY)
            try:
                os.chmod(f"/proc/self/fd/{fd}", 0o700)
            finally:
                os.close(fd)

    unlock(path)
    for root, dirs, _ in os.walk(path):
        for name in dirs:
            unlock(os.path.join(root, name))  # before os.walk descends into it
    shutil.rmtree(path, ignore_errors=True)
