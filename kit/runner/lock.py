"""One writer per run folder: a lock file that says who holds it.

    with FolderLock(run_dir, command="kit run recipes/quickstart-cpu.yaml"):   # refused at once if held
        ...
    with FolderLock(out_dir, wait=True): ...                                     # or waits its turn

Who takes one: `kit run` on its run folder (kit/runner/execute.py), every stage on its own folder
(kit/runner/stage.py: a stage notebook under `kit run`, opened by hand, or run by `kit eval --out` and
`kit synthesize --out`). So two terminals on one folder, a notebook rerun while `kit run` is going, or a
scheduler retrying a job that is still alive get `error:` naming the holder (pid, host, since, command)
and what to do; `--wait` waits for it instead.

How: `fcntl.flock` on <folder>/.kit.lock, held for as long as the process lives (the kernel drops it when
the process dies, however it dies). The file's content says who holds it: {pid, host, since, command};
a clean release (or the process's normal exit) removes it. So a process that finds a lock file naming a
holder and takes the lock knows that holder died without letting go (a kill -9, a lost node) and says it
takes the lock over. A folder
the same process locks again (`kit eval --out DIR` and the stage it runs) is held once and counted.

flock is advisory and local to a host: a folder on a network file system that does not carry flock to
other hosts is protected on each host only. A lock held while its recorded pid is gone means a child
of that process still holds the file open (`fuser <folder>/.kit.lock` names it).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Optional

from kit.errors import UserError

LOCK_NAME = ".kit.lock"

_held: dict[str, list] = {}  # folder (resolved) -> [fd, count]: what this process holds
_guard = threading.Lock()


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _let_go(fd: int, path: Path) -> None:
    """A clean release: the file is removed while still locked (a process waiting on it sees it is gone and
    locks the new one), so a lock file left in a folder always names a holder that did not let go."""
    try:
        if _same_file(fd, path):
            os.unlink(path)
        else:
            os.ftruncate(fd, 0)
    except OSError:
        pass
    finally:
        os.close(fd)


def _release_all() -> None:
    """At the interpreter's exit (normal, or after an uncaught error): every lock this process still holds is
    released cleanly, so only a process that was killed leaves a lock file naming it."""
    with _guard:
        items = list(_held.items())
        _held.clear()
    for key, (fd, _count) in items:
        _let_go(fd, Path(key) / LOCK_NAME)


atexit.register(_release_all)


class FolderBusy(UserError, RuntimeError):
    """Another live process writes into the folder (it holds the folder's lock)."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _read(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = b""
    while chunk := os.read(fd, 65536):
        raw += chunk
    try:
        info = json.loads(raw.decode() or "{}")
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {"unreadable": raw[:200].decode(errors="replace")}
    return info if isinstance(info, dict) else {}


def _ago(since: str) -> str:
    try:
        s = time.time() - time.mktime(time.strptime(since, "%Y-%m-%dT%H:%M:%S"))
    except (TypeError, ValueError):
        return ""
    return f", {int(s // 60)} min ago" if s >= 60 else f", {int(s)} s ago"


def describe_holder(info: dict) -> str:
    """'`kit run x.yaml` (pid 12 on host h, since T, 3 min ago)' from a lock file's content."""
    if not info.get("pid"):
        return "a process that has not written its name yet"
    where = f"pid {info['pid']} on host {info.get('host', '?')}, since {info.get('since', '?')}{_ago(info.get('since'))}"
    return f"`{info.get('command') or '?'}` ({where})"


def holder(folder: str | Path) -> Optional[dict]:
    """Who holds `folder`'s lock now ({pid, host, since, command}), or None when nobody does (a free
    lock whose file still names a dead holder is None too). Takes nothing."""
    path = Path(folder) / LOCK_NAME
    if not path.exists():
        return None
    key = str(Path(folder).resolve())
    if key in _held:
        return json.loads(Path(path).read_text() or "{}")
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read(fd) or {}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def default_command() -> str:
    argv = [os.path.basename(sys.argv[0]) if sys.argv else "python", *sys.argv[1:]]
    if argv[0] in ("__main__.py", "cli.py"):
        argv[0] = "kit"
    if "ipykernel_launcher" in argv[0] or "ipykernel" in " ".join(argv[:2]):
        return "a notebook kernel"
    return " ".join(argv)[:300]


class FolderLock:
    """`folder`'s lock for this process (see the module doc). `wait`: block until the holder lets go
    instead of raising FolderBusy. `say`: where the take-over and waiting notes go (stderr)."""

    def __init__(self, folder: str | Path, command: Optional[str] = None, wait: bool = False,
                 say=None, what_to_do: str = ""):
        self.folder = Path(folder)
        self.command = command or default_command()
        self.wait = wait
        self.say = say or (lambda text: print(text, file=sys.stderr, flush=True))
        self.what_to_do = what_to_do
        self.took_over: Optional[dict] = None  # the dead holder this process took the lock from
        self._key: Optional[str] = None

    @property
    def path(self) -> Path:
        return self.folder / LOCK_NAME

    def acquire(self) -> "FolderLock":
        self.folder.mkdir(parents=True, exist_ok=True)
        key = str(self.folder.resolve())
        with _guard:
            if key in _held:  # this process holds it already
                _held[key][1] += 1
                self._key = key
                return self
        said_waiting = False
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                info = self._holder_info(fd)
                if not self.wait:
                    os.close(fd)
                    raise FolderBusy(self._busy_message(info), self._hint(info)) from None
                if not said_waiting:
                    self.say(f"[kit] {self.folder} is in use by {describe_holder(info)}: waiting for it (--wait)")
                    said_waiting = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            if _same_file(fd, self.path):
                break
            os.close(fd)  # the holder removed the file as it let go: lock the one that is there now
        try:
            last = _read(fd)
            if last.get("pid"):
                self.took_over = last
                gone = ("that process is gone" if last.get("host") == socket.gethostname() and not _alive(int(last["pid"]))
                        else "it no longer holds the lock")
                self.say(f"[kit] took over the lock of {self.folder} left by {describe_holder(last)}: {gone} "
                         "(killed or crashed); what it wrote is resumed, not trusted blindly")
            info = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    "command": self.command}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            raise
        with _guard:
            _held[key] = [fd, 1]
        self._key = key
        return self

    def _holder_info(self, fd: int) -> dict:
        for _ in range(20):  # the holder writes its name right after taking the lock
            info = _read(fd)
            if info.get("pid"):
                return info
            time.sleep(0.05)
        return info

    def _busy_message(self, info: dict) -> str:
        msg = f"{self.folder} is in use: {describe_holder(info)} holds its lock ({self.path})"
        pid = info.get("pid")
        if pid and info.get("host") == socket.gethostname() and not _alive(int(pid)):
            msg += (f"; pid {pid} is gone, so a process it started still holds the file open "
                    f"(`fuser {self.path}` names it)")
        return msg

    def _hint(self, info: dict) -> str:
        pid = info.get("pid")
        stop = f"stop it (kill {pid}), " if pid else ""
        return (f"wait for it to finish (or pass --wait to start when it does), {stop}or write elsewhere"
                f"{' (' + self.what_to_do + ')' if self.what_to_do else ''}; one folder takes one writer at a time")

    def release(self) -> None:
        if self._key is None:
            return
        with _guard:
            held = _held.get(self._key)
            key, self._key = self._key, None
            if held is None:
                return
            held[1] -= 1
            if held[1] > 0:
                return
            del _held[key]
        _let_go(held[0], self.path)

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
