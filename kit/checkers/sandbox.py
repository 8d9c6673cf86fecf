"""Run model-written checker code, `check(state, trajectory) -> bool | dict`, sandboxed.

    with Sandbox(workers=2) as box:
        r = box.run(SOURCE, state, trajectory)          # CheckResult(status=CheckStatus.OK, passed=True, ...)
        vs = box.run_many([(SOURCE, state, traj), ...])
    run_code(SOURCE, state, trajectory)                   # one shared sandbox per process
    sandbox_cli("my_checker.py")                         # {"status": "ok", "passed": True, ...}

A model wrote the code, so it never runs in this process (it is parsed and compiled here,
which runs nothing). The walls:

1. kit/checkers/screen.py rejects, before anything runs, sources that import, touch any
   `_name`, name dangerous builtins (eval, open, getattr, type, ...), or reach frames,
   code, `mro` or format strings. Rejected: CheckResult(status=REJECTED, reason=rule+line).
2. kit/checkers/worker.py runs each check in a fresh fork of a warm zygote process (a
   separate `python -I -S` with a near-empty environment; see kit/checkers/zygote.py):
   whitelisted builtins only, its own fresh copy of `state` and `trajectory` parsed from
   JSON (mutating them changes nothing outside), a recursion limit, rlimits (CPU, 256 MB
   address space, no file writes, no new descriptors, no processes).
3. OS walls, without root too. Namespaces: the zygote runs under `unshare --net --mount
   --pid --ipc` (as non-root inside `--user --map-root-user`, an unprivileged user
   namespace): no network, no other process visible, dies with `unshare`; each check
   chroots into an empty read-only scratch directory, then becomes uid nobody (real root)
   or drops every capability (user namespace). Seccomp: every check, root or not, installs
   a syscall filter (no_new_privs; EPERM for sockets, exec, fork/clone, ptrace, kill, file
   opens and changes, mounts, namespaces, privilege changes, bpf, io_uring, keys, ...)
   right before the job's code runs. If neither namespaces nor the filter can be set up,
   start() raises SandboxUnavailable naming what is missing, unless weak mode is allowed
   (KIT_SANDBOX_ALLOW_WEAK=1 or allow_weak=True): then every verdict's reason says
   "WEAK SANDBOX ..." and sandbox_warnings() (copied into each stage's warnings) too.
   walls() reports what is up.
4. This parent enforces a wall clock on the zygote's reply, reads at most a small JSON
   line, and validates it; timeouts, crashes and limit hits become verdicts, never
   exceptions. A zygote that dies or hangs is killed and replaced. Zygotes never run
   checker code, so nothing a check does outlives its own fork.

Verdict rules: `check` returning a bool is the verdict; returning a dict requires a bool
"passed" (truthiness is not accepted: `{"passed": "no"}` is an error), the other keys are
`detail`, plain JSON of at most 8 kB. Statuses (`CheckStatus`, kit/checkers/status.py): ok
(passed is set), rejected (screen), timeout (wall clock or CPU limit), limit (memory,
recursion, output size), error (exception in the checker, bad return value, crash). Every
verdict has a reason.

Throughput (`bench_sandbox()`): about 4 ms of CPU per verdict over all processes (fork
and confinement of the child ~2 ms, zygote ~1.3 ms, this parent ~0.5 ms), so ~400-500
verdicts/s on two idle cores; screened and compiled code is cached per source. With all
walls up, measured on 2 cores shared with a training job: ~480/s as root, ~430/s as nobody.
"""

from __future__ import annotations

import atexit
import json
import marshal
import math
import os
import queue
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any, Iterable, Optional

from pydantic import BaseModel, Field

from kit.checkers.screen import MAX_SOURCE_BYTES, screen
from kit.checkers.status import CheckStatus
from kit.checkers.zygote import Zygote, namespace_prefix

EXIT_MEMORY, EXIT_INTERNAL = 3, 4      # kit/checkers/worker.py
DETAIL_CAP = 16 * 1024                 # the child caps detail at 8 kB; parent re-checks
REASON_CAP = 1000
GRACE_S = 5.0                          # zygote reply may lag the check's timeout by this

Status = CheckStatus  # the old name
ALLOW_WEAK_ENV = "KIT_SANDBOX_ALLOW_WEAK"
WEAK_NOTE = "WEAK SANDBOX: static screen and rlimits only"

# Warnings of sandboxes that ran weak in this process (a stage copies them into its warnings)
_WARNINGS: list[str] = []


class SandboxUnavailable(RuntimeError):
    """Neither the namespaces nor the seccomp filter can be set up, and weak mode was not asked for."""


def sandbox_warnings() -> list[str]:
    """What sandboxes in this process had to give up (weak mode), for a run's warnings."""
    return list(_WARNINGS)


class CheckResult(BaseModel):
    """What one sandboxed run of checker code came to. `passed` is set only when status is OK.
    (An episode's reward is a kit.verify.Verdict; this is only the code part of it.)"""

    status: CheckStatus
    passed: Optional[bool] = None
    reason: str = Field(default="", description="Why: rule and line, exception, limit hit.")
    detail: dict[str, Any] = Field(default_factory=dict, description="Extra keys a dict verdict returned.")
    wall_s: float = 0.0

    def to_dict(self) -> dict:
        out = {"status": self.status.value, "reason": self.reason}
        if self.status is CheckStatus.OK:
            out.update(passed=self.passed, detail=self.detail)
        return out


def _fail(status: CheckStatus, reason: str, wall_s: float = 0.0) -> CheckResult:
    return CheckResult(status=status, reason=reason[:REASON_CAP], wall_s=wall_s)


# the statuses a worker may report (rejected and timeout are decided here, never by the child)
_WORKER_STATUS = {s.value: s for s in (CheckStatus.OK, CheckStatus.ERROR, CheckStatus.LIMIT)}


def _child_verdict(reply: dict, timeout: float) -> CheckResult:
    """The zygote's report on one child -> CheckResult. The child's text is untrusted."""
    wall = float(reply.get("wall_s") or 0.0)
    code = reply.get("exit")
    if reply.get("timed_out"):
        return _fail(CheckStatus.TIMEOUT, f"wall-clock timeout: check ran past {timeout:g}s and was killed", wall)
    if reply.get("overflow"):
        return _fail(CheckStatus.LIMIT, "output limit: the checker process wrote more than 64 kB", wall)
    if code == -signal.SIGXCPU or (code == -signal.SIGKILL and reply.get("cpu_s", 0) >= math.ceil(timeout)):
        return _fail(CheckStatus.TIMEOUT, f"CPU limit: check used over {max(1, math.ceil(timeout))}s of CPU", wall)
    if code == EXIT_MEMORY:
        return _fail(CheckStatus.LIMIT, "memory limit: the checker process could not even report", wall)
    if code == EXIT_INTERNAL:
        return _fail(CheckStatus.ERROR, "sandbox setup failed in the checker process", wall)
    if code != 0:
        what = f"signal {signal.Signals(-code).name}" if isinstance(code, int) and code < 0 and \
            -code in signal.valid_signals() else f"exit code {code}"
        return _fail(CheckStatus.ERROR, f"checker process crashed ({what})", wall)
    try:
        raw = json.loads(reply.get("out", ""))
    except (ValueError, RecursionError):
        return _fail(CheckStatus.ERROR, "checker process returned no valid verdict", wall)
    reported = raw.get("status") if isinstance(raw, dict) else None  # the worker's JSON, parsed here once
    status = _WORKER_STATUS.get(reported) if isinstance(reported, str) else None
    if status is None:
        return _fail(CheckStatus.ERROR, "checker process returned a malformed verdict", wall)
    if status is not CheckStatus.OK:
        reason = raw.get("reason")
        return _fail(status, reason if isinstance(reason, str) and reason else "checker failed", wall)
    passed, detail = raw.get("passed"), raw.get("detail", {})
    if not isinstance(passed, bool) or not isinstance(detail, dict) or len(json.dumps(detail)) > DETAIL_CAP:
        return _fail(CheckStatus.ERROR, "checker process returned a malformed verdict", wall)
    return CheckResult(status=CheckStatus.OK, passed=passed, detail=detail, wall_s=wall,
                   reason="check passed" if passed else "check failed")


@lru_cache(maxsize=1024)
def _compiled(source: str) -> tuple[Optional[bytes], Optional[str]]:
    """Marshalled code of screened source (compiling runs nothing; the RL loop reuses it)."""
    try:
        return marshal.dumps(compile(source, "<checker>", "exec", dont_inherit=True)), None
    except SyntaxError as e:  # ast.parse accepts some, e.g. `return` outside a function
        return None, f"syntax error: {e.msg} (line {e.lineno})"
    except (RecursionError, MemoryError, ValueError, OverflowError) as e:
        return None, f"syntax error: source too complex to compile ({type(e).__name__})"


class Sandbox:
    """A pool of warm zygotes; each check runs in a fresh, confined fork of one of them.

    workers: zygotes (checks in parallel); timeout: default wall clock per check (s);
    memory_mb: address-space limit of a check; namespaces: run zygotes in new namespaces
    where `unshare` can make them (user namespace when not root); seccomp: install the
    syscall filter in every check; allow_weak: run even when neither of those two walls
    can be set up (default: the KIT_SANDBOX_ALLOW_WEAK environment variable; otherwise
    start() raises SandboxUnavailable). namespaces=False and seccomp=False exist to test
    the refusal and to measure; a weak sandbox says so in every verdict's reason.
    """

    def __init__(self, workers: int = 2, timeout: float = 2.0, memory_mb: int = 256,
                 max_source_bytes: int = MAX_SOURCE_BYTES, isolate_network: bool = True,
                 namespaces: Optional[bool] = None, seccomp: bool = True, allow_weak: Optional[bool] = None):
        self.workers, self.timeout, self.memory_mb = max(1, workers), timeout, memory_mb
        self.max_source_bytes = max_source_bytes
        self.namespaces = isolate_network if namespaces is None else namespaces
        self.seccomp = seccomp
        self.allow_weak = os.environ.get(ALLOW_WEAK_ENV, "") not in ("", "0") if allow_weak is None else allow_weak
        self.weak: Optional[str] = None  # the note every verdict carries when weak
        self._idle: "queue.Queue[Zygote]" = queue.Queue()
        self._all: list[Zygote] = []
        self._lock = threading.Lock()
        self._pool: Optional[ThreadPoolExecutor] = None
        self._pid: Optional[int] = None

    # -- lifecycle
    def start(self) -> "Sandbox":
        with self._lock:
            if self._pid == os.getpid():
                return self
            # fresh state: after a fork, the zygotes and threads above belong to the parent
            self._all, self._idle = [], queue.Queue()
            for _ in range(self.workers):
                z = self._zygote()
                self._all.append(z)
                self._idle.put(z)
            try:
                self._check_walls()
            except SandboxUnavailable:
                for z in self._all:
                    z.close()
                self._all = []
                raise
            self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="sandbox")
            self._pid = os.getpid()
        return self

    def _zygote(self) -> Zygote:
        return Zygote(self.namespaces, self.seccomp)

    def _check_walls(self) -> None:
        """Refuse (SandboxUnavailable) when neither namespaces nor the filter are up, unless weak mode is allowed."""
        w = self._walls_of(self._all[0])
        if w["seccomp"] or w["namespaces_full"]:
            self.weak = None
            return
        missing = ", ".join(w["missing"])
        if not self.allow_weak:
            raise SandboxUnavailable(
                f"checker sandbox refuses to run model-written code: no OS wall can be set up here; missing: "
                f"{missing}. Model code would meet only the static screen and rlimits, and one screen bypass "
                f"would be a full escape. Fix: allow unprivileged user namespaces (sysctl "
                f"kernel.unprivileged_userns_clone=1; on Ubuntu also kernel.apparmor_restrict_unprivileged_userns=0), "
                f"install util-linux (`unshare`), or use Linux x86_64 with seccomp and Python's ctypes; "
                f"or accept the risk with {ALLOW_WEAK_ENV}=1 (every verdict will say so).")
        self.weak = f"{WEAK_NOTE} (weak mode allowed); missing: {missing}"
        if self.weak not in _WARNINGS:
            _WARNINGS.append(self.weak)

    def _walls_of(self, z: Zygote) -> dict:
        info = z.walls
        ns = list(z.namespaces)
        full = all(n in ns for n in ("net", "mount", "pid", "ipc"))
        missing = []
        if not info.get("seccomp"):
            missing.append(f"seccomp filter ({info.get('seccomp_why') or 'not installed'})")
        if not full:
            why = "turned off (namespaces=False)" if not self.namespaces else namespace_prefix()[2] or "unshare failed"
            missing.append(f"namespaces ({why}{'; only ' + ','.join(ns) if ns else ''})")
        return {"screen": True, "builtins": True, "rlimits": True, "namespaces": ns, "namespaces_full": full,
                "netns": "net" in ns, "userns": "user" in ns or bool(info.get("userns")),
                "chroot": bool(info.get("chroot")), "setuid": bool(info.get("setuid")),
                "capdrop": bool(info.get("capdrop")), "seccomp": bool(info.get("seccomp")),
                "root": os.geteuid() == 0, "missing": missing}

    def close(self) -> None:
        with self._lock:
            if self._pid != os.getpid():  # a forked copy does not own the zygotes
                self._pid = None
                return
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            for z in self._all:
                z.close()
            self._all.clear()
            self._idle = queue.Queue()
            self._pid, self._pool = None, None

    def __enter__(self) -> "Sandbox":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def walls(self) -> dict:
        """Which walls are up: screen, builtins, rlimits (always); namespaces (list), netns,
        userns, chroot, setuid, capdrop, seccomp; `missing` names what is not, with why;
        `weak` is the note verdicts carry when running without both OS walls."""
        self.start()
        return {**self._walls_of(self._all[0]), "weak": self.weak}

    @property
    def isolation(self) -> dict:
        """walls() (older name)."""
        return self.walls()

    # -- running
    def run(self, source: str, state: Any, trajectory: Any, timeout: Optional[float] = None) -> CheckResult:
        """Run `check(state, trajectory)` from `source`. Never raises on anything the source does
        (SandboxUnavailable: the machine offers no OS wall and weak mode was not allowed)."""
        self.start()
        v = self._run(source, state, trajectory, timeout)
        if self.weak:
            v.reason = f"{v.reason[:REASON_CAP]} [{self.weak}]"
        return v

    def _run(self, source: str, state: Any, trajectory: Any, timeout: Optional[float] = None) -> CheckResult:
        t0 = time.monotonic()
        timeout = min(max(float(self.timeout if timeout is None else timeout), 0.01), 3600.0)
        if not isinstance(source, str):
            return _fail(CheckStatus.REJECTED, f"source: expected str, got {type(source).__name__}")
        reason = screen(source, self.max_source_bytes)
        code, reason = _compiled(source) if reason is None else (None, reason)
        if reason:
            return _fail(CheckStatus.REJECTED, reason)
        try:
            job = json.dumps({"state": state, "trajectory": trajectory}, allow_nan=False).encode()
        except (TypeError, ValueError, RecursionError) as e:
            return _fail(CheckStatus.ERROR, f"state/trajectory are not JSON data: {e}")
        self.start()
        header = {"timeout": timeout, "memory_mb": self.memory_mb, "code_n": len(code)}
        payload = code + job
        failures = 0
        for _ in range(self.workers + 2):  # dead zygotes are replaced, not counted
            z, line = self._take(), None
            if z is None:
                return _fail(CheckStatus.ERROR, "sandbox has no worker process (cannot start one)")
            if not z.alive():
                self._replace(z)
                continue
            try:
                z.send(header, payload)
                line = z.read_line(time.monotonic() + timeout + GRACE_S)
                reply = json.loads(line) if line is not None else None
            except (OSError, ValueError):
                reply = None
            if isinstance(reply, dict) and reply.get("id") == z.jobs:
                self._idle.put(z)
                v = _child_verdict(reply, timeout)
                v.wall_s = round(time.monotonic() - t0, 6)
                return v
            self._replace(z)
            if line is None and time.monotonic() - t0 >= timeout:
                return _fail(CheckStatus.TIMEOUT, f"sandbox worker gave no answer within {timeout + GRACE_S:g}s")
            failures += 1  # a zygote that died mid-job (never the check's doing): one retry
            if failures == 2:
                break
        return _fail(CheckStatus.ERROR, "sandbox workers kept failing")

    def run_many(self, jobs: Iterable[tuple[str, Any, Any]], timeout: Optional[float] = None) -> list[CheckResult]:
        """Run (source, state, trajectory) jobs over the pool; verdicts in job order."""
        self.start()
        return list(self._pool.map(lambda job: self.run(*job, timeout=timeout), jobs))

    def _take(self) -> Optional[Zygote]:
        """An idle zygote; starts one if the pool lost some (a failed replacement)."""
        while True:
            try:
                return self._idle.get(timeout=1.0)
            except queue.Empty:
                with self._lock:
                    if len(self._all) >= self.workers:
                        continue
                    try:
                        z = self._zygote()
                    except (OSError, RuntimeError, ValueError):
                        return None
                    self._all.append(z)
                    return z

    def _replace(self, z: Zygote) -> None:
        z.kill()
        with self._lock:
            if z in self._all:
                self._all.remove(z)
            try:
                fresh = self._zygote()
            except (OSError, RuntimeError, ValueError):
                return  # _take starts one later
            self._all.append(fresh)
        self._idle.put(fresh)


_DEFAULT: Optional[Sandbox] = None
_DEFAULT_LOCK = threading.Lock()


def default_sandbox() -> Sandbox:
    """The process-wide sandbox behind run_code (recreated after a fork)."""
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None or _DEFAULT._pid not in (None, os.getpid()):
            _DEFAULT = Sandbox(workers=min(2, os.cpu_count() or 1))
            atexit.register(_DEFAULT.close)
        return _DEFAULT.start()


def run_code(source: str, state: Any, trajectory: Any, timeout: Optional[float] = None) -> CheckResult:
    """Run one checker's source in the process-wide sandbox (kit.checkers.checker.run_checker: a task's
    whole checker, criteria then this code)."""
    return default_sandbox().run(source, state, trajectory, timeout=timeout)


# ---------------------------------------------------------------- CLI and bench

SAMPLE_STATE = {  # a mock-domain episode: Alice asked to create a task and mark another done
    "agent": {
        "tasks": {
            "task_1": {"task_id": "task_1", "title": "Buy groceries", "description": "Milk, eggs",
                       "status": "completed"},
            "task_3": {"task_id": "task_3", "title": "Call the bank", "description": None,
                       "status": "pending"},
        },
        "users": {"user_1": {"user_id": "user_1", "name": "Alice", "tasks": ["task_1", "task_3"]}},
    },
    "user": {},
    "changed": [["agent", "tasks", "task_1"], ["agent", "tasks", "task_3"], ["agent", "users", "user_1"]],
}
SAMPLE_TRAJECTORY = [
    {"role": "user", "content": "Hi, I'm user_1. Please add a task 'Call the bank' and mark task_1 done.",
     "tool_calls": None},
    {"role": "assistant", "content": None, "tool_calls": [
        {"name": "create_task", "arguments": {"user_id": "user_1", "title": "Call the bank"},
         "requestor": "assistant"},
        {"name": "update_task_status", "arguments": {"task_id": "task_1", "status": "completed"},
         "requestor": "assistant"}]},
    {"role": "assistant", "content": "Done: 'Call the bank' is task_3, and task_1 is completed.",
     "tool_calls": None},
]


def _error(reason: str) -> dict:
    return _fail(CheckStatus.ERROR, reason).to_dict()


def sandbox_cli(code_path: str) -> dict:
    """`check` from FILE.py against SAMPLE_STATE / SAMPLE_TRAJECTORY -> verdict dict. Never raises."""
    try:
        if not os.path.isfile(code_path):  # a directory, a FIFO that would block, a device
            return _error(f"cannot read {code_path}: not a regular file")
        with open(code_path, "rb") as f:  # bounded read: the path may be /dev/zero
            source = f.read(MAX_SOURCE_BYTES * 4 + 1).decode("utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as e:
        return _error(f"cannot read {code_path}: {type(e).__name__}: {e}")
    try:
        return run_code(source, SAMPLE_STATE, SAMPLE_TRAJECTORY).to_dict()
    except Exception as e:  # noqa: BLE001 - the sandbox itself failed (e.g. cannot fork)
        return _error(f"sandbox failure: {type(e).__name__}: {e}")


BENCH_SOURCE = '''
def check(state, trajectory):
    calls = [c for m in trajectory for c in (m.get("tool_calls") or [])]
    made = any(c["name"] == "create_task" and c["arguments"].get("title") == "Call the bank" for c in calls)
    done = state["agent"]["tasks"]["task_1"]["status"] == "completed"
    return {"passed": made and done, "calls": len(calls)}
'''


def bench_sandbox(n: int = 500, workers: Optional[int] = None, walls: Optional[dict] = None) -> float:
    """Verdicts per second for `n` small checks over a warm pool (startup not counted).
    `walls`: a dict to fill with the walls the bench ran behind (Sandbox.walls())."""
    with Sandbox(workers=workers or min(2, os.cpu_count() or 1)) as box:
        if walls is not None:
            walls.update(box.walls())
        box.run_many([(BENCH_SOURCE, SAMPLE_STATE, SAMPLE_TRAJECTORY)] * 8)  # warm up
        t0 = time.perf_counter()
        verdicts = box.run_many([(BENCH_SOURCE, SAMPLE_STATE, SAMPLE_TRAJECTORY)] * n)
        elapsed = time.perf_counter() - t0
    bad = [v for v in verdicts if v.status is not CheckStatus.OK or v.passed is not True]
    if bad:
        raise RuntimeError(f"bench checker failed: {bad[0]}")
    return n / elapsed
