"""What a recipe costs from nothing, read from a run folder: every stage it needs, once, with its own wall time.

    cost = recipe_cost("runs/ablation-user-model")
    cost.total_min, cost.days, cost.table     # minutes, the days the stages ran on, one row per stage

A run rarely executes every stage it reports: arms share identical stages (one folder, counted once), `kit run
--share-from` takes complete stages of another run (their folder, and their wall time, are that run's), `--keep`
reuses a complete stage whose fingerprint changed (its stage.json keeps the wall time of the run that made it).
The cost of the recipe from nothing is the sum over the distinct stage folders of the wall time each took where
it ran, which is what this reads; a stage whose wall time cannot be found is named, and the total is then a lower
bound. A stage resumed in place (an interrupted stage continues from its folder on the rerun) is counted whole
from stage.json's `wall_s_attempts` (kit/runner/attempts.py); one resumed before the runner kept that counts its
last attempt only, is found by its folder's files older than that attempt's start, and makes the total a lower
bound too. The days are there because one machine's speed drifts from day to day: a sum of stages run on different
days is only as comparable as those days were.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import pandas as pd

from kit.files import read_json


@dataclass
class RecipeCost:
    total_s: Optional[float]  # None when no stage has a wall time
    days: list[str]  # the UTC days the counted stages started on, sorted
    missing: list[str] = field(default_factory=list)  # stage keys whose wall time was not found
    resumed: list[str] = field(default_factory=list)  # stage keys resumed in place: the last attempt's time only
    table: pd.DataFrame = field(default_factory=pd.DataFrame)

    def as_dict(self) -> dict:
        """What a saved page keeps (kit.report.ablations.save_rows)."""
        return {"total_s": self.total_s, "days": self.days, "missing": self.missing, "resumed": self.resumed,
                "table": json.loads(self.table.to_json(orient="records", force_ascii=False))}

    @classmethod
    def from_dict(cls, d: dict) -> "RecipeCost":
        return cls(d.get("total_s"), list(d.get("days") or []), list(d.get("missing") or []),
                   list(d.get("resumed") or []), pd.DataFrame(d.get("table") or []))

    @property
    def total_min(self) -> Optional[float]:
        return None if self.total_s is None else round(self.total_s / 60.0, 1)

    @property
    def line(self) -> str:
        """One line for a page: the total, the days, what is missing."""
        if self.total_min is None:
            return "cost from nothing: no stage has a wall time yet"
        s = f"cost from nothing: {self.total_min:.0f} min (the sum of {len(self.table)} stages' own wall times"
        s += f"; run on {', '.join(self.days)} UTC)" if self.days else ")"
        if self.missing:
            s += f"; at least: no wall time for {', '.join(self.missing)}"
        if self.resumed:
            s += f"; at least: resumed in place, the last attempt counted only: {', '.join(self.resumed)}"
        return s


def earlier_files(folder: Path, started: Optional[str], slack_s: float = 60.0) -> Optional[str]:
    """The time (UTC, to the minute) of the oldest file in `folder` written before `started` (less `slack_s`):
    files an earlier attempt of the stage left, which a resumed stage continues from; None when there are none."""
    if not started or not folder.is_dir():
        return None
    try:
        t0 = datetime.fromisoformat(started).timestamp()
    except ValueError:
        return None
    oldest = min((p.stat().st_mtime for p in folder.rglob("*") if p.is_file()), default=None)
    if oldest is None or oldest >= t0 - slack_s:
        return None
    return datetime.fromtimestamp(oldest, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M")


def recipe_cost(run_dir: str | Path, manifest: Optional[dict] = None) -> RecipeCost:
    """The recipe's cost from nothing (see the module doc) from `run_dir`'s manifest.json (or `manifest`)."""
    run = Path(run_dir)
    if manifest is None:
        manifest = json.loads((run / "manifest.json").read_text())
    rows, seen, missing, resumed, total_s = [], set(), [], [], 0.0
    for e in manifest.get("stages") or []:
        key = e.get("key") or e.get("id") or "?"
        shared = e.get("shared_with")
        folder = Path(shared) if shared else run / key
        ident = str(folder.resolve()) if folder.exists() else str(folder)
        if ident in seen:
            continue  # another arm's copy of the same stage: counted once
        seen.add(ident)
        sj = read_json(folder / "stage.json") or {}
        wall = e.get("wall_s") if not shared else None
        wall = wall if wall is not None else sj.get("wall_s")
        whole = sj.get("wall_s_attempts")  # kit.runner.attempts: every attempt of a stage resumed in place
        wall = whole if whole is not None else wall
        started = e.get("started") if not shared else None
        started = started or sj.get("started")
        if shared and not str(folder.resolve()).startswith(str(run.resolve()) + "/"):
            where = f"another run: {folder}"
        elif e.get("kept_from") or sj.get("kept_from"):
            where = "kept (made under an earlier fingerprint)"
        else:
            where = "this run"
        if wall is None:
            if (e.get("status") or sj.get("status")) in ("complete", "shared"):
                missing.append(key)
            continue
        total_s += float(wall)
        earlier = earlier_files(folder, started) if whole is None else None
        if earlier:
            resumed.append(key)
        rows.append({"stage": key, "wall (min)": round(float(wall) / 60.0, 1), "started (UTC)": (started or "")[:16],
                     "ran in": where, "resumed": f"files from {earlier}" if earlier
                     else (f"{sj.get('attempts')} attempts, all counted" if whole is not None else "")})
    table = pd.DataFrame(rows)
    total = round(total_s, 1) if len(table) else None
    days = sorted({r["started (UTC)"][:10] for r in rows if r["started (UTC)"]})
    return RecipeCost(total, days, missing, resumed, table)
