"""The parent's handle on one warm zygote (kit/checkers/worker.py): start, send, read.

    z = Zygote(isolate_network=True)     # spawns `[unshare --net --] python -I -S worker.py`
    z.send({"timeout": 2.0, "memory_mb": 256, "code_n": n}, payload)
    reply = z.read_line(deadline)        # one JSON line, at most REPLY_CAP bytes, or None

The zygote gets an almost empty environment (no API keys), its own session (Ctrl-C and
killpg stay separate) and, as root where `unshare --net` works, its own network namespace
with nothing but a down loopback: its children cannot reach any host, local or remote.
Python 3.11 has no os.unshare (3.12 does), hence the util-linux binary.
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

_NETNS: Optional[list[str]] = None


def netns_prefix() -> list[str]:
    """`unshare --net --` when this process may make a network namespace, else []."""
    global _NETNS
    if _NETNS is None:
        unshare = shutil.which("unshare")
        ok = False
        if unshare and os.geteuid() == 0:
            try:
                ok = subprocess.run([unshare, "--net", "--", "true"], capture_output=True, check=False,
                                    timeout=10).returncode == 0
            except (OSError, subprocess.SubprocessError):
                ok = False
        _NETNS = [unshare, "--net", "--"] if ok else []
    return _NETNS


class Zygote:
    """One warm worker process (kit/checkers/worker.py) and its protocol pipes."""

    def __init__(self, isolate_network: bool):
        cmd = (netns_prefix() if isolate_network else []) + [sys.executable, "-I", "-S", str(WORKER)]
        self.netns = bool(isolate_network and netns_prefix())
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
        self.chroot, self.setuid, self.base = bool(info["chroot"]), bool(info["setuid"]), info["base"]

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
