"""One GRPO run's settings (kit.train.grpo.GRPOTrainer), in a module of its own so that reading
them (the `grpo` stage's Config, recipe validation) does not import torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class GRPOConfig:
    """One GRPO run. Defaults are the paper's public dense-model config where it has one."""

    lr: float = 1.7e-5
    """AdamW learning rate, constant (paper: 1.7e-5 dense, 5e-6 MoE; tiny CPU tests use more)."""
    clip_eps: float = 0.4
    """PPO clip range: ratios outside [1 - eps, 1 + eps] stop the gradient (paper: 0.4)."""
    kl_coef: float = 0.0
    """Weight of a k3 KL penalty to the initial policy; 0 = no reference model (paper)."""
    group_size: int = 8
    """G: episodes per task; the group their advantages are normalised in (paper: 8-16)."""
    tasks_per_step: int = 16
    """B: groups kept per optimizer step (paper: 16 tasks per batch)."""
    filter_mode: str = "all_equal"
    """Dynamic filtering: "all_equal" (paper), "all_success" (public AReaL) or "off"."""
    adv_scope: str = "group"
    """Advantage normalisation: "group" (paper) or "batch" (public AReaL)."""
    resample_budget: int = 16
    """Extra tasks a step may draw to replace filtered groups; then it trains on what it kept."""
    minibatches: int = 1
    """Optimizer steps per batch (PPO minibatches); > 1 computes old log-probs once up front."""
    micro_batch_size: int = 4
    """Rows per forward/backward; gradients accumulate over a minibatch's micro-batches."""
    train_steps: int = 100
    """Training steps `train()` runs."""
    temperature: float = 1.0
    """Rollout sampling temperature (paper: 1.0; evaluation uses 0.6)."""
    top_p: float = 1.0
    """Rollout nucleus sampling."""
    top_k: int = 0
    """Rollout top-k; 0 = none. The loss scores sampled tokens under the full softmax, so rollouts
    sample from it too (a top-k cut would make them off-policy)."""
    max_new_tokens: int = 192
    """Most tokens per assistant turn."""
    max_messages: int = 30
    """Messages per episode before termination max_steps (paper: up to 50 orchestrator steps)."""
    max_errors: int = 10
    """Failed tool calls before too_many_errors termination."""
    max_seq_tokens: int | None = None
    """Rows (prompt + completion) longer than this are left out of the update and counted."""
    loss_norm: str = "token"
    """"token": over all generated tokens of the batch (paper); "sequence": per row, then mean."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    user_model: str = "embedded"
    """User simulator backend spec (kit.llm.make_backend): the raw base model, or the folder of
    the SFT user model (paper: RL against the fine-tuned user). Ignored when `user` is passed."""
    user_tag: str = "raw"
    """Label for the user model in metrics and reports: "raw" or "fine-tuned"."""
    user_temperature: float = 1.0
    """User simulator sampling temperature."""
    user_max_new_tokens: int = 96
    """Most tokens per user turn."""
    templates_dir: str | None = None
    """Prompt templates for the rollouts (kit/rollout/templates by default)."""
    seed: int = 0
    """Seeds task order and rollout sampling."""
    print_metrics: bool = True
    """Print one line per step when no W&B run is given."""

    def __post_init__(self) -> None:
        for name, low in (("group_size", 2), ("tasks_per_step", 1), ("minibatches", 1), ("micro_batch_size", 1),
                          ("max_new_tokens", 1), ("resample_budget", 0)):
            if getattr(self, name) < low:
                raise ValueError(f"{name} must be >= {low}, got {getattr(self, name)}")
        from kit.train.grpo_math import filter_groups, group_advantages

        filter_groups([], self.filter_mode)  # raise early on a bad mode name
        group_advantages([], scope=self.adv_scope)
