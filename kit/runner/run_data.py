"""What a run folder holds, read back for the report, the episode browser and `kit view`.

    run = run_folder("quickstart-cpu")    # runs/quickstart-cpu (or the path given), NotFound without a manifest
    data = collect(run)                   # {"manifest", "engine", "sft", "grpo", "evals", "warnings"}
    Section("Episodes").text("...")       # one titled block of a report: text, tables, figures, html

Read from the files the stages wrote: manifest.json, each stage's stage.json (as the stage's
Outputs model, kit/stages) and the outputs it names.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from kit.files import read_json
from kit.stages import outputs_class


@dataclass
class Section:
    title: str
    items: list[tuple[str, Any]] = field(default_factory=list)  # ("text"|"table"|"figure"|"html"|"pre", value)

    def text(self, s: str) -> "Section":
        self.items.append(("text", s))
        return self

    def table(self, df: pd.DataFrame) -> "Section":
        self.items.append(("table", df))
        return self

    def figure(self, path: Path) -> "Section":
        self.items.append(("figure", Path(path)))
        return self


def _stage_dir(entry: dict) -> Optional[Path]:
    nb = entry.get("executed_notebook") or entry.get("log")  # a launched stage (accelerate) has a log
    if entry.get("shared_with"):
        return Path(entry["shared_with"])
    return Path(nb).parent if nb else None


def run_folder(run: str | Path) -> Path:
    """A finished or running `kit run` folder: the path itself, or runs/<run> given a run id;
    kit.errors.NotFound when neither holds a manifest.json."""
    run = Path(run)
    if not (run / "manifest.json").is_file() and (Path("runs") / run / "manifest.json").is_file():
        run = Path("runs") / run
    if not (run / "manifest.json").is_file():
        from kit.errors import NotFound

        raise NotFound(f"{run}: no manifest.json", "give a run folder `kit run` wrote: runs/<run-id>")
    return run


def collect(run_dir: str | Path) -> dict:
    """Everything the report shows, as plain data frames and dicts."""
    run_dir = Path(run_dir)
    m = read_json(run_dir / "manifest.json") or {}
    out: dict[str, Any] = {"manifest": m, "engine": [], "sft": [], "grpo": [], "evals": [], "warnings": []}
    for e in m.get("stages", []):
        if e.get("status") not in ("complete", "shared"):
            continue
        d = _stage_dir(e)
        if d is None:
            continue
        info = read_json(d / "stage.json") or {}
        if e.get("status") != "shared":  # a shared stage's warnings belong to the arm that ran it
            for w in info.get("warnings") or []:
                out["warnings"].append({"stage": e["key"], "warning": w})
        common = {"key": e["key"], "id": e["id"], "arm": e.get("arm"), "dir": d, "summary": info.get("summary") or {},
                  "params": e.get("params") or {}}
        if e["stage"] == "report" or info.get("status") != "complete":
            continue
        try:  # what the stage wrote, read back as its Outputs model (kit/stages)
            res = outputs_class(e["stage"]).from_stage_json(info)
        except ValueError as err:
            out["warnings"].append({"stage": e["key"], "warning": f"stage.json does not read as the stage's Outputs "
                                    f"(written by another kit version? rerun the stage): {str(err)[:300]}"})
            continue
        if e["stage"] == "synthesize" and "rounds" in res.files:
            out["engine"].append({**common, "rounds": res.rounds_table()})
        elif e["stage"] in ("sft_user", "sft_agent"):
            out["sft"].append({**common, "role": e["stage"][4:], "curve": res.loss_curve(), "outputs": res})
        elif e["stage"] == "grpo":
            out["grpo"].append({**common, "history": res.history()})
        elif e["stage"] == "evaluate":
            ev = res.eval_json()
            out["evals"].append({**common, "passk": {int(k): v for k, v in (ev.get("passk") or {}).items()},
                                 "meta": ev.get("meta") or {}, "episodes": pd.DataFrame(ev.get("episodes") or [])})
    # engine runs shared between arms appear once per arm in the manifest: keep one
    for name in ("engine", "sft", "grpo", "evals"):
        seen, uniq = set(), []
        for x in out[name]:
            if str(x["dir"]) not in seen:
                seen.add(str(x["dir"]))
                uniq.append(x)
            elif name == "evals":
                uniq.append(x)  # an arm's evaluation shared with another arm still is that arm's number
        out[name] = uniq
    return out
