"""Stage `report`: the run's report, reports/<run-id>/index.html with its figures (PNG, beside it).

Reads what the run's stages wrote (runs/<run-id>/manifest.json, each stage's stage.json and outputs)
and renders (kit.report.build.build_report): engine yield per round with failure categories, SFT
loss curves, GRPO reward and filtered-fraction curves, pass^k per evaluation with its interval next
to the paper's numbers, the users' request-stated and deviation rates, an ablation's per-arm
comparison, every warning a stage raised, and the run manifest. Figures also go to W&B when a run
is open.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from pydantic import Field, PrivateAttr

from kit.stages.base import StageConfig, StageOutputs
from kit.stages.contract import Contract, Produces


class Config(StageConfig):
    """Where the report goes and how its intervals are computed."""

    title: Optional[str] = Field(default=None, description="Report title (default: the recipe's name).")
    report_dir: Optional[str] = Field(default=None, description="Default: reports/<run-id> beside runs/.")
    ci: float = Field(default=0.95, gt=0, lt=1, description="Confidence of the pass^1 bootstrap intervals.")
    bootstrap: int = Field(default=2000, ge=100, description="Bootstrap resamples.")


class Outputs(StageOutputs):
    html: str
    figures: int
    _report: Any = PrivateAttr(default=None)  # the built report of a run in this process (not stored)

    @property
    def report(self) -> Any:
        """The built kit.report.build Report (sections, figures, data) when this process ran the stage."""
        return self._report


def run(config: Config, st) -> Outputs:
    """Build the report; returns the Outputs (`.report`: the built report, for display)."""
    from kit.report.build import build_report

    rep = build_report(st.run_dir, config.report_dir or Path("reports").resolve() / st.run_id, title=config.title,
                       ci=config.ci, bootstrap=config.bootstrap)
    print("report:", rep.html_path)
    run = st.wandb()
    if run is not None:
        import wandb

        run.log({f"report/{p.stem}": wandb.Image(str(p)) for p in rep.figures})
        if "eval_table" in rep.data:
            run.log({"report/evaluations": wandb.Table(dataframe=rep.data["eval_table"].astype(str))})
    out = Outputs(files={"html": str(rep.html_path)}, html=str(rep.html_path), figures=len(rep.figures))
    out._report = rep
    return out


# reads every stage before it: at most one, last, run once after every arm; imports no torch
CONTRACT = Contract(names=("report",), produces=Produces.NOTHING, summarizes_run=True, uses_torch=False)
