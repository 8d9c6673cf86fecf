"""Errors a user can fix, told apart from bugs.

Every expected user error (unknown domain, stage, split or task; a missing model folder, task file
or run; an unreachable endpoint; a malformed input file; a recipe problem; a GPU-only backend on a
machine without a GPU) is a `UserError`: its message names what is wrong, its `hint` says how to
fix it. The `kit` command prints both, without a traceback, and exits with status 2 (`--debug`
shows the traceback). Anything else is a bug: it keeps its traceback and exits with status 1.

Each class also derives from the builtin a caller would catch (KeyError, FileNotFoundError,
ValueError, RuntimeError, OSError), so code that catches those keeps working.

A write the file system refuses (full, over quota, read-only, not permitted) is a `DiskError`: the
kit's own writers (kit/files.py) raise it naming the file and the bytes they tried to write; writes
the kit does not control (torch, safetensors, papermill's executed notebook) are translated where
they surface (`disk_error`, `disk_error_in`: the `kit` command, a failed stage in kit/runner/execute.py).
"""

from __future__ import annotations

import errno as _errno
import os
import re
import shutil
from pathlib import Path
from typing import Optional

USAGE_STATUS = 2  # what `kit` exits with on a UserError (argparse's status for a bad flag too)


class UserError(Exception):
    """An error the user can act on: `str(e)` is the message, `e.hint` how to fix it."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint

    def __str__(self) -> str:  # KeyError's own __str__ would quote the message
        return str(self.args[0])


class UnknownName(UserError, KeyError):
    """A domain, stage, split, task or model name that does not exist."""


class NotFound(UserError, FileNotFoundError):
    """A file or folder the user named is not there (model folder, task file, run, training data)."""


class BadInput(UserError, ValueError):
    """A file or value the user gave cannot be read (malformed JSONL line, recipe problem, bad flag value)."""


class Unavailable(UserError, RuntimeError):
    """Something the command needs is not on this machine or not answering (GPU, package, endpoint)."""


class DiskError(UserError, OSError):
    """A write the file system refused: no space left (ENOSPC), over quota (EDQUOT), read-only (EROFS)
    or not permitted (EACCES, EPERM). `errno` and `filename` are the refused write's."""

    def __init__(self, message: str, hint: str = "", errno: Optional[int] = None, filename: Optional[str] = None):
        super().__init__(message, hint)
        self.errno, self.filename = errno, filename


NO_SPACE = frozenset({_errno.ENOSPC, _errno.EDQUOT})
DISK_ERRNOS = NO_SPACE | {_errno.EROFS, _errno.EACCES, _errno.EPERM}
NO_FILE_NO_WRITE = frozenset({_errno.EACCES, _errno.EPERM})  # these count only where a file is named
ELSEWHERE = "or write somewhere else (kit run --runs-dir DIR, kit eval/synthesize --out DIR)"


def disk_error(e: BaseException, path: Optional[str | Path] = None, needed: Optional[int] = None,
               writing: bool = True, where: Optional[str | Path] = None) -> Optional[DiskError]:
    """The DiskError of `e` (or of the OSError it was raised from or during: torch.save wraps it in a
    RuntimeError), None when it is not a refused write. `path`: the file being written; else the
    OSError's own filename, else `where` (the folder being written: a run folder, an --out folder);
    `needed`: the bytes the write needed, when known; `writing`: False where the operation may have
    been a read (a permission error is then not called a failed write)."""
    seen = 0
    while e is not None and seen < 8:
        if isinstance(e, DiskError):
            return e
        if isinstance(e, OSError) and e.errno in DISK_ERRNOS:
            if e.errno in NO_FILE_NO_WRITE and not (path or e.filename):
                return None  # a permission error naming no file (os.kill, a socket) is no refused write
            return _disk_error(e.errno, path or e.filename or where, needed, writing)
        if path or where:
            found = disk_error_in(f"{type(e).__name__}: {e}", path or where, writing) if isinstance(e, RuntimeError) else None
            if found is not None:
                return found
        e, seen = e.__cause__ or e.__context__, seen + 1
    return None


_ERRNO_TEXT = re.compile(r"\[Errno (\d+)\] [^\n':]*(?:: '([^'\n]+)')?|os error (\d+)")


def disk_error_in(text: str, path: Optional[str | Path] = None, writing: bool = True) -> Optional[DiskError]:
    """The DiskError an error message tells of ("[Errno 28] No space left on device: 'f'", Rust's
    "(os error 28)"), when all that is left of the OSError is its text (a failed notebook cell's
    evalue, another process's message); `path` where the text names no file."""
    for m in _ERRNO_TEXT.finditer(text or ""):
        code = int(m.group(1) or m.group(3))
        if code in DISK_ERRNOS and not (code in NO_FILE_NO_WRITE and not m.group(2)):
            return _disk_error(code, m.group(2) or path, None, writing)
    if path is not None and _TORCH_WRITE.search(text or ""):
        # torch's zip writer loses the errno ("unexpected pos N vs M"): a full disk where the stage writes says
        # what it was; a roomy disk leaves it a bug
        usage = _mount_of(Path(path))[1]
        if usage is not None and usage.free < FULL_BELOW:
            return _disk_error(_errno.ENOSPC, path, None, writing)
    return None


_TORCH_WRITE = re.compile(r"PytorchStreamWriter failed writing file|unexpected pos \d+ vs \d+")
FULL_BELOW = 1 << 20  # bytes free under which a write torch could not finish is put down to the full disk


def _disk_error(code: int, path: Optional[str | Path], needed: Optional[int], writing: bool) -> DiskError:
    where = Path(path) if path else Path.cwd()
    mount, usage = _mount_of(where)
    if code in NO_SPACE:
        what = "no space left on device" if code == _errno.ENOSPC else "disk quota exceeded"
        space = f"{_size(usage.free)} free of {_size(usage.total)} on {mount}" if usage else f"on {mount}"
        need = f"needed {needed:,} bytes, " if needed else ""
        return DiskError(f"{what} writing {where} ({need}{space})",
                         f"free space on {mount} (or raise the quota), {ELSEWHERE}; then run the same command "
                         "again: it resumes where it stopped (nothing half written is kept as complete)",
                         code, str(where))
    if code == _errno.EROFS:
        return DiskError(f"cannot write {where}: read-only file system ({mount})",
                         f"{mount} is mounted read-only: remount it read-write, {ELSEWHERE}", code, str(where))
    verb = "cannot write" if writing else "cannot open"
    return DiskError(f"{verb} {where}: permission denied (user {_user()})",
                     f"check the owner and permissions of {where.parent} (ls -ld; chmod/chown), {ELSEWHERE}",
                     code, str(where))


def _mount_of(path: Path) -> tuple[Path, Optional[tuple]]:
    """(the mount point holding `path`, its disk usage) of the nearest folder of `path` that exists."""
    p = path.absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        usage = shutil.disk_usage(p)
    except OSError:
        usage = None
    return _mount_point(p), usage


def _mount_point(p: Path) -> Path:
    """The mount point holding the existing path `p`: the longest of /proc/self/mounts' that is a
    prefix of it (a bind mount too), else the nearest folder os.path.ismount says is one."""
    p = p.resolve()
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            points = [Path(line.split()[1].encode().decode("unicode_escape")) for line in f if len(line.split()) > 1]
        best = max((m for m in points if p == m or m in p.parents), key=lambda m: len(m.parts), default=None)
        if best is not None:
            return best
    except OSError:
        pass
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def _size(n: Optional[int]) -> str:
    if n is None:
        return "?"
    if n < 1024:
        return f"{n} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}"
    return ""  # pragma: no cover


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):  # pragma: no cover
        return str(os.geteuid())


def describe(e: BaseException) -> tuple[str, str]:
    """(message, hint) of a user error for printing: a UserError's own, or pydantic's per-field
    errors of a config (one line per bad field)."""
    if isinstance(e, UserError):
        return str(e), e.hint
    if _config_error(e):
        lines = []
        for err in e.errors():
            field = ".".join(str(x) for x in err.get("loc", ())) or "(value)"
            lines.append(f"{field}: {err.get('msg')} (got {err.get('input')!r})")
        return f"invalid {e.title}:\n  " + "\n  ".join(lines), "the names are the command's --flags (kit <cmd> --help)"
    return str(e), ""


def _config_error(e: BaseException) -> bool:
    """A pydantic error of a settings model (a stage Config, a mechanism config): bad user values."""
    from pydantic import ValidationError

    return isinstance(e, ValidationError) and str(e.title).endswith(("Config", "Knobs"))


def is_user_error(e: BaseException) -> bool:
    return isinstance(e, UserError) or _config_error(e)


def user_error_names() -> set[str]:
    """Class names of every user error loaded so far (for telling a failed notebook's user error,
    known only by its exception's name, from a bug). The caller imports the modules that declare
    the ones it may meet (kit.runner.execute does: this module imports nothing of the kit)."""
    names, todo = set(), [UserError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo += cls.__subclasses__()
    return names
