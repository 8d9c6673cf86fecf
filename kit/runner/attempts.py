"""Every attempt at a stage in its folder, so that a stage resumed in place is counted whole.

    att = Attempts(stage_dir)
    att.begin()                     # before the stage executes: closes a killed attempt, opens this one
    ...
    att.end(wall_s, "complete")     # or "failed"; att.total_s: every attempt's wall time, this one included

An interrupted stage continues from its folder on the rerun (kit run), and the rerun's wall time is only the
rest of the work: `<stage>/attempts.json` lists each attempt with its wall time. An attempt that was killed
(SIGKILL, a lost machine) never wrote its end: the next `begin` closes it at the time of the newest file it left,
and says that its time is an estimate. stage.json then carries `attempts` and `wall_s_attempts`, which a recipe's
cost from nothing reads (kit/report/cost.py).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from kit.files import read_json, write_json

FILE = "attempts.json"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class Attempts:
    def __init__(self, stage_dir: str | Path):
        self.dir = Path(stage_dir)
        self.path = self.dir / FILE
        self.items: list[dict] = []

    def _load(self) -> list[dict]:
        items = read_json(self.path)
        return [a for a in items if isinstance(a, dict)] if isinstance(items, list) else []

    def _newest_file(self) -> Optional[float]:
        return max((p.stat().st_mtime for p in self.dir.rglob("*")
                    if p.is_file() and p.name not in (FILE, FILE + ".tmp")), default=None)

    def begin(self) -> None:
        """Close an attempt that never ended (killed) at its newest file's time, then open this one."""
        self.items = self._load()
        for a in self.items:
            if a.get("wall_s") is None:
                newest = self._newest_file()
                try:
                    t0 = datetime.fromisoformat(str(a.get("started"))).timestamp()
                except ValueError:
                    t0 = None
                a["wall_s"] = round(max(0.0, newest - t0), 1) if newest is not None and t0 is not None else 0.0
                a["how"] = "killed: ended at its newest file (an estimate)"
        self.items.append({"started": _now(), "wall_s": None})
        write_json(self.path, self.items)

    def end(self, wall_s: float, how: str) -> None:
        self.items[-1].update(wall_s=round(float(wall_s), 1), how=how)
        write_json(self.path, self.items)

    @property
    def total_s(self) -> float:
        return round(sum(float(a.get("wall_s") or 0.0) for a in self.items), 1)

    def fields(self) -> dict:
        """What stage.json carries of them: nothing for a stage that ran once."""
        if len(self.items) < 2:
            return {}
        return {"attempts": len(self.items), "wall_s_attempts": self.total_s}
