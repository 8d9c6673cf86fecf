"""The arithmetic of GRPO, as pure functions you can check by hand.

    adv = group_advantages([[1, 0, 0, 1], [1, 1, 1, 1]])   # [[1, -1, -1, 1], [0, 0, 0, 0]] (to ~1e-6)
    keep = filter_groups([[1, 0, 0, 1], [1, 1, 1, 1]])     # [True, False]
    ids, mask = assistant_token_mask([("prompt", [1, 2]), ("completion", [3, 4])])  # mask [0, 0, 1, 1]
    loss, stats = ppo_clip_loss(logp_new, logp_old, adv, mask, clip_eps=0.4)

Choices (PAPER.md, "The RL recipe"):
- Advantages use the *population* std (divide by G, numpy's default), as the paper writes
  (R - mean_G) / std_G. TRL uses the sample std (divide by G-1); for G=8 that scales every
  advantage by sqrt(7/8) and changes nothing else.
- scope="group" is the paper; scope="batch" normalises with the whole batch's mean and std (the
  public AReaL tau2 example's switch).
- filter mode "all_equal" (paper) drops groups with no reward spread; "all_success" (public AReaL)
  drops only groups that all succeeded; "off" keeps everything.
- The PPO-clip loss is token-level: summed over every agent-generated token of the batch and
  divided by their count (or by `total_tokens` when the batch is split into micro-batches, so
  gradient accumulation gives the same gradient as one big batch). No KL unless kl_coef > 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch

Scope = Literal["group", "batch"]
FilterMode = Literal["all_equal", "all_success", "off"]
GENERATED_KINDS = frozenset({"completion", "assistant"})


def _mean_std(xs: Sequence[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / len(xs))  # population std


def group_advantages(rewards: list[list[float]], eps: float = 1e-6, scope: Scope = "group") -> list[list[float]]:
    """(r - mean) / (std + eps) per reward, with mean and population std over its group
    (scope="group", the paper) or over every reward of the batch (scope="batch")."""
    if scope not in ("group", "batch"):
        raise ValueError(f"scope must be 'group' or 'batch', got {scope!r}")
    if any(len(g) == 0 for g in rewards):
        raise ValueError("group_advantages: every group needs at least one reward")
    if scope == "batch":
        m, s = _mean_std([r for g in rewards for r in g])
        return [[(r - m) / (s + eps) for r in g] for g in rewards]
    out = []
    for g in rewards:
        m, s = _mean_std(g)
        out.append([(r - m) / (s + eps) for r in g])
    return out


def filter_groups(rewards: list[list[float]], mode: FilterMode = "all_equal", success: float = 1.0) -> list[bool]:
    """Keep mask over groups. "all_equal": drop groups whose rewards are all equal (their
    advantages are all 0: no signal, only noise in the token normaliser). "all_success": drop
    only groups where every reward >= `success`. "off": keep all."""
    if mode == "off":
        return [True] * len(rewards)
    if mode == "all_equal":
        return [len(g) > 0 and max(g) != min(g) for g in rewards]
    if mode == "all_success":
        return [not (len(g) > 0 and all(r >= success for r in g)) for g in rewards]
    raise ValueError(f"filter mode must be 'all_equal', 'all_success' or 'off', got {mode!r}")


def assistant_token_mask(segments: Sequence[tuple[str, Sequence[int]]]) -> tuple[list[int], list[int]]:
    """Flatten a tokenized episode into (ids, mask): mask 1 on tokens the agent generated.

    `segments` is a list of (kind, token ids) in order. Kinds "completion" and "assistant"
    (assistant text and tool calls, as sampled) get 1; everything else ("prompt", "system",
    "user", "tool", "env", template tokens) gets 0. Unknown kinds count as not generated, so
    a new kind of environment text can never leak into the loss.
    """
    ids: list[int] = []
    mask: list[int] = []
    for kind, toks in segments:
        ids.extend(int(t) for t in toks)
        mask.extend([1 if kind in GENERATED_KINDS else 0] * len(toks))
    return ids, mask


def ppo_clip_loss(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    kl_coef: float = 0.0,
    logp_ref: torch.Tensor | None = None,
    norm: Literal["token", "sequence"] = "token",
    total_tokens: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-level PPO-clip loss for GRPO.

    Shapes: logp_* and mask are [rows, tokens]; advantages [rows] (broadcast to every token of
    the row) or [rows, tokens]. Per token: -min(ratio * A, clip(ratio, 1 - eps, 1 + eps) * A)
    with ratio = exp(logp_new - logp_old), plus kl_coef * k3(ref || new) when kl_coef > 0.
    norm="token" (paper, DAPO): sum over unmasked tokens / their count (`total_tokens` overrides
    the count, for micro-batches). norm="sequence" (original GRPO): mean per row, then over rows.
    Stats: clip_frac (share of unmasked tokens whose clipped term is the one used), approx_kl
    (k3 estimate of KL(old || new)), kl_ref when a reference is given, tokens.
    """
    if advantages.dim() == 1:
        advantages = advantages[:, None]
    mask = mask.to(logp_new.dtype)
    log_ratio = logp_new - logp_old
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    kl_ref = None
    if kl_coef > 0:
        if logp_ref is None:
            raise ValueError("ppo_clip_loss: kl_coef > 0 needs logp_ref")
        d = logp_ref - logp_new
        kl_ref = torch.exp(d) - d - 1.0  # k3: unbiased, always >= 0
        per_token = per_token + kl_coef * kl_ref
    n = mask.sum()
    if norm == "token":
        denom = total_tokens if total_tokens is not None else n.clamp(min=1.0)
        loss = (per_token * mask).sum() / denom
    elif norm == "sequence":
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    else:
        raise ValueError(f"norm must be 'token' or 'sequence', got {norm!r}")
    with torch.no_grad():
        cnt = max(float(n), 1.0)
        is_clipped = (clipped < unclipped).to(mask.dtype)  # min() picked the clipped term
        stats = {
            "clip_frac": float((is_clipped * mask).sum()) / cnt,
            "approx_kl": float(((ratio - 1.0 - log_ratio) * mask).sum()) / cnt,
            "tokens": float(n),
        }
        if kl_ref is not None:
            stats["kl_ref"] = float((kl_ref * mask).sum()) / cnt
    return loss, stats
