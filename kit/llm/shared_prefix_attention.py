"""Decode attention that reads a prefix shared by every row of the batch once.

The rows of a rollout group (the G samples of one task) and the turns of a batch of episodes start
with the same system prompt: the domain policy and the tool schemas, most of the context of a
mock or airline episode. Plain attention reads each row's own copy of those keys and values at
every decode step, so the attention cost of a step grows with the batch while the weight matmuls
barely do. Here (the idea of cascade / shared-prefix attention, e.g. Hydragen, FlashInfer's
cascade kernels) one decode step splits each row's attention into

* the shared prefix, slots 0..P-1, equal for every row: the queries of all rows (and all query
  heads of a key/value head) form one matrix that is multiplied with ONE copy of the prefix's
  keys and values (batch row 0's), and
* the row's own tail, slots P..span-1, attended per row under the row's mask,

and merges the two normalised parts exactly with their log-sum-exp: out = w o1 + (1 - w) o2,
w = sigmoid(lse1 - lse2). On CPU both parts run in torch's flash kernel, which returns the
log-sum-exp. The result equals full attention up to float rounding.

Use: `with shared_prefix(model):` switches the model's attention to the registered implementation
`kit_rows` (sdpa underneath) for the block; a forward pass that passes `kit_shared=P` (P > 0) with
one query token per row takes the split path, any other pass runs sdpa unchanged. Only models whose
attention implementation is "sdpa" are switched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

NAME = "kit_rows"
_registered = False


def _register() -> bool:
    global _registered
    if _registered:
        return True
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    except ImportError:  # a transformers without pluggable attention
        return False
    AttentionInterface.register(NAME, attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    _registered = True
    return True


@contextlib.contextmanager
def shared_prefix(model: Any) -> Iterator[bool]:
    """Inside the block the model's attention is `kit_rows` (yields True) if it was sdpa."""
    config = model.config
    before = getattr(config, "_attn_implementation", None)
    if before != "sdpa" or not _register():
        yield False
        return
    config._attn_implementation = NAME
    try:
        yield True
    finally:
        config._attn_implementation = before


def attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
              kit_shared: int = 0, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers attention-interface function: split attention when `kit_shared` > 0 and
    every row has one query token, sdpa otherwise."""
    rows, heads, q_len, dim = query.shape
    if kit_shared <= 0 or q_len != 1 or rows < 2 or dropout or kwargs.get("position_bias") is not None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                      scaling=scaling, **kwargs)
    return split_decode_attention(query, key, value, attention_mask, kit_shared,
                                  scaling if scaling is not None else dim ** -0.5), None


def split_decode_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           mask: torch.Tensor | None, shared: int, scale: float) -> torch.Tensor:
    """Attention of one query token per row, keys 0..shared-1 taken from row 0 for every row.

    query [rows, heads, 1, dim]; key, value [rows, kv_heads, span, dim]; mask [rows, 1, 1, span]
    (boolean: True = may attend; or additive float) or None. Returns [rows, 1, heads, dim], the
    layout transformers' attention functions return.
    """
    rows, heads, _, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    q = query.reshape(rows, kv_heads, group, dim)
    qs = q.transpose(0, 1).reshape(1, kv_heads, rows * group, dim)  # every row's queries, one matrix per kv head
    tail_mask = None
    if mask is not None:
        tail_mask = mask[:, :, :, shared:]
        if tail_mask.dtype == torch.bool:
            tail_mask = torch.zeros(tail_mask.shape, dtype=query.dtype, device=query.device).masked_fill_(
                ~tail_mask, float("-inf"))
    parts = _attend_with_lse(qs, key[0:1, :, :shared], value[0:1, :, :shared], None, scale)
    if parts is not None:
        o1, l1 = parts
        o2, l2 = _attend_with_lse(q, key[:, :, shared:], value[:, :, shared:], tail_mask, scale)
    else:  # no fused kernel for this device: the same in plain tensor ops
        o1, l1 = _attend_math(qs, key[0:1, :, :shared], value[0:1, :, :shared], None, scale)
        o2, l2 = _attend_math(q, key[:, :, shared:], value[:, :, shared:], tail_mask, scale)
    o1 = o1.reshape(kv_heads, rows, group, dim).transpose(0, 1)  # back to [rows, kv_heads, group, ...]
    l1 = l1.reshape(kv_heads, rows, group).transpose(0, 1)
    # softmax over both parts: weights e^lse1 and e^lse2, i.e. sigmoid(lse1 - lse2) for the prefix
    w = torch.sigmoid((l1 - l2).float()).unsqueeze(-1)
    out = o2.float() + w * (o1.float() - o2.float())
    return out.to(query.dtype).reshape(rows, 1, heads, dim)


def _attend_with_lse(q, k, v, mask, scale):
    """(output, log-sum-exp of the scores) from torch's CPU flash kernel; None where it does not apply."""
    if q.device.type != "cpu" or not hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"):
        return None
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, False, attn_mask=mask, scale=scale)
    return out, lse


def _attend_math(q, k, v, mask, scale):
    scores = torch.matmul(q, k.transpose(-1, -2)).float() * scale
    if mask is not None:
        scores = scores + mask.float()
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.exp(scores - lse.unsqueeze(-1)).to(v.dtype), v)
    return out, lse
