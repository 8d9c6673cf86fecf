"""What an evaluation leaves behind, and the task files it reads.

    res = EvalResult(config, episodes_df, {1: 0.25}, meta); res.write(out)   # eval.json + episodes.csv
    done = done_pairs(out / "trajectories.jsonl")   # (task id, trial) -> finished episode (resume, browser)
    tasks = load_tasks_file("tasks.jsonl")          # tau2 Tasks; a bad entry names its position and field

Shared by the kit's runner (kit/eval/runner.py), the tau2-native path (kit/eval/tau2_native.py)
and the report's episode browser (kit/report/episodes.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from kit.eval.config import EvalConfig
from kit.files import BadLine, atomic_write, read_records
from kit.trajectory import Trajectory


@dataclass
class EvalResult:
    config: EvalConfig
    episodes: pd.DataFrame
    passk: dict[int, float]
    meta: dict = field(default_factory=dict)

    def summary_line(self) -> str:
        n = self.episodes["task_id"].nunique() if len(self.episodes) else 0
        return f"pass^1 {self.passk.get(1, float('nan')):.4f} (n={n}, trials={self.config.trials})"

    def to_json(self) -> dict:
        return {"passk": {str(k): v for k, v in self.passk.items()}, "meta": self.meta,
                "config": self.config.model_dump(mode="json"), "episodes": self.episodes.to_dict(orient="records")}

    def write(self, out: str | Path) -> None:
        """eval.json (everything) and episodes.csv (one row per episode) into the folder `out`."""
        out = Path(out)
        atomic_write(out / "eval.json", json.dumps(self.to_json(), indent=2, default=str))
        atomic_write(out / "episodes.csv", self.episodes.to_csv(index=False))


def load_tasks_file(path: str) -> list:
    """tau2 Tasks from a JSON list or JSONL file; a bad entry names its position and field."""
    from tau2.data_model.tasks import Task

    if not Path(path).is_file():
        from kit.errors import NotFound

        raise NotFound(f"task file not found: {path}", "give a JSON list or JSONL file of tau2 Task objects "
                       "(`kit export` writes some), or a --split")
    tasks = []
    where, records = read_records(path)
    for pos, data in records:
        if isinstance(data, BadLine):
            raise data from None
        try:
            tasks.append(Task.model_validate(data))
        except Exception as e:
            errs = getattr(e, "errors", lambda: [])()
            field_ = ".".join(str(p) for p in errs[0]["loc"]) if errs else "?"
            from kit.errors import BadInput

            raise BadInput(f"{path} {where} {pos}: invalid Task field '{field_}': {errs[0]['msg'] if errs else e}",
                           "each entry is a tau2 Task (id, user_scenario, evaluation_criteria)") from None
    return tasks


def done_pairs(path: Path, record: type = Trajectory) -> dict[tuple[str, int], Any]:
    """(task id, trial) -> finished episode of a JSONL file of `record`s (kit Trajectory or tau2 SimulationRun)."""
    done = {}
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                t = record.model_validate_json(line)
            except Exception:
                continue  # a torn last line from a killed run: that episode reruns
            done[(t.task_id, t.trial or 0)] = t
    return done
