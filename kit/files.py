"""Reading and writing the kit's files: one JSONL reader, one atomic writer.

Two readers' policies, one implementation (`iter_jsonl`):
- our own append-only files (engine data, metrics.jsonl): a torn last line (a killed run) or a
  corrupt line is skipped — `read_jsonl`; the engine's store removes such lines on resume;
- files a user hands us (tasks, SFT samples, tau2 simulations): every bad line is a `BadLine`
  naming the file and line, and the caller decides whether to raise or to go on.
Writes are atomic (`atomic_write`, `write_json`): a crash leaves the old file or the new one.
Appends (`append_lines`, `append_jsonl`) add whole lines only: a write cut short (a full disk) is
cut back off, and a torn tail a kill left is closed before the next line, so it never swallows it.
A write the file system refuses (full, read-only, not permitted) is a kit.errors.DiskError naming
the file and the bytes it needed (`disk_errors`), and leaves no `.tmp` file behind.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from kit.errors import BadInput, disk_error, disk_error_in


class BadLine(BadInput):
    """One line of a JSONL file that could not be read; names the file and line."""

    def __init__(self, path: str, lineno: int, reason: str):
        super().__init__(f"{path}:{lineno}: {reason}", "fix or delete that line (each line is one JSON object)")
        self.path, self.lineno, self.reason = path, lineno, reason


def iter_jsonl(path: str | Path, torn_tail: bool = False) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON or BadLine) for each non-blank line. `torn_tail`: a last line
    without its newline is a write a kill cut short, reported as a BadLine and not parsed."""
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if torn_tail and not line.endswith("\n"):
                yield lineno, BadLine(str(path), lineno, "torn last line (no newline: the write was cut short)")
                return
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as e:
                yield lineno, BadLine(str(path), lineno, f"not JSON ({e.msg} at column {e.colno})")


def json_digest(obj: Any) -> str:
    """sha256 of `obj` as sorted-key JSON: the identity key of a memo (kit.train.grpo_memo, kit.eval.memo)."""
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _untimed(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _untimed(v) for k, v in x.items() if k != "timestamp"}
    if isinstance(x, list):
        return [_untimed(v) for v in x]
    return x


def task_digest(records: Any) -> str:
    """`json_digest` of tasks (or records holding tasks, as JSON) less their `timestamp` fields: tau2 stamps the
    messages of a task's initial history with the time the task was loaded, so the same task read by two
    processes would otherwise never digest alike (and a memo keyed by it would never be found again)."""
    return json_digest(_untimed(records))


def read_jsonl(path: str | Path) -> list[dict]:
    """Every complete JSON line of one of our own files (missing file: []); a torn or corrupt line
    is skipped (kit.engine.store.RunStore.recover removes it)."""
    if not Path(path).exists():
        return []
    return [x for _, x in iter_jsonl(path, torn_tail=True) if not isinstance(x, BadLine)]


def read_records(path: str | Path) -> tuple[str, list[tuple[int, Any]]]:
    """A JSON document (a list: its items; else the one object) or, failing that, JSONL lines:
    ("item" or "line", [(position, record or BadLine)]), positions counted from 1."""
    text = Path(path).read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return "line", list(iter_jsonl(path))
    return "item", list(enumerate(data if isinstance(data, list) else [data], 1))


@contextlib.contextmanager
def disk_errors(path: str | Path, needed: Optional[int] = None) -> Iterator[None]:
    """Inside: an OSError of a full, read-only or unwritable file system (also one torch.save wrapped
    in a RuntimeError, or safetensors' "(os error 28)") becomes a kit.errors.DiskError naming `path`
    and the `needed` bytes."""
    try:
        yield
    except Exception as e:  # an OSError, or a library's error that kept only its text (safetensors)
        err = disk_error(e, path, needed) or disk_error_in(str(e), path)
        if err is None or err is e:
            raise
        raise err from e


def append_lines(path: str | Path, lines: Iterable[str], sync: bool = False) -> int:
    """Append `lines` (each given its newline) to `path` as whole lines; returns how many. A write cut
    short is cut back off (DiskError); a last line without its newline (a killed writer's) is ended
    first, so it stays one unreadable line instead of swallowing the first new one. `sync`: fsync."""
    lines = [line.rstrip("\n") + "\n" for line in lines]
    data = "".join(lines).encode("utf-8")
    with disk_errors(path, len(data)):
        with open(path, "a+b", buffering=0) as f:
            start = f.seek(0, os.SEEK_END)
            if start and os.pread(f.fileno(), 1, start - 1) != b"\n":
                data = b"\n" + data
            try:
                view = memoryview(data)
                while view:
                    view = view[f.write(view):]
                if sync:
                    os.fsync(f.fileno())
            except BaseException:
                with contextlib.suppress(OSError):
                    os.ftruncate(f.fileno(), start)
                raise
    return len(lines)


def append_jsonl(path: str | Path, record: Any) -> None:
    """One JSON line at the end of `path` (dates and paths as strings)."""
    append_lines(path, [json.dumps(record, default=str)])


def atomic_write(path: str | Path, text: str | bytes) -> None:
    """Write `text` to `path` through a temporary file, fsync and rename; a refused write (DiskError)
    leaves the old file and no temporary one."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    data = text.encode("utf-8") if isinstance(text, str) else text
    with disk_errors(path, len(data)):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise


def write_json(path: str | Path, data: Any) -> None:
    """Atomic JSON write (indent 1; dates and paths as strings)."""
    atomic_write(path, json.dumps(data, indent=1, default=str))


def read_json(path: str | Path) -> Optional[Any]:
    """A JSON file's content, or None when it is missing or not JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
