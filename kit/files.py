"""Reading and writing the kit's files: one JSONL reader, one atomic writer.

Two readers' policies, one implementation (`iter_jsonl`):
- our own append-only files (engine data, metrics.jsonl): a torn last line (a killed run) or a
  corrupt line is skipped — `read_jsonl`; the engine's store removes such lines on resume;
- files a user hands us (tasks, SFT samples, tau2 simulations): every bad line is a `BadLine`
  naming the file and line, and the caller decides whether to raise or to go on.
Writes are atomic (`atomic_write`, `write_json`): a crash leaves the old file or the new one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterator, Optional

from kit.errors import BadInput


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


def append_jsonl(path: str | Path, record: Any) -> None:
    """One JSON line at the end of `path` (dates and paths as strings)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, default=str) + "\n")


def atomic_write(path: str | Path, text: str) -> None:
    """Write `text` to `path` through a temporary file, fsync and rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path: str | Path, data: Any) -> None:
    """Atomic JSON write (indent 1; dates and paths as strings)."""
    atomic_write(path, json.dumps(data, indent=1, default=str))


def read_json(path: str | Path) -> Optional[Any]:
    """A JSON file's content, or None when it is missing or not JSON."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
