"""An evaluation of the same weights under the same settings, reused instead of run again.

    memo = EvalMemo.open(runs_dir / ".memo" / "eval", cfg, tasks)   # None: an endpoint, nothing to reuse safely
    src = memo.find()          # a finished evaluation's folder with this identity, or None
    ...                        # copy its trajectories.jsonl: kit.eval.runner resumes from it, sampling nothing
    memo.record(out_dir)       # after a finished evaluation: the next one with this identity reads it

An evaluation is deterministic in what it reads (the same weights and settings gave the same 189 verdicts,
docs/ablations.md): the agent's and the user's files (kit.llm.weights), every setting but where it writes, what
it checks leaks against and its label, the tasks, the tau2 version and the kit code that runs the episodes
(kit/runner/codehash.py over kit.eval.runner's imports). Two stages that score byte-identical weights under one
identity, as GRPO's model_best/ does when its curve never rose (the start's weights) and a GRPO whose every step
was skipped, would sample the same episodes; the second copies the first's trajectories instead (12 minutes of a
laptop ablation arm). eval.json says so (`reused_from`). A model behind an endpoint is never reused: a server's
weights can change behind its name. Records live under the runs folder (`.memo/eval/<key>.json`), so a run
deleted with its folder is simply not found.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from kit.files import json_digest, read_json, task_digest, write_json

# settings that do not change an episode: where the evaluation writes, what the leak check reads, its name
NOT_IDENTITY = frozenset({"model", "user_model", "out_dir", "training_data", "label", "allow_overlap"})


def eval_identity(cfg: Any, tasks: list) -> Optional[dict]:
    """What the episodes of `cfg` on `tasks` depend on; None when the agent or the user is not a local folder."""
    from kit._tau2 import TAU2_VERSION
    from kit.llm.spec import ModelSpec
    from kit.llm.weights import weights_digest
    from kit.runner.codehash import code_fingerprint

    agent, user = weights_digest(cfg.model), weights_digest(cfg.user_model)
    if agent is None or user is None:
        return None
    settings = {k: v for k, v in cfg.model_dump(mode="json").items() if k not in NOT_IDENTITY}
    return {"agent": [ModelSpec.parse(cfg.model, folder_kind="hf").kind, agent],
            "user": [ModelSpec.parse(cfg.user_model, folder_kind="hf").kind, user],
            "settings": settings, "tasks": task_digest([t.model_dump(mode="json") for t in tasks]),
            "tau2": TAU2_VERSION, "code": code_fingerprint(["kit.eval.runner"])}


class EvalMemo:
    """Finished evaluations by identity, in `folder`."""

    def __init__(self, folder: str | Path, identity: dict):
        self.folder, self.identity = Path(folder), identity
        self.key = json_digest(identity)[:20]

    @classmethod
    def open(cls, folder: str | Path, cfg: Any, tasks: list) -> Optional["EvalMemo"]:
        ident = eval_identity(cfg, tasks)
        return cls(folder, ident) if ident is not None else None

    @property
    def path(self) -> Path:
        return self.folder / f"{self.key}.json"

    def find(self, exclude: Optional[Path] = None) -> Optional[Path]:
        """The folder of a finished evaluation with this identity whose trajectories are still there (not
        `exclude`, the asking stage's own); None when there is none."""
        rec = read_json(self.path) or {}
        if rec.get("identity") != self.identity:
            return None
        src = Path(rec.get("origin") or "")
        if exclude is not None and src.resolve() == Path(exclude).resolve():
            return None
        return src if (src / "trajectories.jsonl").is_file() and (src / "eval.json").is_file() else None

    def record(self, out_dir: str | Path) -> None:
        write_json(self.path, {"identity": self.identity, "origin": str(Path(out_dir).resolve())})
