"""Every metric's one name, and its label in the report.

The engine (rounds.csv), GRPO (metrics.jsonl), evaluation (eval.json `meta`), W&B and the report all
spell a metric with the constant below; nothing else writes the string. W&B keys are `<section>/<name>`
(`wandb_keys`), so a W&B panel and a file column carry the same name behind the stage's prefix, and the
report's human label comes from `LABELS`.
"""

from __future__ import annotations

# --- episodes: engine rollouts, GRPO rollouts, evaluation ------------------------------------------
PASS_RATE = "pass_rate"                      # fraction of episodes with reward 1
USER_DEVIATION_RATE = "user_deviation_rate"  # episodes where the user simulator left its scenario
REQUEST_STATED_RATE = "request_stated_rate"  # the user's first message states the request
PROPER_END_RATE = "proper_end_rate"          # episodes ended by a stop, not by the message budget
PASS1_CI95 = "pass1_ci95"                    # 95% bootstrap interval of pass^1 over tasks
PASS1_BY_SHAPE = "pass1_by_shape"            # {shape: {"pass^1", "tasks"}}: kit.data.task_labels
PASS1_BY_PHRASING = "pass1_by_phrasing"      # {phrasing: {"pass^1", "tasks"}}: template / free_form / tau2
INFRA_FAILURES = "infra_failures"            # evaluation: episodes a server failed, left out of every number


def pass_k(k: int) -> str:
    """pass^k: all k trials of a task pass (tau2's pass_hat_k, averaged over tasks)."""
    return f"pass^{k}"


# --- GRPO step (metrics.jsonl) ------------------------------------------------------------------------
REWARD_MEAN = "reward/mean"
REWARD_STD = "reward/std"
FILTERED_FRAC = "groups/filtered_frac"
GROUPS_KEPT = "groups/kept"
GROUPS_RESAMPLES = "groups/resamples"
LOSS = "loss"
CLIP_FRAC = "clip_frac"
GRAD_NORM = "grad_norm"
STEP_TIME = "time/step_s"
PEAK_RSS = "mem/peak_rss_gib"                # the trainer process's peak resident memory so far
MICRO_BATCHES = "train/micro_batches"        # forward/backward passes of the update
INFRA_FAILED = "episodes/infra_failed"       # episodes a server failed (5xx, garbled turn): left out, unscored
FROM_PROBE = "episodes/from_probe"           # episodes of a step's groups its probe had rolled out (probe_train)
EPISODES_TOTAL = "episodes/total"            # rollout episodes scored by every step so far (GRPOConfig.episode_budget)
# failed episodes kit.checkers.attribution puts on the user simulator (GRPOConfig.user_faults)
USER_FAULTS = "episodes/user_faults"                  # found, whether masked or kept
USER_FAULT_MASKED = "episodes/user_fault_masked"      # left out of their group's advantage (user_faults "mask")
USER_FAULT_RESAMPLED = "episodes/user_fault_resampled"  # replacement episodes rolled out for masked ones


def user_fault_key(rule: str) -> str:
    """The step metric counting the user-fault episodes one attribution rule found (USER_RULES there)."""
    return f"episodes/user_fault/{rule}"


# --- SFT --------------------------------------------------------------------------------------------
SFT_LOSS = "loss"

# --- engine rounds (units.jsonl, rounds.csv): SFT samples made, per sample file ----------------------
# Column names after the files the samples go to (sft_agent.jsonl, sft_user.jsonl), not references to
# the SFT stages that read them (tests/test_stage_contract.py allows them here).
AGENT_SAMPLES = "sft_agent"
USER_SAMPLES = "sft_user"

# --- W&B names (tracking's namespace, not stage references; allowed here by tests/test_stage_contract.py)
WANDB_GRPO = "grpo"               # GRPO's section: grpo/<metric>
WANDB_ENGINE_JOB = "synthesize"   # the engine's W&B run: its job type and name prefix

LABELS = {
    PASS_RATE: "pass rate",
    USER_DEVIATION_RATE: "user deviation rate",
    REQUEST_STATED_RATE: "request stated",
    PROPER_END_RATE: "proper end",
    INFRA_FAILURES: "episodes a server failed (not scored)",
    INFRA_FAILED: "episodes a server failed",
    USER_FAULTS: "user-fault episodes",
    USER_FAULT_MASKED: "user faults masked",
    USER_FAULT_RESAMPLED: "user-fault replacements",
    PASS1_CI95: "pass^1 95% CI",
    PASS1_BY_SHAPE: "pass^1 by task shape",
    PASS1_BY_PHRASING: "pass^1 by phrasing",
    REWARD_MEAN: "reward (mean)",
    FILTERED_FRAC: "filtered frac",
    PEAK_RSS: "peak RSS GiB",
}


def label(name: str) -> str:
    """The report's column label of a metric (its name where none is set)."""
    return LABELS.get(name, name)


def wandb_keys(section: str, metrics: dict) -> dict:
    """The numbers of `metrics` under `<section>/<name>` (booleans and text dropped): what W&B logs."""
    return {f"{section}/{k}": v for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def start_wandb(project: str, group: str, job_type: str, name: str, folder: str, config: dict):
    """The one place a W&B run starts: offline unless WANDB_MODE says otherwise, silent, in `folder`.
    Returns (run, None), or (None, why) when W&B is disabled, missing or fails: tracking never costs a run."""
    import os

    if os.environ.get("WANDB_MODE") == "disabled":
        return None, "WANDB_MODE=disabled"
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    try:
        import wandb

        return wandb.init(project=project, group=group, job_type=job_type, name=name, dir=folder, config=config,
                          reinit="finish_previous"), None
    except Exception as e:  # noqa: BLE001 -- any failure of an optional tracker
        return None, f"{type(e).__name__}: {e}"


def peak_rss_gib() -> float | None:
    """Peak resident memory of this process so far (a stage's kernel, a trainer), GiB (None where unknown)."""
    try:
        import resource

        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        return round(kib / 2**20, 2)
    except (ImportError, OSError):  # pragma: no cover -- not Linux
        return None
