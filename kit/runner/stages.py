"""The stages a recipe can name, and the parameters each accepts (validated before anything runs).

One notebook per stage lives in notebooks/<stage>.ipynb; its `parameters` cell lists the same
fields as the stage's model here (tests/test_notebooks.py checks that they agree). Every model
below forbids unknown fields, so a misspelt parameter is an error, never a silent default.

Fields the runner sets itself (RUNNER_FIELDS: where outputs go, the W&B group, ...) are not
settable from a recipe.

A parameter that names another stage's output is written `@<stage id>`:
    model: "@sft_agent"        # that stage's model folder (sft_user, sft_agent, grpo)
    data: "@synthesize"        # that stage's run folder (synthesize)
Left unset (null), such a parameter is wired to the latest earlier stage that produces it (see
`AUTO_WIRING`); the resolved value is written to the run manifest.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

# Set by the runner for every stage; a recipe may not set them.
RUNNER_FIELDS = ("run_id", "stage_id", "arm", "out_dir", "run_dir", "wandb_group", "fingerprint")


class StageParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int = Field(default=0, description="Seed of everything random in the stage.")
    threads: Optional[int] = Field(default=None, ge=1, description="torch CPU threads (None: torch's default).")


class ModelStage(StageParams):
    domain: str = Field(description="τ² domain (mock, airline, retail, telecom) or a registered kit domain.")
    backend: Literal["hf", "vllm"] = Field(default="hf", description="How a model *folder* is served for "
                                           "sampling: 'hf' (transformers) or 'vllm' (GPU offline engine).")


class SynthesizeParams(ModelStage):
    """The data engine (kit.engine.EngineConfig; the same fields, minus where outputs go)."""

    rounds: int = Field(default=3, ge=1)
    num_plans: int = Field(default=4, ge=1)
    tasks_per_plan: int = Field(default=2, ge=1)
    group_size: int = Field(default=2, ge=0)
    validation: bool = True
    evolution: bool = True
    llm_judge: bool = True
    judge_threshold: float = Field(default=0.7, ge=0.0, le=1.0)
    model: Optional[str] = Field(default=None, description="Engine roles' backend (None: the recipe's base_model).")
    agent_model: Optional[str] = None
    user_model: Optional[str] = None
    sft_tokenizer: Optional[str] = None
    max_steps: int = Field(default=16, ge=2)
    max_new_tokens: int = Field(default=96, ge=8)
    temperature: float = Field(default=0.8, ge=0.0)
    explore_steps: int = Field(default=2, ge=0)
    gold_dialogues: bool = True
    wandb: bool = True


class SFTParams(ModelStage):
    """SFT of the user model (sft_user) or the agent (sft_agent) on the engine's samples."""

    data: Optional[str] = Field(default=None, description="'@<synthesize stage>', a folder with sft_*.jsonl, "
                                "or 'gold' (the domain's gold dialogues only). None: the latest synthesize stage.")
    model: Optional[str] = Field(default=None, description="HF folder (or 'embedded') to start from. "
                                 "None: the recipe's base_model.")
    fallback: Literal["gold", "fail"] = Field(default="gold", description="No engine samples: train on the "
                                              "domain's gold dialogues (said loudly) or fail the stage.")
    gold_split: Optional[str] = Field(default="train", description="Split whose gold dialogues the fallback "
                                      "uses; a domain without it (mock) uses its default set (flagged).")
    gold_limit: Optional[int] = Field(default=None, ge=1)
    max_samples: Optional[int] = Field(default=None, ge=1, description="Use at most this many samples.")
    lora: bool = False
    lora_r: int = Field(default=16, ge=1)
    lora_alpha: int = Field(default=32, ge=1)
    lr: float = Field(default=2e-5, gt=0)
    lr_scheduler: str = "linear"
    warmup_steps: int = Field(default=0, ge=0)
    epochs: float = Field(default=1.0, gt=0)
    max_steps: int = Field(default=-1, description="> 0 overrides epochs.")
    batch_size: int = Field(default=4, ge=1)
    grad_accum: int = Field(default=1, ge=1)
    max_seq_len: int = Field(default=4096, ge=16)
    gradient_checkpointing: bool = False
    dtype: str = "auto"
    use_unsloth: Literal["auto", True, False] = "auto"


class GRPOParams(ModelStage):
    """GRPO of the agent against a user simulator, reward = the task's checker."""

    model: Optional[str] = Field(default=None, description="Policy to train: '@<sft_agent>', an HF folder or "
                                 "'embedded'. None: the latest sft_agent stage, else the base_model.")
    user_model: Optional[str] = Field(default=None, description="User simulator. None: the latest sft_user "
                                      "stage (the paper's fine-tuned user), else the base_model (raw user).")
    user_tag: Optional[str] = Field(default=None, description="'fine-tuned' or 'raw' (None: inferred).")
    tasks: Optional[str] = Field(default=None, description="'@<synthesize>' (its rl_tasks.jsonl), a JSONL file of "
                                 "checked tasks, or 'split:<name>'. None: the latest synthesize stage.")
    fallback_split: Optional[str] = Field(default="train", description="No synthesized tasks: train on this "
                                          "split of the domain (said loudly); the default set when it lacks it.")
    steps: int = Field(default=10, ge=0)
    group_size: int = Field(default=8, ge=2)
    tasks_per_step: int = Field(default=16, ge=1)
    lr: float = Field(default=1.7e-5, gt=0)
    clip_eps: float = Field(default=0.4, gt=0)
    kl_coef: float = Field(default=0.0, ge=0)
    filter_mode: Literal["all_equal", "all_success", "off"] = "all_equal"
    adv_scope: Literal["group", "batch"] = "group"
    resample_budget: int = Field(default=16, ge=0)
    minibatches: int = Field(default=1, ge=1)
    micro_batch_size: int = Field(default=4, ge=1)
    temperature: float = Field(default=1.0, ge=0)
    max_new_tokens: int = Field(default=192, ge=1)
    max_episode_steps: int = Field(default=30, ge=2)
    user_temperature: float = Field(default=1.0, ge=0)
    user_max_new_tokens: int = Field(default=96, ge=1)
    max_seq_tokens: Optional[int] = Field(default=None, ge=16)
    dtype: str = "auto"


class EvaluateParams(ModelStage):
    """pass^k of an agent on a τ² split or task file (kit.eval)."""

    model: Optional[str] = Field(default=None, description="Agent. None: the latest grpo / sft_agent stage, "
                                 "else the base_model.")
    user_model: Optional[str] = Field(default=None, description="User simulator at evaluation time (None: the "
                                      "base_model, the same referee for every arm).")
    label: Optional[str] = Field(default=None, description="Name of this evaluation in the report.")
    split: Optional[str] = "default"
    tasks_file: Optional[str] = None
    trials: int = Field(default=4, ge=1)
    temperature: float = Field(default=0.0, ge=0)
    user_temperature: float = Field(default=0.0, ge=0)
    max_steps: int = Field(default=50, ge=2, description="Messages per episode (the paper: up to 50 orchestrator steps; tau2: 100).")
    max_new_tokens: int = Field(default=192, ge=1)
    batch_size: int = Field(default=16, ge=1)
    limit: Optional[int] = Field(default=None, ge=1)
    cross_check: bool = False
    training_data: Optional[list[str]] = Field(default=None, description="What the agent trained on, checked "
                                               "against the evaluation tasks' gold actions (kit.eval.leak): files, "
                                               "folders or 'split:<name>'. None: every synthesize / sft_user / "
                                               "sft_agent / grpo stage of this run that ran before this one.")
    allow_overlap: bool = Field(default=False, description="Evaluate even when evaluation tasks overlap the "
                                "training data (the report still shows the overlap); off: the stage fails.")


class ReportParams(StageParams):
    """The run's report: reports/<run-id>/index.html and its figures."""

    title: Optional[str] = None
    report_dir: Optional[str] = Field(default=None, description="Default: reports/<run-id> beside runs/.")
    ci: float = Field(default=0.95, gt=0, lt=1)
    bootstrap: int = Field(default=2000, ge=100)


STAGES: dict[str, type[StageParams]] = {
    "synthesize": SynthesizeParams,
    "sft_user": SFTParams,
    "sft_agent": SFTParams,
    "grpo": GRPOParams,
    "evaluate": EvaluateParams,
    "report": ReportParams,
}

# What a stage produces, for `@id` references: a model folder, a data folder, or neither.
PRODUCES: dict[str, Optional[str]] = {
    "synthesize": "data", "sft_user": "model", "sft_agent": "model", "grpo": "model",
    "evaluate": "eval", "report": None,
}

# Which parameters take references, and to what kind of output.
REFERENCE_FIELDS: dict[str, dict[str, str]] = {
    "synthesize": {"model": "model", "agent_model": "model", "user_model": "model"},
    "sft_user": {"data": "data", "model": "model"},
    "sft_agent": {"data": "data", "model": "model"},
    "grpo": {"model": "model", "user_model": "model", "tasks": "data"},
    "evaluate": {"model": "model", "user_model": "model"},
    "report": {},
}

# Unset reference fields: the latest earlier stage of these kinds, else the fallback.
AUTO_WIRING: dict[str, dict[str, tuple[tuple[str, ...], Optional[str]]]] = {
    "synthesize": {"model": ((), "base_model")},
    "sft_user": {"data": (("synthesize",), "gold"), "model": ((), "base_model")},
    "sft_agent": {"data": (("synthesize",), "gold"), "model": ((), "base_model")},
    "grpo": {"model": (("sft_agent",), "base_model"), "user_model": (("sft_user",), "base_model"),
             "tasks": (("synthesize",), None)},
    "evaluate": {"model": (("grpo", "sft_agent"), "base_model"), "user_model": ((), "base_model")},
    "report": {},
}


def stage_fields(stage: str) -> dict[str, Any]:
    return STAGES[stage].model_fields


def all_param_names() -> set[str]:
    return {name for model in STAGES.values() for name in model.model_fields}
