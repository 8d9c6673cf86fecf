"""The sandbox's zygote and its per-check children. Standard library only, on purpose.

kit/checkers/sandbox.py starts this file as a fresh interpreter, never importing it:

    [unshare [--user --map-root-user] --net --mount --pid --ipc --fork --kill-child --] \
        python -I -S kit/checkers/worker.py [--no-seccomp]

(-I: no environment variables, user site or cwd on sys.path; -S: no site. The parent also
passes an almost empty environment, so API keys in the RL process never reach here.)

The zygote is warm and small: it has imported all it will ever need, then loops reading
jobs from stdin (a JSON header line, then `n` payload bytes) and writing one JSON reply
line per job to stdout. It never runs checker code itself. Per job it:

1. makes a fresh scratch directory and forks a child (~1 ms: the zygote is tiny);
2. waits for the child's verdict on a pipe, at most `timeout` seconds of wall clock and
   OUTPUT_CAP bytes; past either it SIGKILLs the child;
3. reaps the child (exit status, CPU time, peak RSS), removes the scratch directory and
   replies {"out": <child's text>, "exit": code | -signal, "timed_out", "overflow", ...}.

The parent, not the zygote, decides the verdict; it trusts nothing in "out" beyond a
small JSON object it validates. The child, before touching the job:

- points fds 0-2 at /dev/null (the zygote's protocol pipes are gone), keeps only the
  verdict pipe as fd 3 and closes every other descriptor;
- dies with the zygote (PR_SET_PDEATHSIG);
- as root (real, or the mapped root of a user namespace): chroot()s into the scratch
  directory (empty, mode 0500); otherwise chdir()s into it (the walls are probed once at
  startup and skipped where the kernel or container forbids them);
- sets rlimits: CPU (backstop for the wall clock), AS (memory), FSIZE 0 (no file
  writes), NOFILE 4 (no new descriptors: no files, no sockets), NPROC 0, CORE 0;
- as root: drops to uid/gid 65534 (nobody) with no supplementary groups, which also makes
  NPROC 0 bite (root ignores it); still uid 0 (a user namespace, where nobody is not
  mapped): drops every capability instead;
- installs the seccomp filter (no_new_privs, then a classic-BPF program: wrong
  architecture -> killed, x32 and denied syscalls -> EPERM), last, since it forbids
  chroot, setuid and prctl;
- loads the job (the marshalled code object the parent compiled from screened source,
  then JSON), runs the code with a whitelist of builtins (no `__import__`, no
  `__build_class__`, no open/eval/getattr/...) and a recursion limit, calls
  check(state, trajectory) on its own fresh copy of the JSON, validates and bounds the
  result, writes one JSON line and _exit()s.

Since every check runs in a fresh fork, a check can neither leave state behind for the
next one nor weaken the zygote: limits, chroot and uid change die with the child.
"""

import builtins
import gc
import json
import marshal
import math
import os
import resource
import select
import signal
import sys
import time

try:  # ctypes is standard library; only the walls use it (prctl, capset)
    import ctypes
    _LIBC = ctypes.CDLL(None, use_errno=True)
except Exception:  # noqa: BLE001 - no ctypes or no libc: the walls that need it report missing
    ctypes, _LIBC = None, None

SAFE_BUILTIN_NAMES = (
    "abs", "all", "any", "bool", "chr", "dict", "divmod", "enumerate", "filter", "float",
    "frozenset", "int", "isinstance", "iter", "len", "list", "map", "max", "min", "next",
    "ord", "range", "repr", "reversed", "round", "set", "slice", "sorted", "str", "sum",
    "tuple", "zip",
    "ArithmeticError", "AssertionError", "AttributeError", "Exception", "IndexError",
    "KeyError", "LookupError", "NotImplementedError", "RuntimeError", "StopIteration",
    "TypeError", "ValueError", "ZeroDivisionError",
)
SAFE_BUILTINS = {name: getattr(builtins, name) for name in SAFE_BUILTIN_NAMES}

RESULT_FD = 3
OUTPUT_CAP = 64 * 1024          # bytes of verdict the zygote reads from a child
DETAIL_CAP = 8 * 1024           # bytes of JSON detail a child may report
DETAIL_DEPTH = 8
REASON_CAP = 500
RECURSION_LIMIT = 400
NOBODY = 65534
EXIT_MEMORY = 3                 # the child could not even write its verdict
EXIT_INTERNAL = 4               # the child's own setup failed
FD_SWEEP = 256                  # children close fds 4..FD_SWEEP; main() checks it is enough
WARM_SOURCE = """
def check(state, trajectory):
    calls = [c for m in trajectory for c in (m.get("tool_calls") or [])]
    ok = all(isinstance(c, dict) for c in calls) and len(state) >= 0
    return {"passed": ok, "calls": len(calls), "names": sorted({c["name"] for c in calls})}
"""


# ---------------------------------------------------------------- the seccomp filter

# Syscalls a checker never needs (it computes over JSON it already holds and writes one line
# to an open pipe): EPERM. Numbers for x86_64 (asm/unistd_64.h); on another architecture the
# filter is not installed and the wall is reported missing.
DENIED_SYSCALLS_X86_64 = {
    "socket": 41, "socketpair": 53, "connect": 42, "bind": 49, "listen": 50, "accept": 43,
    "accept4": 288, "sendto": 44, "sendmsg": 46, "sendmmsg": 307, "recvfrom": 45, "recvmsg": 47,
    "recvmmsg": 299, "getsockopt": 55, "setsockopt": 54, "getsockname": 51, "getpeername": 52,
    "shutdown": 48, "execve": 59, "execveat": 322, "fork": 57, "vfork": 58, "clone": 56,
    "clone3": 435, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kill": 62,
    "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
    "pidfd_open": 434, "pidfd_getfd": 438, "pidfd_send_signal": 424, "kcmp": 312, "setpgid": 109,
    "setsid": 112, "prctl": 157, "seccomp": 317, "setuid": 105, "setgid": 106, "setreuid": 113,
    "setregid": 114, "setresuid": 117, "setresgid": 119, "setfsuid": 122, "setfsgid": 123,
    "setgroups": 116, "capset": 126, "mount": 165, "umount2": 166, "pivot_root": 155,
    "chroot": 161, "unshare": 272, "setns": 308, "open_tree": 428, "move_mount": 429,
    "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
    "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "keyctl": 250, "add_key": 248,
    "request_key": 249, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
    "kexec_file_load": 320, "reboot": 169, "swapon": 167, "swapoff": 168, "open_by_handle_at": 304,
    "name_to_handle_at": 303, "personality": 135, "acct": 163, "quotactl": 179, "syslog": 103,
    "iopl": 172, "ioperm": 173, "modify_ldt": 154, "uselib": 134, "vhangup": 153,
    "settimeofday": 164, "clock_settime": 227, "adjtimex": 159, "clock_adjtime": 305,
    "sethostname": 170, "setdomainname": 171, "move_pages": 279, "migrate_pages": 256,
    "fanotify_init": 300, "fanotify_mark": 301, "inotify_init": 253, "inotify_init1": 294,
    "memfd_create": 319, "memfd_secret": 447, "open": 2, "openat": 257, "openat2": 437,
    "creat": 85, "mknod": 133, "mknodat": 259, "mkdir": 83, "mkdirat": 258, "rmdir": 84,
    "unlink": 87, "unlinkat": 263, "rename": 82, "renameat": 264, "renameat2": 316, "link": 86,
    "linkat": 265, "symlink": 88, "symlinkat": 266, "chmod": 90, "fchmod": 91, "fchmodat": 268,
    "fchmodat2": 452, "chown": 92, "fchown": 93, "lchown": 94, "fchownat": 260, "truncate": 76,
    "utime": 132, "utimes": 235, "utimensat": 280, "futimesat": 261, "setxattr": 188,
    "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197, "lremovexattr": 198,
    "fremovexattr": 199, "landlock_create_ruleset": 444, "quotactl_fd": 443, "process_madvise": 440,
}
AUDIT_ARCH_X86_64 = 0xC000003E
PR_SET_PDEATHSIG, PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, SECCOMP_MODE_FILTER = 1, 22, 38, 2
_EPERM = 1


def _bpf_program(arch, denied):
    """Classic BPF over seccomp_data {int nr; u32 arch; ...}: wrong arch -> kill the process;
    x32 numbers and the denied syscalls -> EPERM; the rest allowed."""
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    kill, errno, allow = 0x80000000, 0x00050000 | _EPERM, 0x7FFF0000
    nrs = sorted(set(denied))
    n = len(nrs)
    if n > 250:
        raise ValueError("deny list too long for one jump")
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill),
            (ld, 0, 0, 0), (jge, n + 1, 0, 0x40000000)]
    prog += [(jeq, n - i, 0, nr) for i, nr in enumerate(nrs)]
    prog += [(ret, 0, 0, allow), (ret, 0, 0, errno)]
    return prog


class _Filter:
    """The filter, built once in the zygote; install() in a child costs two prctl calls."""

    def __init__(self):
        self.ok, self.why, self._fprog = False, "", None
        machine = os.uname().machine
        if _LIBC is None:
            self.why = "ctypes/libc not available"
            return
        if machine not in ("x86_64", "amd64"):
            self.why = f"no syscall table for architecture {machine}"
            return
        import struct  # noqa: PLC0415 - standard library, loaded once here
        prog = _bpf_program(AUDIT_ARCH_X86_64, DENIED_SYSCALLS_X86_64.values())
        self._buf = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in prog))

        class SockFprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        self._fprog = SockFprog(len(prog), ctypes.addressof(self._buf))
        self.ok = True

    def install(self):
        """NO_NEW_PRIVS then the filter; raises OSError when the kernel refuses."""
        if _LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if _LIBC.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(self._fprog), 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


FILTER = None  # main() builds it (unless --no-seccomp) and probes it


def _die_with_parent():
    """SIGKILL this process when its parent dies (best effort: no ctypes, no-op)."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _drop_capabilities():
    """Empty effective/permitted/inheritable sets: for a uid-0 child that could not setuid
    (the mapped root of a user namespace, or a container without CAP_SETUID)."""
    if _LIBC is None:
        raise OSError("no libc to drop capabilities")
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    if _LIBC.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


# ---------------------------------------------------------------- child (one check)

def _cap(text, n=REASON_CAP):
    return text if len(text) <= n else text[:n] + f"... [{len(text) - n} chars cut]"


def _plain(value, depth, budget):
    """Check `value` is plain JSON data within depth and size; returns the budget left."""
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is float:
        return budget - 8
    if kind is str:
        return budget - len(value) - 2
    if depth >= DETAIL_DEPTH:
        raise ValueError(f"detail nested deeper than {DETAIL_DEPTH}")
    if kind is list or kind is tuple:
        for item in value:
            budget = _plain(item, depth + 1, budget - 1)
            if budget < 0:
                return budget
        return budget
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise ValueError("detail keys must be strings")
            budget = _plain(item, depth + 1, budget - len(key) - 4)
            if budget < 0:
                return budget
        return budget
    raise ValueError(f"detail holds a {kind.__name__}, not JSON data")


def _interpret(result):
    """check()'s return value -> verdict dict. A dict must carry a bool "passed"."""
    if type(result) is bool:
        return {"status": "ok", "passed": result, "detail": {}}
    if type(result) is not dict:
        return {"status": "error",
                "reason": f"check returned {type(result).__name__}; expected bool or dict with a bool 'passed'"}
    passed = result.get("passed")
    if type(passed) is not bool:
        return {"status": "error", "reason": "check returned a dict without a bool 'passed'"}
    detail = {k: v for k, v in result.items() if k != "passed"}
    try:
        if _plain(detail, 0, DETAIL_CAP) < 0:
            return {"status": "limit", "reason": f"detail larger than {DETAIL_CAP} bytes"}
        text = json.dumps(detail, allow_nan=False)
    except (ValueError, TypeError, RecursionError) as e:
        return {"status": "error", "reason": _cap(f"unusable detail: {e}")}
    if len(text) > DETAIL_CAP:
        return {"status": "limit", "reason": f"detail larger than {DETAIL_CAP} bytes"}
    return {"status": "ok", "passed": passed, "detail": detail}


def _evaluate(payload, code_n, memory_mb):
    """payload = marshalled code object (code_n bytes, compiled by the parent) + JSON job."""
    try:
        code = marshal.loads(payload[:code_n])
        job = json.loads(payload[code_n:])
        state, trajectory = job["state"], job["trajectory"]
    except MemoryError:
        return {"status": "limit", "reason": f"state and trajectory do not fit the memory limit ({memory_mb} MB)"}
    except Exception as e:
        return {"status": "error", "reason": _cap(f"bad job: {type(e).__name__}")}
    del payload, job
    sys.setrecursionlimit(RECURSION_LIMIT)
    scope = {"__builtins__": dict(SAFE_BUILTINS), "__name__": "checker"}
    try:
        exec(code, scope)
        check = scope.get("check")
        if not callable(check):
            return {"status": "error", "reason": "source defines no callable check(state, trajectory)"}
        return _interpret(check(state, trajectory))
    except MemoryError:
        return {"status": "limit", "reason": f"memory limit ({memory_mb} MB) exceeded"}
    except RecursionError:
        return {"status": "limit", "reason": f"recursion limit ({RECURSION_LIMIT}) exceeded"}
    except BaseException as e:  # noqa: BLE001 - anything the checker raises is its verdict
        try:
            message = str(e)
        except BaseException:  # noqa: BLE001
            message = "<unprintable>"
        return {"status": "error", "reason": _cap(f"{type(e).__name__} in checker: {message}")}


def _in_user_namespace():
    try:
        with open("/proc/self/uid_map") as f:
            return f.read().split() != ["0", "0", "4294967295"]
    except OSError:
        return False


def _probe_walls(base, use_seccomp=True):
    """Which walls work here, tried once in a throwaway child: chroot and setuid need root
    (real, or the mapped root of a user namespace for chroot; a container may lack the
    capability); capdrop is tried where the child stays uid 0; the seccomp filter is
    installed and must then refuse a socket and an open()."""
    global FILTER
    if use_seccomp and FILTER is None:
        FILTER = _Filter()
    walls = {"chroot": False, "setuid": False, "capdrop": False, "seccomp": False,
             "userns": _in_user_namespace(), "seccomp_why": ""}
    if use_seccomp:
        walls["seccomp_why"] = FILTER.why if FILTER is not None and not FILTER.ok else ""
    else:
        walls["seccomp_why"] = "turned off (--no-seccomp)"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(r)
            if os.geteuid() == 0:
                try:
                    os.chroot(base)
                    os.chdir("/")
                    code |= 1
                except OSError:
                    pass
                try:
                    os.setgroups([])
                    os.setgid(NOBODY)
                    os.setuid(NOBODY)
                    code |= 2
                except OSError:
                    pass
                if os.geteuid() == 0:
                    try:
                        _drop_capabilities()
                        code |= 4
                    except OSError:
                        pass
            if use_seccomp and FILTER is not None and FILTER.ok:
                try:
                    FILTER.install()
                    sock = _LIBC.socket(2, 1, 0)
                    sock_errno = ctypes.get_errno()
                    try:
                        os.open("/", os.O_RDONLY)
                        opened = True
                    except PermissionError:
                        opened = False
                    if sock == -1 and sock_errno == _EPERM and not opened:
                        code |= 8
                    else:
                        os.write(w, b"installed, but a socket or open() was still allowed")
                except OSError as e:
                    os.write(w, f"the kernel refused it: {e}".encode()[:200])
        except BaseException:  # noqa: BLE001
            pass
        os._exit(code)
    os.close(w)
    why = os.read(r, 512).decode("utf-8", "replace")
    os.close(r)
    _, status = os.waitpid(pid, 0)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else 0
    walls.update(chroot=bool(code & 1), setuid=bool(code & 2), capdrop=bool(code & 4), seccomp=bool(code & 8))
    if use_seccomp and not walls["seccomp"] and not walls["seccomp_why"]:
        walls["seccomp_why"] = why or "the probe child failed"
    return walls


WALLS = {"chroot": False, "setuid": False, "capdrop": False, "seccomp": False}  # main() probes


def _confine(scratch, job, result_w, walls=None):
    """Everything that happens in the child before the job is even parsed. The seccomp
    filter goes last: it forbids chroot, setuid and prctl, which come before it."""
    walls = WALLS if walls is None else walls
    _die_with_parent()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if result_w != RESULT_FD:
        os.dup2(result_w, RESULT_FD)
    os.closerange(RESULT_FD + 1, FD_SWEEP)  # the zygote holds only low fds (see main)
    if walls["chroot"]:
        os.chroot(scratch)
        os.chdir("/")
    else:
        os.chdir(scratch)
    memory = job["memory_mb"] * 1024 * 1024
    cpu = max(1, math.ceil(job["timeout"]))
    for limit, value in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_FSIZE, 0),
                         (resource.RLIMIT_NOFILE, RESULT_FD + 1), (resource.RLIMIT_AS, memory)):
        resource.setrlimit(limit, (value, value))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if walls["setuid"]:
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
    if walls.get("capdrop") and os.geteuid() == 0:
        _drop_capabilities()
    if walls.get("seccomp"):
        FILTER.install()


def _child(job, payload, scratch, result_r, result_w):
    try:
        os.close(result_r)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _confine(scratch, job, result_w)
    except BaseException:  # noqa: BLE001
        os._exit(EXIT_INTERNAL)
    try:
        verdict = _evaluate(payload, job["code_n"], job["memory_mb"])
        del payload
        data = (json.dumps(verdict) + "\n").encode()
        while data:
            data = data[os.write(RESULT_FD, data):]
    except BaseException:  # noqa: BLE001 - e.g. MemoryError while reporting
        os._exit(EXIT_MEMORY)
    os._exit(0)


# ---------------------------------------------------------------- zygote (the loop)

def _wait(pid, pidfd, deadline):
    """Reap the child, killing it if it outlives `deadline`. Returns (status, rusage)."""
    killed = False
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return status, usage, killed
        left = deadline - time.monotonic()
        if left <= 0 and not killed:
            _kill(pid)
            killed = True
        if pidfd is not None:
            select.select([pidfd], [], [], max(left, 0) if not killed else None)
        else:
            time.sleep(0.0005)


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _rmtree(path):
    """Remove a scratch directory (normally empty: the child cannot write into it)."""
    try:
        os.rmdir(path)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass
    for top, dirs, files in os.walk(path, topdown=False):
        for name in files:
            try:
                os.unlink(os.path.join(top, name))
            except OSError:
                pass
        for name in dirs:
            try:
                os.rmdir(os.path.join(top, name))
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


class ParentGone(Exception):
    """The parent closed the protocol pipe while a check ran: the check is killed, the zygote exits."""


def run_job(job, payload, base, seq, watch_fd=None):
    scratch = os.path.join(base, str(seq))
    os.mkdir(scratch, 0o500)  # read-only, even to its owner: the child creates nothing there
    result_r, result_w = os.pipe()
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(job, payload, scratch, result_r, result_w)
        os._exit(EXIT_INTERNAL)  # not reached
    os.close(result_w)
    pidfd = None
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pass
    deadline = start + job["timeout"]
    out, timed_out, overflow, parent_gone = bytearray(), False, False, False
    try:
        while True:
            left = deadline - time.monotonic()
            ready = select.select([result_r] + ([watch_fd] if watch_fd is not None else []), [], [],
                                  max(left, 0))[0] if left > 0 else []
            if not ready:
                timed_out = True
                break
            if watch_fd in ready:  # the parent never writes during a job: this is EOF, it is gone
                parent_gone = True
                break
            chunk = os.read(result_r, 65536)
            if not chunk:
                break
            out += chunk
            if len(out) > OUTPUT_CAP:
                overflow = True
                break
        if timed_out or overflow or parent_gone:
            _kill(pid)
        # a child that closed its pipe gets a little grace to exit, never unbounded
        status, usage, killed = _wait(pid, pidfd, max(deadline, time.monotonic()) + 0.5)
        timed_out = timed_out or killed
    finally:
        os.close(result_r)
        if pidfd is not None:
            os.close(pidfd)
        _rmtree(scratch)
    if parent_gone:
        raise ParentGone()
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
    return {
        "id": job.get("id"),
        "out": bytes(out[:OUTPUT_CAP]).decode("utf-8", "replace"),
        "exit": exit_code,
        "timed_out": timed_out,
        "overflow": overflow,
        "wall_s": round(time.monotonic() - start, 6),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 6),
        "maxrss_kb": usage.ru_maxrss,
    }


def _warm_up():
    """Exercise parse/compile/exec/json once, on trusted code, before the first fork.

    A fresh fork otherwise pays several ms of first-use costs (allocator arenas, interned
    strings, lazy caches) on every check; done here, every child inherits them warm.
    """
    limit = sys.getrecursionlimit()
    code = marshal.dumps(compile(WARM_SOURCE, "<checker>", "exec", dont_inherit=True))
    job = json.dumps({"state": {"agent": {}}, "trajectory": [{"role": "assistant", "tool_calls": [{"name": "x"}]}]})
    for _ in range(3):
        _evaluate(code + job.encode(), len(code), 0)
    sys.setrecursionlimit(limit)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C belongs to the parent
    _die_with_parent()
    use_seccomp = "--no-seccomp" not in argv
    global FILTER, WALLS
    FILTER = _Filter() if use_seccomp else None
    # scratch on tmpfs when there is one: a directory per check costs ~3 ms on disk here
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    base = os.path.join(shm or os.environ.get("TMPDIR", "/tmp"), f"kit-sandbox-{os.getpid()}-{time.time_ns()}")
    os.mkdir(base, 0o700)
    os.chdir(base)
    if max(int(fd) for fd in os.listdir("/proc/self/fd")) >= FD_SWEEP - 8:
        raise SystemExit("sandbox zygote: too many open descriptors to sweep")
    WALLS = _probe_walls(base, use_seccomp)
    proto_in, proto_out = sys.stdin.buffer, sys.stdout.buffer
    hello = {"ready": True, "pid": os.getpid(), "base": base, "uid": os.geteuid(), **WALLS}
    _warm_up()
    gc.collect()
    gc.freeze()  # keep the warm heap shared with the children (fewer copy-on-write faults)
    seq = 0
    try:
        proto_out.write((json.dumps(hello) + "\n").encode())
        proto_out.flush()
        while True:
            header = proto_in.readline()
            if not header:
                break
            job = json.loads(header)
            seq += 1
            payload = proto_in.read(job["n"])
            if len(payload) != job["n"]:
                break
            reply = run_job(job, payload, base, seq, proto_in.fileno())
            proto_out.write((json.dumps(reply) + "\n").encode())
            proto_out.flush()
    except (BrokenPipeError, KeyboardInterrupt, ParentGone):
        pass
    finally:
        _rmtree(base)


if __name__ == "__main__":
    main()
