"""One GRPO run's settings (kit.train.grpo.GRPOTrainer), in a module of its own so that reading
them (the `grpo` stage's Config, recipe validation) does not import torch.

`GRPOKnobs` are the settings a recipe sets: each declared once here (default, bounds,
description); the `grpo` stage's Config *is* these fields (it subclasses them), so a knob goes
from YAML to the trainer under one name with no copy in between. `GRPOConfig` adds what the stage
resolves itself (the user simulator's spec and tag, templates, seed, printing).
"""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import ConfigDict, Field, model_validator

from kit.enums import TextEnum
from kit.train.lora import LoRAKnobs


class SkipReason(TextEnum):
    """Why a GRPO step applied no update (metrics.jsonl `skip_reason`, the report's skip counts)."""

    ALL_GROUPS_FILTERED = "all_groups_filtered"        # every group's rewards were equal (dynamic filtering)
    NO_TRAINABLE_TOKENS = "no_trainable_tokens"        # kept groups, but no assistant token to train
    FEWER_ROWS_THAN_MINIBATCHES = "fewer_rows_than_minibatches"
    SKIPPED_ON_ANOTHER_PROCESS = "skipped_on_another_process"  # under `launch:`, a peer process had to skip
    NAN_LOSS = "nan_loss"                              # a non-finite loss: that minibatch's gradients dropped
    NAN_GRAD_NORM = "nan_grad_norm"


class GRPOKnobs(LoRAKnobs):
    """GRPO's recipe knobs. Defaults are the paper's public dense-model config where it has one. The
    LoRA and gradient-checkpointing knobs are kit.train.lora.LoRAKnobs' (shared with SFT)."""

    model_config = ConfigDict(extra="forbid")

    train_steps: int = Field(default=100, ge=0, description="Optimizer steps `train()` runs.")
    episode_budget: Optional[int] = Field(default=None, ge=1, description="At most this many rollout episodes "
                                          "scored by the steps (resamples included, and a probe's episodes a step "
                                          "trains on (probe_train), once; probes and learning-curve episodes "
                                          "otherwise not), "
                                          "even before train_steps: a step starts only while its G x B episodes "
                                          "fit, and its resamples stop where the budget does, so no arm overshoots "
                                          "it (arms of different batch shapes or filtering compared at the same "
                                          "rollout cost). None: train_steps alone.")
    group_size: int = Field(default=8, ge=2, description="G: episodes per task; the group their advantages are "
                            "normalised in (paper: 8-16).")
    tasks_per_step: int = Field(default=16, ge=1, description="B: groups kept per optimizer step (paper: 16).")
    lr: float = Field(default=1.7e-5, gt=0, description="AdamW learning rate, constant (paper: 1.7e-5 dense, "
                      "5e-6 MoE; tiny CPU tests use more).")
    clip_eps: float = Field(default=0.4, gt=0, description="PPO clip range: ratios outside [1 - eps, 1 + eps] "
                            "stop the gradient (paper: 0.4).")
    kl_coef: float = Field(default=0.0, ge=0, description="Weight of a k3 KL penalty to the initial policy; "
                           "0 = no reference model (paper).")
    error_penalty: float = Field(default=0.0, ge=0, le=1, description="Subtracted from an episode's checker reward "
                                 "per failed tool call (floor 0) for filtering and advantages; the reward metrics "
                                 "stay the checker's. A failed call of a made-up id leaves the database as it was, "
                                 "so without it a success sprayed with failed calls scores as a clean one.")
    filter_mode: Literal["all_equal", "all_success", "off"] = Field(
        default="all_equal", description="Dynamic filtering: 'all_equal' (paper), 'all_success' (public AReaL) "
        "or 'off'.")
    adv_scope: Literal["group", "batch"] = Field(default="group", description="Advantage normalisation: "
                                                 "'group' (paper) or 'batch' (public AReaL).")
    resample_budget: int = Field(default=16, ge=0, description="Extra tasks a step may draw to replace filtered "
                                 "groups; then it trains on what it kept. Counted in episodes, G per task: a "
                                 "replacement episode of a masked user fault (user_faults) spends 1/G of a task.")
    user_faults: Literal["mask", "keep"] = Field(
        default="mask", description="A failed episode that failure attribution (kit/checkers/attribution.py, rules "
        "only) puts on the user simulator: 'mask' leaves it out of its group's advantage (counted and reported, "
        "never scored 0 against the agent) and rolls out a replacement episode of the same task while the "
        "resample budget lasts; 'keep' trains on it as any failure (the paper; still counted). A passed episode "
        "is never masked. Needs the trainer's domain (τ² tasks); without one nothing is attributed.")
    minibatches: int = Field(default=1, ge=1, description="Optimizer steps per batch (PPO minibatches); > 1 "
                             "computes old log-probs once up front.")
    micro_batch_size: int = Field(default=4, ge=1, description="Rows per forward/backward; gradients accumulate "
                                  "over a minibatch's micro-batches.")
    micro_batch_tokens: Optional[int] = Field(default=None, ge=16, description="Most padded tokens (rows x "
                                              "longest row, less the prefix every row of the minibatch shares: it "
                                              "runs once per minibatch, kit.train.sequences.PrefixStates) per "
                                              "forward/backward: a micro-batch takes up to micro_batch_size rows "
                                              "and stops before this budget (a longer row runs alone). Bounds the "
                                              "update's activation memory, which grows with the tokens of a "
                                              "micro-batch (plus the shared prefix's, held over the minibatch); "
                                              "None: rows only.")
    temperature: float = Field(default=1.0, ge=0, description="Rollout sampling temperature (paper: 1.0; "
                               "evaluation uses 0.6).")
    top_p: float = Field(default=1.0, gt=0, le=1, description="Rollout nucleus sampling.")
    top_k: int = Field(default=0, ge=0, description="Rollout top-k; 0 = none. The loss scores sampled tokens "
                       "under the full softmax, so rollouts sample from it too (a cut makes them off-policy).")
    max_new_tokens: int = Field(default=192, ge=1, description="Most tokens per assistant turn.")
    max_messages: int = Field(default=30, ge=2, description="Messages per episode before termination max_steps "
                              "(paper: up to 50 orchestrator steps).")
    max_errors: int = Field(default=10, ge=1, description="Failed tool calls before too_many_errors termination.")
    max_seq_tokens: Optional[int] = Field(default=None, ge=16, description="Rows (prompt + completion) longer "
                                          "than this are left out of the update and counted.")
    pack_turns: bool = Field(default=True, description="Pack an episode's turns into one row where the next "
                             "prompt extends the last (exact context; the prompt runs once, not once per turn). "
                             "Token loss_norm only: under 'sequence' a row is one turn.")
    loss_norm: Literal["token", "sequence"] = Field(default="token", description="'token': over all generated "
                                                    "tokens of the batch (paper); 'sequence': per row, then mean.")
    max_grad_norm: float = Field(default=1.0, gt=0, description="Gradient clipping by global norm.")
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW weight decay.")
    user_temperature: float = Field(default=1.0, ge=0, description="User simulator sampling temperature.")
    user_max_new_tokens: int = Field(default=96, ge=1, description="Most tokens per user turn.")
    probe_k: int = Field(default=0, ge=0, description="Pass-rate curriculum (kit/train/grpo_curriculum.py): "
                         "episodes per RL task the current policy runs before the first step (and every "
                         "`probe_every` steps); steps draw only from tasks whose pass rate lies in [band_min, "
                         "band_max]. 0 = off (every task is drawn). A public τ² GRPO run probes 16.")
    probe_every: int = Field(default=0, ge=0, description="Steps between probes; 0 = only before the first step.")
    band_min: float = Field(default=0.05, ge=0, le=1, description="Lowest probe pass rate a task may have to be "
                            "drawn (default: drop tasks never solved).")
    band_max: float = Field(default=0.8, ge=0, le=1, description="Highest probe pass rate a task may have to be "
                            "drawn (default: drop tasks solved 13+ times of 16).")
    band_balance: Literal["task", "pattern", "step"] = Field(
        default="task", description="How steps draw from the band: 'task' (every band task once per pass), "
        "'pattern' (every gold tool pattern, e.g. get_users > create_task, as often as the most common one: a "
        "band of four create tasks and one update task trains updates as often as creates) or 'step' (as "
        "'pattern', and a step's tasks_per_step tasks go round the patterns, so that one batch holds different "
        "patterns whose advantages must tell the requests apart).")
    probe_batch: int = Field(default=32, ge=1, description="Episodes rolled out together by a probe or a "
                             "learning-curve evaluation.")
    probe_train: bool = Field(default=True, description="A probe's episodes of the band's tasks train the steps "
                              "after it (kit.train.grpo_groups.ProbeGroups): a task the next `probe_train_steps` "
                              "steps draw takes its probe episodes as its group (min(probe_k, group_size) of them, "
                              "topped up with fresh ones to group_size) instead of rolling them out again. Off: "
                              "the probe only picks the band. A probe read from another stage's memo has no "
                              "episodes here: steps roll out fresh (metric curriculum/probe_memo_no_episodes).")
    probe_train_steps: int = Field(default=1, ge=1, description="How many steps after a probe its episodes may "
                                   "train, each band task's at most once, in the order the steps draw them. 1: "
                                   "only the step right after it, on-policy (the probe sampled the very policy it "
                                   "trains). More reuses more of the probe but trains step s after it on episodes "
                                   "of a policy s updates old (a rollout server's log-probs correct the PPO ratio "
                                   "for it; local sampling does not: ratio 1).")
    eval_every: int = Field(default=0, ge=0, description="Learning curve (kit/train/grpo_curve.py): pass^1 of the "
                            "current policy on `eval_split` before the first step, every this many steps and "
                            "after the last; the best and the last policy are both saved. 0 = off.")
    eval_split: str = Field(default="heldout_val", description="The learning curve's tasks: a split neither "
                            "trained on nor the final test set (mock: 'heldout_val').")
    eval_limit: Optional[int] = Field(default=None, ge=1, description="First N tasks of `eval_split` only.")
    eval_trials: int = Field(default=1, ge=1, description="Learning-curve episodes per task.")
    eval_temperature: float = Field(default=0.0, ge=0, description="Learning-curve sampling temperature (agent "
                                    "and user); 0 = greedy, which with one trial gives the least noisy curve.")
    rollout: Literal["local", "server"] = Field(default="local", description="Where the policy samples: 'local' "
                                                "(the training process, transformers) or 'server' (an "
                                                "OpenAI-compatible server at `rollout_server`, weights pushed "
                                                "after each step; kit/train/rollout_server.py).")
    rollout_server: Optional[str] = Field(default=None, description="rollout 'server': the server's URL with /v1 "
                                          "(vLLM: `make vllm-serve`), serving the policy's starting weights.")
    rollout_server_model: Optional[str] = Field(default=None, description="The starting policy's name on the "
                                                "server (None: the first model it lists).")
    weight_sync: Literal["auto", "lora_adapter", "folder"] = Field(
        default="auto", description="How the server gets the new weights after each step: 'lora_adapter' (vLLM "
        "POST /v1/load_lora_adapter; needs lora), 'folder' (a full HF folder per step, requested by its path: "
        "servers that load models by name, like `transformers serve`); 'auto': lora_adapter with lora, else folder.")
    server_token_ids: bool = Field(default=True, description="Ask the server for the sampled token ids and "
                                   "log-probs (vLLM); False for servers without them (`transformers serve`): the "
                                   "completion is re-tokenized, counted in train/retokenized_turns.")
    save_every: int = Field(default=10, ge=0, description="Write a checkpoint (trainable weights, optimizer, "
                            "task draws, RNG streams, step) every this many steps into the stage's "
                            "checkpoints/; a rerun after a crash resumes from the newest one and ends with the "
                            "weights an uninterrupted run has (kit/train/checkpoints.py). 0 = never.")
    keep_checkpoints: int = Field(default=1, ge=1, description="Checkpoints kept (the newest); more only help "
                                  "when a disk corrupts the newest one. Removed once the stage saved its model.")

    @model_validator(mode="after")
    def _band(self):
        if self.band_min > self.band_max:
            raise ValueError(f"band_min ({self.band_min}) is above band_max ({self.band_max}): the curriculum's "
                             "band would be empty; the band is [band_min, band_max]")
        if self.episode_budget is not None and self.episode_budget < self.group_size * self.tasks_per_step:
            raise ValueError(f"episode_budget ({self.episode_budget}) is below one step's group_size x tasks_per_step "
                             f"({self.group_size} x {self.tasks_per_step} = {self.group_size * self.tasks_per_step} "
                             "episodes): no step would run; raise episode_budget or shrink the batch")
        if self.eval_trials > 1 and self.eval_temperature == 0:
            raise ValueError("eval_trials > 1 at eval_temperature 0 repeats one greedy episode; set "
                             "eval_temperature (e.g. 0.6) or eval_trials: 1")
        return self


# settings a run may change and still resume from another run's checkpoint (every other field of
# GRPOConfig must be the same: GRPOTrainer.resume refuses a checkpoint written with other values)
# (micro_batch_size / micro_batch_tokens cut the same batch into other micro-batches: the same
# gradient, token-normalised over the whole batch, up to float summation order)
RESUMABLE_CHANGES = ("train_steps", "episode_budget", "save_every", "keep_checkpoints", "print_metrics", "sync_dir", "rollout_server",
                     "micro_batch_size", "micro_batch_tokens")


class GRPOConfig(GRPOKnobs):
    """One GRPO run: the knobs plus what the caller resolves."""

    user_model: str = Field(default="embedded", description="User simulator backend spec (kit.llm.make_backend): "
                            "the raw base model, or the SFT user's folder (paper: RL against the fine-tuned "
                            "user). Ignored when `user` is passed to the trainer.")
    user_tag: str = Field(default="raw", description="The user model's label in metrics and reports: 'raw' or "
                          "'fine-tuned'.")
    templates_dir: Optional[str] = Field(default=None, description="Prompt templates for the rollouts "
                                         "(kit/rollout/templates by default).")
    seed: int = Field(default=0, description="Seeds task order and rollout sampling.")
    print_metrics: bool = Field(default=True, description="Print one line per step when no W&B run is given.")
    sync_dir: Optional[str] = Field(default=None, description="rollout 'server': where each step's weights or "
                                    "adapter are written for the server to load (a folder it can read).")
