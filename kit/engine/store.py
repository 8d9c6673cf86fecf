"""Append-only, crash-safe run files.

The engine commits work in *units* (one plan in one round). A unit's lines are appended to
the data files first (tasks.jsonl, trajectories.jsonl, ...), then one line goes to
units.jsonl: that line is the commit. On start, `RunStore.recover()` drops every data line
whose unit has no commit line (work a `kill -9` interrupted) and any torn last line, so a
rerun redoes exactly the uncommitted units: no accepted record is lost or duplicated.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

UNIT_RE = re.compile(r"r(\d+)-p(\d+)")


def atomic_write(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def unit_id(round_idx: int, plan_idx: int) -> str:
    return f"r{round_idx}-p{plan_idx}"


def unit_of(line: dict) -> Optional[str]:
    """The unit a data line belongs to: its `unit` field, or the one in its task id."""
    if "unit" in line:
        return line["unit"]
    tid = line.get("task_id") or line.get("id") or (line.get("task") or {}).get("id") or ""
    m = UNIT_RE.search(str(tid))
    return m.group(0) if m else None


def read_jsonl(path: str | Path) -> list[dict]:
    """Every complete JSON line; a torn or corrupt line is skipped (recover() removes it)."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.endswith("\n"):
                break  # torn tail
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


class RunStore:
    DATA_FILES = ("tasks.jsonl", "rl_tasks.jsonl", "trajectories.jsonl", "sft_agent.jsonl", "sft_user.jsonl",
                  "failures.jsonl", "proposals.jsonl")

    def __init__(self, out_dir: str | Path):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.units_path = self.dir / "units.jsonl"

    def committed(self) -> dict[str, dict]:
        return {u["unit"]: u for u in read_jsonl(self.units_path)}

    def recover(self) -> dict[str, int]:
        """Drop uncommitted and torn lines from every data file; returns lines dropped per file."""
        done = set(self.committed())
        self._rewrite(self.units_path, lambda d: True)
        dropped = {}
        for name in self.DATA_FILES:
            n = self._rewrite(self.dir / name, lambda d: unit_of(d) in done)
            if n:
                dropped[name] = n
        return dropped

    def _rewrite(self, path: Path, keep: Callable[[dict], bool]) -> int:
        if not path.exists():
            return 0
        raw = path.read_text(encoding="utf-8")
        lines = raw.splitlines(keepends=True)
        kept, dropped = [], 0
        for line in lines:
            try:
                d = json.loads(line) if line.endswith("\n") else None
            except json.JSONDecodeError:
                d = None
            if d is not None and keep(d):
                kept.append(line)
            else:
                dropped += 1
        if dropped:
            atomic_write(path, "".join(kept))
        return dropped

    def append(self, name: str, rows: Iterable[Any]) -> int:
        """Append rows (dicts, pydantic models or JSON strings) to a data file, fsync'd."""
        n = 0
        with open(self.dir / name, "a", encoding="utf-8") as f:
            for r in rows:
                if hasattr(r, "model_dump_json"):
                    line = r.model_dump_json()
                elif isinstance(r, str):
                    line = r
                else:
                    line = json.dumps(r, ensure_ascii=False, default=str)
                f.write(line.rstrip("\n") + "\n")
                n += 1
            f.flush()
            os.fsync(f.fileno())
        return n

    def commit(self, unit: str, summary: dict) -> None:
        self.append("units.jsonl", [{"unit": unit, **summary}])

    def rows(self, name: str) -> list[dict]:
        return read_jsonl(self.dir / name)
