"""What a run folder holds, read back for the report, the episode browser and `kit view`.

    run = run_folder("quickstart-cpu")    # runs/quickstart-cpu (or the path given), NotFound without a manifest
    data = collect(run)                   # {"manifest", one list per stage's report bucket, "warnings"}
    Section("Episodes").text("...")       # one titled block of a report: text, tables, figures, html
    agent_provenance("hf:runs/x/grpo/model").text   # "SFT: 48 steps (sft_agent); GRPO skipped: all groups filtered"
    eval_label(data["evals"][0])          # the evaluation's label, flagged when its agent was never trained

Read from the files the stages wrote: manifest.json, each stage's stage.json (as the stage's
Outputs model, kit/stages) and the outputs it names. What a stage adds to the data is its
CONTRACT's `report` part (kit/stages/contract.py): its bucket (engine, sft_runs, grpo_runs, evals)
and how one finished stage reads into it; how a model folder it wrote is described, its
`provenance` hook.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from kit.files import read_json
from kit.stages import contract, contracts, outputs_class, summarizes_run


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


@dataclass(frozen=True)
class AgentProvenance:
    """What produced an evaluated agent's weights, as the stage.json beside its folder says."""

    text: str                        # the report's "agent, as trained" column
    stage: Optional[str] = None      # the stage that wrote the folder (sft_agent, grpo, ...); None: no stage's
    stage_id: Optional[str] = None
    untrained: Optional[str] = None  # a training stage's output that holds its start's weights: why


def reasons_text(skips: dict[str, int], counts: bool) -> str:
    """'all groups filtered (3), ...': skip reasons as the report words them."""
    return ", ".join(r.replace("_", " ") + (f" ({n})" if counts else "") for r, n in skips.items())


def agent_provenance(model: Any) -> AgentProvenance:
    """Which stage's output `model` (an evaluation's meta["model"]: a spec such as
    'hf:<run>/grpo/model') is, and what that stage trained: read from the stage.json beside the
    folder, as the stage's CONTRACT.provenance hook reads it (GRPO also reads its start's, and its
    metrics.jsonl for the best checkpoint). A folder no stage wrote (the embedded model, a base model's folder) is the base model."""
    from kit.llm.spec import ModelSpec

    try:
        spec = ModelSpec.parse(model, folder_kind="hf") if model else None
    except ValueError:
        spec = None
    if spec is None or spec.embedded or not spec.path:
        return AgentProvenance("base model" if spec is None or spec.local else f"served at {spec} (not traced)")
    folder = Path(spec.path)
    info = read_json(folder.parent / "stage.json") or {}
    stage, sid = info.get("stage"), info.get("id")
    if not stage:
        return AgentProvenance("base model")
    hook = contract(stage).provenance if stage in contract_names() else None
    if hook is None:
        return AgentProvenance(f"{stage} output ({sid})", stage, sid)
    return hook(info, folder)


def contract_names() -> set[str]:
    return {name for c in contracts() for name in c.names}


def eval_label(ev: dict) -> str:
    """An evaluation's label as every table shows it: the recipe's label (its stage id without one),
    followed by ' — <why>' when its agent is a training stage's output that was never trained (a
    skipped GRPO), so that nobody reads it as a trained arm."""
    label = str(ev["summary"].get("label") or ev["params"].get("label") or ev["key"])
    prov = ev.get("provenance")
    return f"{label} — {prov.untrained}" if prov is not None and prov.untrained else label


def _stage_dir(entry: dict) -> Optional[Path]:
    nb = entry.get("executed_notebook") or entry.get("log")  # a launched stage (accelerate) has a log
    if entry.get("shared_with"):
        return Path(entry["shared_with"])
    if entry.get("dir"):  # a stage the command line ran (kit/cli.py: runs/cli/manifest.json)
        return Path(entry["dir"])
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


def report_parts() -> list:
    """Every stage's kit.stages.contract.ReportPart, in registry order."""
    return [c.report for c in contracts() if c.report is not None]


def empty_data(manifest: dict) -> dict[str, Any]:
    """collect()'s shape with nothing in it: the manifest, one list per report bucket, the warnings."""
    return {"manifest": manifest, **{part.bucket: [] for part in report_parts()}, "warnings": []}


def collect(run_dir: str | Path) -> dict:
    """Everything the report shows, as plain data frames and dicts."""
    run_dir = Path(run_dir)
    m = read_json(run_dir / "manifest.json") or {}
    out = empty_data(m)
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
        part = contract(e["stage"]).report if e["stage"] in contract_names() else None
        if summarizes_run(e["stage"]) or info.get("status") != "complete" or part is None:
            continue
        try:  # what the stage wrote, read back as its Outputs model (kit/stages)
            res = outputs_class(e["stage"]).from_stage_json(info)
        except ValueError as err:
            out["warnings"].append({"stage": e["key"], "warning": f"stage.json does not read as the stage's Outputs "
                                    f"(written by another kit version? rerun the stage): {str(err)[:300]}"})
            continue
        entry = part.read(common, res, e["stage"])
        if entry is not None:
            out[part.bucket].append(entry)
    # engine runs shared between arms appear once per arm in the manifest: keep one
    for part in report_parts():
        seen, uniq = set(), []
        for x in out[part.bucket]:
            if str(x["dir"]) not in seen:
                seen.add(str(x["dir"]))
                uniq.append(x)
            elif part.per_arm:
                uniq.append(x)  # an arm's evaluation shared with another arm still is that arm's number
        out[part.bucket] = uniq
    return out
