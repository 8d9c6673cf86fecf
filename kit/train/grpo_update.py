"""GRPO's update: kept groups -> training rows with group-relative advantages -> PPO-clip steps.

    rows, m = policy_rows(backend, kept, cfg, system, tools)
    metrics, failed = ppo_update(model, opt, accelerator, procs, rows, cfg, pad_id, rng, ref=None)

The loss is token-level over the batch's generated tokens (kit.train.grpo_math.ppo_clip_loss),
accumulated over micro-batches and stepped once per minibatch (`cfg.minibatches`). Under DDP each
process normalises by the tokens (or rows) of the whole batch, all processes together, and scales
by W, which DDP's gradient averaging undoes: W processes compute the gradient one would.
"""

from __future__ import annotations

import contextlib
import math
import random
from typing import Any

import torch

from kit import metrics as M
from kit.llm import precision
from kit.train.grpo_config import GRPOConfig, SkipReason
from kit.train.grpo_groups import Group
from kit.train.grpo_math import group_advantages, ppo_clip_loss
from kit.train.processes import Processes
from kit.train.prefix import PrefixStates, can_share_prefix
from kit.train.sequences import Row, common_prefix, sampler_logprobs, token_logprobs, trajectory_rows

MIN_SHARED_PREFIX = 64  # tokens: a shorter common prefix is not worth a pass of its own


def policy_rows(backend: Any, kept: list[Group], cfg: GRPOConfig, system: str, tools: list[dict] | None,
                retokenize: bool = False) -> tuple[list[Row], dict]:
    """Rows of every generated assistant turn of every kept episode, carrying its episode's advantage:
    one per turn, or (`cfg.pack_turns`) an episode's turns packed into as few rows as is exact
    (kit.train.sequences); rows over `cfg.max_seq_tokens` are dropped and counted."""
    advs = group_advantages([g.scores for g in kept], scope=cfg.adv_scope)
    rows, unmatched, too_long = [], 0, 0
    pack = cfg.pack_turns and cfg.loss_norm == "token"
    for gi, (g, adv) in enumerate(zip(kept, advs)):
        for traj, a in zip(g.trajs, adv):
            rs, u = trajectory_rows(backend, traj, system, tools, a, gi, retokenize=retokenize, pack=pack,
                                    max_tokens=cfg.max_seq_tokens)
            unmatched += u
            for r in rs:
                if cfg.max_seq_tokens and len(r.ids) > cfg.max_seq_tokens:
                    too_long += 1
                else:
                    rows.append(r)
    return rows, {"train/rows": len(rows), "train/turns": sum(r.turns for r in rows),
                  "train/unmatched_turns": unmatched, "train/too_long_rows": too_long,
                  "train/tokens": sum(sum(r.mask) for r in rows),
                  "train/retokenized_turns": sum(r.turns for r in rows if r.retokenized),
                  "train/sampler_logprob_rows": sum(r.logprobs is not None for r in rows)}


def placeholder_rows(pad_id: int, n: int) -> list[Row]:
    """Rows for a process whose share of the batch was all filtered while others train: under DDP it
    must still run the same backward passes; its loss is multiplied by 0 (group -1)."""
    return [Row([pad_id] * 2, [0, 1], 0.0, -1) for _ in range(n)]


def micro_batches(rows: list[Row], size: int, tokens: int | None = None, skip: int = 0) -> list[list[Row]]:
    """`rows` (in order) cut into micro-batches of at most `size` rows and, with `tokens`, at most
    `tokens` padded tokens (rows x the longest row's length, less the `skip` leading tokens every row
    shares when their prefix runs once for the minibatch: `PrefixStates`): a row that alone exceeds the
    budget runs alone. Rows sorted by length waste the least padding."""
    out: list[list[Row]] = []
    cur: list[Row] = []
    longest = 0
    for r in rows:
        n = len(r.ids) - skip
        if cur and (len(cur) >= size or (tokens is not None and (len(cur) + 1) * max(longest, n) > tokens)):
            out.append(cur)
            cur, longest = [], 0
        cur.append(r)
        longest = max(longest, n)
    if cur:
        out.append(cur)
    return out


def ppo_update(model: Any, opt: Any, acc: Any, procs: Processes, rows: list[Row], cfg: GRPOConfig, pad: int,
               rng: random.Random, ref: Any = None) -> tuple[dict, SkipReason | None]:
    """`cfg.minibatches` optimizer steps over `rows` (at least that many, the caller checks).
    Returns (metrics, None), or (metrics, reason) when a non-finite loss or gradient norm stopped
    it (that minibatch's gradients are dropped, earlier minibatches stay applied)."""
    c = cfg
    rows = sorted(rows, key=lambda r: len(r.ids))  # micro-batches of similar length pad less
    order = list(range(len(rows)))
    rng.shuffle(order)
    mbs = [sorted(order[i :: c.minibatches]) for i in range(c.minibatches)]
    # a prefix all rows of a minibatch share (the system prompt and tools) runs once for the minibatch
    # (PrefixStates: exact gradients); the micro-batches then hold the rows' suffixes only
    share = can_share_prefix(model)
    prefixes = [common_prefix([rows[j] for j in mb], MIN_SHARED_PREFIX) if share and len(mb) > 1 else 0 for mb in mbs]
    micro = [micro_batches([rows[j] for j in mb], c.micro_batch_size, c.micro_batch_tokens, skip=p)
             for mb, p in zip(mbs, prefixes)]
    model.train()
    old = refs = None
    # forward passes in bf16 where the stage asked (cpu_bf16) and the CPU can; backward passes follow them
    with torch.no_grad(), precision.autocast(model):
        if c.minibatches > 1:  # later minibatches are off-policy: fix the sampling policy's log-probs now
            old = [[token_logprobs(model, mi, pad, c.temperature)[0] for mi in mb] for mb in micro]
        if ref is not None:
            refs = [[token_logprobs(ref, mi, pad, c.temperature)[0] for mi in mb] for mb in micro]
    out = {M.LOSS: 0.0, M.CLIP_FRAC: 0.0, "approx_kl": 0.0, M.GRAD_NORM: 0.0, **({"kl_ref": 0.0} if refs is not None else {})}
    tokens, applied = 0.0, 0
    W = procs.count
    for b, mb in enumerate(micro):
        total = procs.sum(float(sum(sum(r.mask) for mi in mb for r in mi if r.group >= 0)))
        seqs = procs.sum(float(sum(r.group >= 0 for mi in mb for r in mi)))
        opt.zero_grad(set_to_none=True)
        bad = False
        first = mb[0][0]
        with precision.autocast(model):
            shared = PrefixStates(model, first.ids[:prefixes[b]]) if prefixes[b] else None
        for k, mi in enumerate(mb):
            sync = contextlib.nullcontext() if k == len(mb) - 1 else acc.no_sync(model)
            with sync:
                with precision.autocast(model):
                    logp, mask = token_logprobs(model, mi, pad, c.temperature, prefix=shared)
                adv = torch.tensor([r.advantage for r in mi], dtype=logp.dtype, device=logp.device)
                before = logp.detach() if old is None else old[b][k]
                behaviour = sampler_logprobs(mi, before, mask)  # a server's log-probs, where it gave them
                loss, st = ppo_clip_loss(
                    logp, before if behaviour is None else behaviour, adv, mask, c.clip_eps, c.kl_coef,
                    None if refs is None else refs[b][k], c.loss_norm, total_tokens=max(total, 1.0))
                if c.loss_norm == "sequence":
                    loss = loss * len(mi) / max(seqs, 1.0)
                loss = loss * W
                if all(r.group < 0 for r in mi):
                    loss = loss * 0.0
                if not torch.isfinite(loss):  # keep the backward (DDP peers wait on it), but of nothing
                    bad, loss = True, (logp * 0.0).nan_to_num().sum()
                acc.backward(loss)
            out[M.LOSS] += loss.item() / W / len(micro)
            out[M.CLIP_FRAC] += st["clip_frac"] * st["tokens"]
            out["approx_kl"] += st["approx_kl"] * st["tokens"]
            if refs is not None:
                out["kl_ref"] += st["kl_ref"] * st["tokens"]
            tokens += st["tokens"]
        if shared is not None:
            shared.backward()  # the prefix's share of every micro-batch's gradient, through its one pass
        if procs.any(bad):
            opt.zero_grad(set_to_none=True)
            return {**out, M.LOSS: float("nan"), "train/minibatches_applied": applied}, SkipReason.NAN_LOSS
        gn = float(acc.clip_grad_norm_(model.parameters(), c.max_grad_norm))
        if not math.isfinite(gn):
            opt.zero_grad(set_to_none=True)
            return {**out, "train/minibatches_applied": applied}, SkipReason.NAN_GRAD_NORM
        out[M.GRAD_NORM] += gn / len(micro)
        opt.step()
        applied += 1
    for key in (M.CLIP_FRAC, "approx_kl", "kl_ref"):
        if key in out:
            out[key] /= max(tokens, 1.0)
    out["train/minibatches_applied"] = applied
    out[M.MICRO_BATCHES] = sum(len(mb) for mb in micro)
    out["train/micro_batch_tokens_max"] = max((len(mi) * (max(len(r.ids) for r in mi) - p)
                                               for mb, p in zip(micro, prefixes) for mi in mb), default=0)
    out["train/shared_prefix_tokens"] = max(prefixes, default=0)
    # what the update's forward passes computed (pads included), the shared prefixes once per minibatch
    out["train/tokens_computed"] = sum(p for p in prefixes) + sum(
        len(mi) * (max(len(r.ids) for r in mi) - p) for mb, p in zip(micro, prefixes) for mi in mb)
    return out, None
