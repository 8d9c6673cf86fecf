"""The parent's handle on one warm zygote (kit/checkers/worker.py): start, send, read.

    z = Zygote(namespaces=True, seccomp=True)  # `[unshare ... --] python -I -S worker.py`
    z.send({"timeout": 2.0, "memory_mb": 256, "code_n": n}, payload)
    reply = z.read_line(deadline)        # one JSON line, at most REPLY_CAP bytes, or None

The zygote gets an almost empty environment (no API keys), its own session (Ctrl-C and
killpg stay separate) and, where `unshare` works, its own namespaces: network (nothing but
a down loopback: its children cannot reach any host, local or remote), mount (its chroot
and mounts are its own), pid (it is pid 1: its checks see no other process, and all die
with it; `--kill-child` kills it with `unshare`) and ipc. As root these need no more;
as anyone else they sit in an unprivileged user namespace (`--user --map-root-user`: the
zygote is root there, mapped to the caller, so it can chroot its checks; they then drop
every capability). Python 3.11 has no os.unshare (3.12 does), hence the util-linux binary.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

WORKER = Path(__file__).with_name("worker.py")
REPLY_CAP = 256 * 1024  # bytes of one zygote reply line

NAMESPACES = ("net", "mount", "pid", "ipc")
_PREFIX: Optional[tuple[list[str], list[str], str]] = None


def namespace_prefix() -> tuple[list[str], list[str], str]:
    """(command prefix, namespaces it makes, why not all of them), probed once per process.

    Root: `unshare --net --mount --pid --ipc --fork --kill-child --`. Anyone else: the same
    with `--user --map-root-user` (an unprivileged user namespace, where the kernel allows
    one). Fallback, as root: `unshare --net --` alone. Nothing works: ([], [], why)."""
    global _PREFIX
    if _PREFIX is None:
        unshare = shutil.which("unshare") or ("/usr/bin/unshare" if os.path.exists("/usr/bin/unshare") else None)
        if unshare is None:
            _PREFIX = [], [], "`unshare` (util-linux) not found"
            return _PREFIX
        full = ["--net", "--mount", "--pid", "--ipc", "--fork", "--kill-child"]
        tries = [([unshare, *full, "--"], list(NAMESPACES)), ([unshare, "--net", "--"], ["net"])] \
            if os.geteuid() == 0 else \
            [([unshare, "--user", "--map-root-user", *full, "--"], ["user", *NAMESPACES])]
        why = ""
        for prefix, names in tries:
            try:
                res = subprocess.run(prefix + ["true"], capture_output=True, check=False, timeout=10)
            except (OSError, subprocess.SubprocessError) as e:
                why = why or f"{' '.join(prefix[:-1])}: {e}"
                continue
            if res.returncode == 0:
                _PREFIX = prefix, names, why
                return _PREFIX
            err = res.stderr.decode("utf-8", "replace").strip().splitlines()
            why = why or f"`{' '.join(['unshare', *prefix[1:-1]])}` failed: {err[-1] if err else res.returncode}"
        _PREFIX = [], [], why
    return _PREFIX


class Zygote:
    """One warm worker process (kit/checkers/worker.py) and its protocol pipes."""

    def __init__(self, namespaces: bool = True, seccomp: bool = True):
        prefix, names, _ = namespace_prefix() if namespaces else ([], [], "")
        cmd = prefix + [sys.executable, "-I", "-S", str(WORKER)] + ([] if seccomp else ["--no-seccomp"])
        self.namespaces: list[str] = list(names)
        self.netns = "net" in names
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"}, cwd="/", close_fds=True,
            start_new_session=True)
        self.fd = self.proc.stdout.fileno()
        self.buf = b""
        self.jobs = 0
        self.base = ""
        hello = self.read_line(time.monotonic() + 30)
        if hello is None:
            self.kill()
            raise RuntimeError("sandbox worker did not start")
        info = json.loads(hello)
        self.walls: dict = info
        self.chroot, self.setuid, self.base = bool(info["chroot"]), bool(info["setuid"]), info["base"]
        self.seccomp = bool(info.get("seccomp"))

    def read_line(self, deadline: float) -> Optional[bytes]:
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0 or len(self.buf) > REPLY_CAP or not select.select([self.fd], [], [], left)[0]:
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line if len(line) <= REPLY_CAP else None

    def send(self, header: dict, payload: bytes) -> None:
        self.jobs += 1
        self.proc.stdin.write(json.dumps({**header, "id": self.jobs, "n": len(payload)}).encode() + b"\n")
        self.proc.stdin.write(payload)
        self.proc.stdin.flush()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the zygote and any child it left
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        if "kit-sandbox-" in self.base:  # what the zygote had no chance to remove
            shutil.rmtree(self.base, ignore_errors=True)
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass

    def close(self) -> None:
        try:
            self.proc.stdin.close()  # EOF: the zygote removes its scratch base and exits
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()
        self.proc.stdout.close()
