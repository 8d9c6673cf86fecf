"""Stage `evaluate`: pass^k of an agent on a τ² split or a task file (kit.eval.evaluate).

`trials` episodes per task, each scored by the kit verifier (tau2's evaluation semantics;
`cross_check` also asks tau2's own evaluator), pass^k as τ²-bench defines it with a 95% bootstrap
interval on pass^1 over tasks, the user simulator's deviation rate, how often its first message
states the request (request_stated) and how often episodes end by a stop rather than a limit
(proper_end). `protocol: tau2` runs tau2's own orchestrator and user simulator instead
(kit.eval.tau2_native). Every number is recorded with the agent, the user simulator, the sampling
and the tau2 version, and pass^1 is also given per task shape and per phrasing (kit.data.task_labels).
More than one trial must sample: trials > 1 at temperature 0 is refused (kit.eval.config). A rerun
resumes (trajectories.jsonl). An evaluation of byte-identical agent and user weights under the same settings
that already ran in this runs folder is reused, its episodes copied rather than sampled (kit.eval.memo;
eval.json's meta `reused_from`): GRPO's model_best/ when its curve never rose is its start's weights.

Leak check first (kit.eval.leak, before any model is loaded): the evaluation tasks' gold actions
against what this run trained on (`training_data`; by default every synthesize / sft_user /
sft_agent / grpo stage that ran before this one). An overlap fails the stage unless
`allow_overlap` is set; the overlap is recorded in eval.json and shown in the report either way.

Outputs: eval.json, episodes.csv, trajectories.jsonl.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import Field, PrivateAttr

from kit import metrics as M
from kit.eval.config import EvalConfig, EvalKnobs
from kit.stages.base import ModelStageConfig, StageOutputs, mechanism_kwargs
from kit.stages.contract import BASE_MODEL, Contract, Problem, Produces, Reference, ReportPart, SectionContext


class Config(ModelStageConfig, EvalKnobs):
    """The agent, the referee user, the tasks; every evaluation knob is kit.eval.config.EvalKnobs'
    (declared there once, inherited here)."""

    model: Optional[str] = Field(default=None, description="Agent. None: the latest grpo / sft_agent stage, "
                                 "else the base_model.")
    user_model: Optional[str] = Field(default=None, description="User simulator at evaluation time (None: the "
                                      "base_model, the same referee for every arm).")
    label: Optional[str] = Field(default=None, description="Name of this evaluation in the report.")
    training_data: Optional[list[str]] = Field(default=None, description="What the agent trained on, checked "
                                               "against the evaluation tasks' gold actions (kit.eval.leak): files, "
                                               "folders or 'split:<name>'. None: every synthesize / sft_user / "
                                               "sft_agent / grpo stage of this run that ran before this one.")


class Outputs(StageOutputs):
    label: str
    passk: dict[str, float] = Field(description="pass^k for k = 1..trials.")
    model: str
    user_model: str
    tasks: int
    trials: int
    user_deviation_rate: Optional[float] = None
    request_stated_rate: Optional[float] = None
    proper_end_rate: Optional[float] = None
    infra_failures: int = Field(default=0, description="Episodes a server failed (5xx, garbled answer): left "
                                "out of every number here, run again by a rerun.")
    leak: Optional[dict] = None
    pass1_ci95: Optional[list] = Field(default=None, description="95% bootstrap interval of pass^1 "
                                       "(kit.eval.passk.pass1_interval: tasks, then trials, resampled).")

    _result: Any = PrivateAttr(default=None)  # the kit.eval EvalResult of a run in this process (not stored)

    @property
    def result(self) -> Any:
        """The kit.eval EvalResult (episodes as a DataFrame, pass^k, meta) when this process ran the stage."""
        return self._result

    @property
    def pass1(self) -> Optional[float]:
        return self.passk.get("1")

    def eval_json(self) -> dict:
        """eval.json: pass^k, meta (protocol, user fidelity, leak check), config and every episode."""
        from kit.files import read_json

        return read_json(self.files["eval"]) or {}


def run(config: Config, st) -> Outputs:
    """Leak check, then the episodes; returns the Outputs (`.result`: the kit.eval result with its episodes)."""
    from kit.eval import evaluate
    from kit.eval.leak import run_training_data
    from kit.llm.spec import ModelSpec

    agent_spec = str(ModelSpec.parse(config.model or "embedded", folder_kind=config.backend))
    user_spec = str(ModelSpec.parse(config.user_model or "embedded", folder_kind=config.backend))
    train_paths = config.training_data if config.training_data is not None \
        else run_training_data(st.run_dir, before=st.key, arm=st.arm)
    print("leak check against:", *(train_paths or ["(no training data)"]), sep="\n  ")
    cfg = EvalConfig(**mechanism_kwargs(config, EvalConfig, model=agent_spec, user_model=user_spec,
                                        training_data=train_paths, out_dir=str(st.out_dir)))
    # an evaluation of the same weights under the same settings, anywhere in this runs folder, is reused rather
    # than sampled again (kit.eval.memo: e.g. GRPO's model_best/ that is its start)
    res = evaluate(cfg, progress=True, memo_dir=st.run_dir.parent / ".memo" / "eval")
    for w in res.meta.get("warnings") or []:
        st.warn(w)
    print(res.summary_line())
    st.log("eval", {M.pass_k(k): v for k, v in res.passk.items()}
           | {k: res.meta[k] for k in (M.USER_DEVIATION_RATE, M.REQUEST_STATED_RATE, M.PROPER_END_RATE, M.INFRA_FAILURES)
              if res.meta.get(k) is not None})
    out = Outputs(files={"eval": str(st.out_dir / "eval.json"), "episodes": str(st.out_dir / "episodes.csv")},
                  label=config.label or st.key, passk={str(k): v for k, v in res.passk.items()},
                  model=agent_spec, user_model=user_spec, tasks=res.meta["tasks"], trials=config.trials,
                  user_deviation_rate=res.meta.get(M.USER_DEVIATION_RATE), pass1_ci95=res.meta.get(M.PASS1_CI95),
                  request_stated_rate=res.meta.get(M.REQUEST_STATED_RATE),
                  proper_end_rate=res.meta.get(M.PROPER_END_RATE), leak=res.meta.get("leak"),
                  infra_failures=res.meta.get(M.INFRA_FAILURES) or 0)
    out._result = res
    return out


# ----- the contract (kit/stages/contract.py) ------------------------------------------------------


def check(ps, plan: list, budgets: bool) -> list[Problem]:
    """`tasks_file` exists; else the episode budget fits the tasks it scores."""
    from pathlib import Path

    p = ps.params
    if p.get("tasks_file") and not Path(p["tasks_file"]).is_file():
        return [("tasks_file", f"file '{p['tasks_file']}' does not exist")]
    if not budgets:
        return []
    from kit.envs import load_domain
    from kit.rollout.loop import step_budget_warning

    if p.get("tasks_file"):
        from kit.eval.results import load_tasks_file

        tasks = load_tasks_file(p["tasks_file"])
    else:
        try:
            tasks = load_domain(p["domain"]).tasks(p.get("split"))
        except Exception:  # an unknown split is reported where the stage runs
            return []
    why = step_budget_warning(tasks, p["max_messages"])
    return [("max_messages", why)] if why else []


def report_entry(common: dict, out: Outputs, stage: str) -> dict:
    import pandas as pd

    from kit.report.run_data import agent_provenance

    ev = out.eval_json()
    meta = ev.get("meta") or {}
    return {**common, "passk": {int(k): v for k, v in (ev.get("passk") or {}).items()},
            "meta": meta, "episodes": pd.DataFrame(ev.get("episodes") or []),
            "provenance": agent_provenance(meta.get("model") or out.model)}


def report_sections(data: dict, ctx: SectionContext) -> list:
    """pass^k per evaluation, paired differences, and what the agents of paired arms did differently."""
    from kit.report.build import _short, eval_section
    from kit.report.paired import changes_section, paired_section

    return [eval_section(data, ctx.out, ctx.figures, ctx.bootstrap, ctx.ci, ctx.root),
            paired_section(data, ctx.bootstrap, ctx.ci, across_runs=ctx.across_runs,
                           short=lambda s: _short(s, ctx.root)),
            changes_section(data, across_runs=ctx.across_runs)]


CONTRACT = Contract(
    names=("evaluate",), produces=Produces.EVAL,
    references={"model": Reference(Produces.MODEL, wire_from=("grpo", "sft_agent"), fallback=BASE_MODEL),
                "user_model": Reference(Produces.MODEL, fallback=BASE_MODEL)},
    check=check, report=ReportPart(bucket="evals", read=report_entry, sections=report_sections, rank=0, per_arm=True))
