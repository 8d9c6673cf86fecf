"""Stage `synthesize`: the AReaL-SEA self-evolving data engine (kit/engine) on a τ² domain.

Per round: the meta-planner writes plan pairs, the synthesizer proposes tasks with gold actions in a
forked environment, the validator accepts or rejects them (with reasons), `group_size` rollouts per
accepted task are scored by the task's checker, failures are attributed to the task, the agent or
the user, and the reflector rewrites the plans for the next round. A rerun resumes at the first
unfinished unit.

Outputs (in the stage folder): tasks.jsonl (every accepted task), two disjoint pools of them
(`rl_share`, kit/engine/pools.py): rl_tasks.jsonl (tasks + checkers, for `grpo`) and sft_tasks.jsonl
(whose gold dialogues are sft_agent.jsonl / sft_user.jsonl, for the SFT stages), rounds.csv (yield per round, rejection
reasons, failure attribution), trajectories.jsonl, failures.jsonl.

Simplified against the paper: one model plays every engine role (a small local model by default),
the planner's and validator's judgments are constrained choices among code-built options where the
paper lets a large model write freely (kit/engine/choice.py says why).
"""

from __future__ import annotations

import os
from typing import Optional

from pydantic import Field

from kit.engine.config import EngineConfig, EngineKnobs
from kit.stages.base import ModelStageConfig, StageOutputs, count_lines, mechanism_kwargs
from kit.stages.contract import BASE_MODEL, Contract, Problem, Produces, Reference, ReportPart, SectionContext

PRODUCED = ("tasks.jsonl", "rl_tasks.jsonl", "sft_tasks.jsonl", "trajectories.jsonl", "sft_agent.jsonl", "sft_user.jsonl",
            "failures.jsonl")


class Config(ModelStageConfig, EngineKnobs):
    """The engine's backends; every engine knob is kit.engine.config.EngineKnobs' (declared there
    once, inherited here)."""

    model: Optional[str] = Field(default=None, description="Engine roles' backend (None: the recipe's base_model).")
    agent_model: Optional[str] = Field(default=None, description="Assistant in rollouts (None: model).")
    user_model: Optional[str] = Field(default=None, description="User simulator in rollouts (None: model).")


class Outputs(StageOutputs):
    accepted: int = Field(description="Tasks the validator accepted, all rounds.")
    sft_pool: int = Field(default=0, description="Accepted tasks in the SFT pool (their gold dialogues are SFT data).")
    rl_pool: int = Field(default=0, description="Accepted tasks in the RL pool (rl_tasks.jsonl), disjoint from it.")
    rounds: int = Field(description="Rounds run.")
    proposals: int = Field(description="Task proposals, all rounds.")
    lines: dict[str, int] = Field(description="Lines of each output file.")

    def rounds_table(self):
        """rounds.csv as a data frame: one row per round, the engine's round statistics."""
        import pandas as pd

        return pd.read_csv(self.files["rounds"])


def run(config: Config, st) -> Outputs:
    """Run the engine into the stage folder; warn when a later stage will have to fall back."""
    import pandas as pd

    from kit.engine import run_engine
    from kit.llm.spec import ModelSpec

    def spec(m):
        return None if m is None else str(ModelSpec.parse(m, folder_kind=config.backend))

    cfg = EngineConfig(**mechanism_kwargs(
        config, EngineConfig, out_dir=str(st.out_dir), model=spec(config.model or "embedded"),
        agent_model=spec(config.agent_model), user_model=spec(config.user_model),
        wandb=config.wandb and os.environ.get("WANDB_MODE") != "disabled", wandb_group=st.wandb_group))
    result = run_engine(cfg, progress=True)
    print(result.summary_line())
    lines = {name: count_lines(st.out_dir / name) for name in PRODUCED}
    if lines["rl_tasks.jsonl"] == 0 and config.rl_share > 0:  # rl_share 0 asks for no RL pool: nothing to warn of
        st.warn(f"the RL pool is empty ({result.accepted} accepted, rl_share {config.rl_share}): `grpo` will fall "
                "back to the domain's own tasks")
    for role in ("agent", "user"):
        if lines[f"sft_{role}.jsonl"] == 0:
            st.warn(f"the engine produced no {role} SFT samples: `sft_{role}` will fall back to gold dialogues")
    files = {"rounds": str(st.out_dir / "rounds.csv")}
    files.update({name.split(".")[0]: str(st.out_dir / name) for name, n in lines.items() if n})
    proposals = int(pd.read_csv(st.out_dir / "rounds.csv")["proposals"].sum())
    print(f"pools: {lines['sft_tasks.jsonl']} SFT tasks (gold dialogues), {lines['rl_tasks.jsonl']} RL tasks")
    return Outputs(files=files, accepted=result.accepted, sft_pool=lines["sft_tasks.jsonl"],
                   rl_pool=lines["rl_tasks.jsonl"], rounds=len(result.rounds), proposals=proposals, lines=lines)


def example_task(out_dir) -> str:
    """The first accepted task's scenario and gold actions, for a reader to look at."""
    import json
    from pathlib import Path

    f = Path(out_dir) / "tasks.jsonl"
    first = next((line for line in (f.read_text(encoding="utf-8").splitlines() if f.exists() else []) if line.strip()),
                 None)
    if first is None:
        return "no accepted task"
    task = json.loads(first)
    body = {"user_scenario": task.get("user_scenario"), "actions": (task.get("evaluation_criteria") or {}).get("actions")}
    return f"an accepted task: {task['id']}\n" + json.dumps(body, indent=1)[:3000]


# ----- the contract (kit/stages/contract.py) ------------------------------------------------------


def engine_max_actions(explore_steps: int) -> int:
    """Most gold actions an engine task can have: two writes (a multi_change plan) and the explored
    reads whose results they used (kit/engine/synthesize.py)."""
    return 2 + explore_steps


def engine_budget_problem(field_: str, budget: Optional[int], synth_params: dict) -> Optional[Problem]:
    """(field, message) when an episode budget of `budget` messages cannot fit a dialogue that scores
    (kit.rollout.loop.step_budget_warning) on the longest task an engine with `synth_params` can make."""
    from kit.rollout.loop import STEP_SLACK

    if budget is None:
        return None
    most = engine_max_actions(synth_params.get("explore_steps", 2))
    need = 3 + 2 * most
    if budget < need + STEP_SLACK:
        return (field_, f"{field_}={budget} is too tight for the engine's tasks: one with {most} gold actions "
                f"needs {need} messages and {STEP_SLACK} spare ones are advised; episodes cut by max_steps score 0")
    return None


def check(ps, plan: list, budgets: bool) -> list[Problem]:
    """The engine's own rollouts (group_size > 0) must fit its longest task; an agent sampled through a
    server or an endpoint has no tokenizer, so the chat template that renders the SFT samples is named."""
    p = ps.params
    problems = []
    problem = engine_budget_problem("max_messages", p.get("max_messages") if p.get("group_size") else None, p) \
        if budgets else None
    if problem:
        problems.append(problem)
    agent = str(p.get("agent_model") or p.get("model") or "")
    if agent.startswith(("server:", "openai:")) and not p.get("sft_tokenizer"):
        problems.append(("sft_tokenizer", f"the agent is sampled through {agent}, which has no tokenizer here: name "
                         "the served model's folder (e.g. sft_tokenizer: ${KIT_AGENT_MODEL}, or 'embedded'), whose "
                         "chat template renders the SFT samples; without it they would be rendered with the "
                         "embedded model's"))
    return problems


def report_entry(common: dict, out: Outputs, stage: str) -> Optional[dict]:
    return {**common, "rounds": out.rounds_table()} if "rounds" in out.files else None


def report_sections(data: dict, ctx: SectionContext) -> list:
    from kit.report.build import engine_section

    return [engine_section(data, ctx.out, ctx.figures)]


CONTRACT = Contract(
    names=("synthesize",), produces=Produces.DATA, training_data=True,
    references={"model": Reference(Produces.MODEL, fallback=BASE_MODEL), "agent_model": Reference(Produces.MODEL),
                "user_model": Reference(Produces.MODEL)},
    check=check, report=ReportPart(bucket="engine", read=report_entry, sections=report_sections, rank=1))
