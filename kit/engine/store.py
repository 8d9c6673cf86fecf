"""Append-only, crash-safe run files.

The engine commits work in *units* (one plan in one round; kit/engine/records.py). `commit`
appends a unit's lines to the data files first (tasks.jsonl, trajectories.jsonl, ...), then one
line to units.jsonl that counts them: that line is the commit. Units commit one at a time, so
each data file is the committed units' lines, in commit order, then at most the lines of a unit a
`kill -9` interrupted. On start, `RunStore.recover()` cuts every data file back to the lines its
commits count (and drops a torn last line), so a rerun redoes exactly the uncommitted units: no
accepted record is lost or duplicated. `units()` reads committed units back, line counts telling
which lines are whose.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Optional

from kit.engine.records import DATA_FILES, CommittedUnit, UnitResult
from kit.files import append_lines, atomic_write, read_jsonl  # noqa: F401  (the store reads and writes through these)


def unit_id(round_idx: int, plan_idx: int) -> str:
    return f"r{round_idx}-p{plan_idx}"


class RunStore:
    DATA_FILES = DATA_FILES

    def __init__(self, out_dir: str | Path):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.units_path = self.dir / "units.jsonl"

    def committed(self) -> dict[str, dict]:
        return {u["unit"]: u for u in read_jsonl(self.units_path)}

    def _commits(self) -> list[dict]:
        units = read_jsonl(self.units_path)
        old = [u["unit"] for u in units if "lines" not in u]
        if old:
            raise RuntimeError(f"{self.units_path}: units {old[:3]} have no line counts (a run folder from an "
                               "older kit); finish it with that version or start a new out_dir")
        return units

    def recover(self) -> dict[str, int]:
        """Cut every data file back to the lines its commits count (a killed unit's lines and a torn
        last line go; a torn or corrupt units.jsonl line is no commit); returns lines dropped per file."""
        _cut(self.units_path, lambda lines: [x for x in lines if _complete_json(x)])
        units = self._commits()
        dropped = {}
        for name in self.DATA_FILES:
            keep = sum(u["lines"].get(name, 0) for u in units)
            n = _cut(self.dir / name, lambda lines, k=keep: lines[:k])
            if n:
                dropped[name] = n
        return dropped

    def append(self, name: str, rows: Iterable[Any]) -> int:
        """Append rows (dicts, pydantic models or JSON strings) to a data file, fsync'd (a write a full
        disk cut short is cut back off: kit.files.append_lines)."""
        lines = [r.model_dump_json() if hasattr(r, "model_dump_json") else r if isinstance(r, str)
                 else json.dumps(r, ensure_ascii=False, default=str) for r in rows]
        return append_lines(self.dir / name, lines, sync=True) if lines else 0

    def commit(self, result: UnitResult) -> dict:
        """Append a unit's lines to every data file, then its commit line (returned)."""
        counts = {name: self.append(name, rows) for name, rows in result.lines().items()}
        line = {"unit": result.unit, **result.summary(), "lines": counts}
        self.append("units.jsonl", [line])
        return line

    def units(self, round: Optional[int] = None,
              files: Iterable[str] = ("proposals.jsonl", "trajectories.jsonl", "failures.jsonl")) -> list[CommittedUnit]:
        """Committed units (of one round, or all), in commit order, each with its lines of `files`."""
        data = {name: read_jsonl(self.dir / name) for name in files}
        at = dict.fromkeys(data, 0)
        out = []
        for u in self._commits():
            rows = {}
            for name in data:
                n = u["lines"].get(name, 0)
                rows[name] = data[name][at[name]: at[name] + n]
                at[name] += n
            if round is None or u["round"] == round:
                out.append(CommittedUnit(summary=u, rows=rows))
        return out


def _complete_json(line: str) -> bool:
    try:
        json.loads(line)
    except json.JSONDecodeError:
        return False
    return line.endswith("\n")


def _cut(path: Path, keep) -> int:
    """Rewrite `path` (atomically) to `keep(its lines)` when that drops any; returns lines dropped."""
    if not path.exists():
        return 0
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = keep(lines)
    if len(kept) < len(lines):
        atomic_write(path, "".join(kept))
    return len(lines) - len(kept)
