"""The engine's settings: pydantic models, so a bad field is named before anything runs.

`EngineKnobs` are what a recipe sets, each declared once (the `synthesize` stage's Config inherits
them); `EngineConfig` adds what the caller resolves (domain, run folder, backends, W&B wiring)."""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field


class EngineKnobs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rounds: int = Field(default=3, ge=1, description="K rounds of synthesis → rollouts → reflection.")
    num_plans: int = Field(default=4, ge=1, description="Plan pairs per round (the paper's ablation: 4 vs 64).")
    tasks_per_plan: int = Field(default=2, ge=1, description="Task proposals per plan per round.")
    group_size: int = Field(default=2, ge=0, description="G rollouts per accepted task (0: no rollouts).")
    validation: bool = Field(default=True, description="off = the task checks still run and are counted (rounds.csv "
                             "`unvalidated`: accepted tasks a check would have rejected) but reject nothing, and "
                             "rollouts are not filtered (`unvalidated_samples`: agent SFT samples from rollouts that "
                             "failed their checker); the held-out guard and the LLM judge apply either way.")
    raw_synthesis: bool = Field(default=False, description="The synthesizer keeps what the model wrote: no world "
                                "candidates (every write argument chosen or written by the model), no re-choice of a "
                                "write that errors or changes nothing, a flagged free-text value kept, the model's "
                                "scenario text kept where the fidelity gate finds a problem. Defects for validation "
                                "to catch at the task level (the no_validation ablation's first design ran both arms with it; "
                                "docs/ablations.md).")
    evolution: bool = Field(default=True, description="off = plans stay as the meta-planner wrote them.")
    llm_judge: bool = Field(default=True, description="The validator's model judgment after the executable checks.")
    judge_threshold: float = Field(default=0.7, ge=0.0, le=1.0, description="Reject when the judge's P(no) exceeds it.")
    sft_tokenizer: Optional[str] = Field(default=None, description="HF folder (or 'embedded') whose chat "
                                         "template renders SFT samples (default: the agent model's; an endpoint "
                                         "has none: name the served model's folder, else the embedded model's "
                                         "template is used).")
    concurrency: int = Field(default=8, ge=1, description="Units (plans) in flight at once: concurrent requests "
                             "to endpoints; with an in-process model, worker threads whose model calls run "
                             "as one batch (kit/llm/coalesce.py). 1: one unit after another.")
    max_messages: int = Field(default=16, ge=2, description="Messages per rollout episode.")
    max_new_tokens: int = Field(default=96, ge=8, description="Most tokens per agent turn in rollouts.")
    user_max_new_tokens: int = Field(default=96, ge=8, description="Most tokens per user turn in rollouts.")
    temperature: float = Field(default=0.8, ge=0.0, description="Rollout sampling temperature (agent and user).")
    explore_steps: int = Field(default=2, ge=0, description="Read calls the synthesizer makes before proposing.")
    max_repairs: int = Field(default=2, ge=0, description="Re-choices of a gold write that errors or changes nothing.")
    repair_scenario: bool = Field(default=True, description="Append known facts the model's prose dropped.")
    rl_share: float = Field(default=0.33, ge=0.0, le=1.0, description="Share of accepted tasks that go to the RL "
                            "pool (rl_tasks.jsonl: tasks + checkers for `grpo`) instead of the SFT pool "
                            "(sft_tasks.jsonl; their gold dialogues are the SFT data); the pools are disjoint "
                            "(kit/engine/pools.py). 0: every task is SFT data and GRPO falls back to a split.")
    pool_split: Literal["pattern", "hash"] = Field(
        default="pattern", description="How tasks are split into the pools: 'pattern' gives every gold tool pattern "
        "its share in both pools (at least one task each when it has two or more); 'hash' draws each solution "
        "by a hash alone (a rare pattern can miss the RL pool) (kit/engine/pools.py).")
    gold_dialogues: bool = Field(default=True, description="Also write each accepted task's gold-replay dialogue "
                                 "to sft_agent.jsonl (meta.source = 'gold').")
    choice_temperature: float = Field(default=1.0, ge=0.0, description="Softmax temperature of constrained choices.")
    max_similarity: float = Field(default=0.75, gt=0.0, le=1.0, description="Near-duplicate plan threshold.")
    max_lookup_share: float = Field(default=0.25, ge=0.0, le=1.0, description="Most read-only (lookup) plans the "
                                    "meta-planner writes, as a share of num_plans (rounded down): a tau2 agent is "
                                    "trained on writes under policy; 1: no cap.")
    device_fix_share: float = Field(default=0.25, ge=0.0, le=1.0, description="Plans whose task the customer "
                                    "fixes on their own phone (telecom's device faults: airplane mode, SIM, mobile "
                                    "data, roaming abroad, data saver, network mode), as a share of num_plans "
                                    "(rounded; a domain without device faults has none).")
    wandb: bool = Field(default=True, description="Log round metrics to W&B (offline unless WANDB_MODE says otherwise).")


class EngineConfig(EngineKnobs):
    domain: str = Field(description="tau2 domain (mock, airline, retail, telecom) or a registered kit domain.")
    out_dir: str = Field(description="Run folder; rerunning with the same folder resumes.")
    model: Any = Field(default="embedded", description="Backend spec of the engine's roles (kit.llm.make_backend).")
    agent_model: Any = Field(default=None, description="Assistant in rollouts (default: model).")
    user_model: Any = Field(default=None, description="User simulator in rollouts (default: model).")
    seed: int = 0
    templates_dir: Optional[str] = Field(default=None, description="Another set of engine prompt templates.")
    wandb_group: Optional[str] = None
    wandb_project: str = "kit"
