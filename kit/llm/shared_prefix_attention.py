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

and merges the two softmax parts exactly with their log-sum-exp weights:
out = (o1 * l1 * e^(m1 - m) + o2 * l2 * e^(m2 - m)) / (l1 e^(m1 - m) + l2 e^(m2 - m)), written
below with unnormalised o1, o2. The result equals full attention up to float rounding.

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

    # shared prefix: [kv_heads, rows * group, dim] queries against one [kv_heads, shared, dim] copy
    qs = q.transpose(0, 1).reshape(kv_heads, rows * group, dim)
    s1 = torch.bmm(qs, key[0, :, :shared].transpose(1, 2)).float() * scale
    m1 = s1.amax(dim=-1, keepdim=True)
    p1 = torch.exp(s1 - m1)
    l1 = p1.sum(dim=-1, keepdim=True)
    o1 = torch.bmm(p1.to(value.dtype), value[0, :, :shared]).float()

    def per_row(t: torch.Tensor) -> torch.Tensor:  # [kv_heads, rows * group, x] -> [rows, kv_heads, group, x]
        return t.reshape(kv_heads, rows, group, t.shape[-1]).transpose(0, 1)

    o1, m1, l1 = per_row(o1), per_row(m1), per_row(l1)

    # each row's own tail under its mask
    s2 = torch.matmul(q, key[:, :, shared:].transpose(-1, -2)).float() * scale  # [rows, kv_heads, group, tail]
    if mask is not None:
        tail_mask = mask[:, :, :, shared:]
        s2 = s2.masked_fill(~tail_mask, float("-inf")) if tail_mask.dtype == torch.bool else s2 + tail_mask.float()
    m2 = s2.amax(dim=-1, keepdim=True).clamp_min(torch.finfo(torch.float32).min)  # a fully masked tail: weight 0
    p2 = torch.exp(s2 - m2)
    l2 = p2.sum(dim=-1, keepdim=True)
    o2 = torch.matmul(p2.to(value.dtype), value[:, :, shared:]).float()

    m = torch.maximum(m1, m2)
    a1, a2 = torch.exp(m1 - m), torch.exp(m2 - m)
    out = (o1 * a1 + o2 * a2) / (l1 * a1 + l2 * a2)
    return out.to(query.dtype).reshape(rows, 1, heads, dim)
