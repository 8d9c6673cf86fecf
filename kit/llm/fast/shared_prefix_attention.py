"""Attention that reads a prefix shared by every row of the batch once, and groups query heads.

The rows of a rollout group (the G samples of one task) and the turns of a batch of episodes start
with the same system prompt: the domain policy and the tool schemas, most of the context of a
mock or airline episode. Plain attention reads each row's own copy of those keys and values at
every decode step, so the attention cost of a step grows with the batch while the weight matmuls
barely do. Here (the idea of cascade / shared-prefix attention, e.g. Hydragen, FlashInfer's
cascade kernels) a forward pass splits each row's attention into

* the shared prefix, slots 0..P-1, equal for every row: the queries of all rows (and all query
  heads of a key/value head) form one matrix that is multiplied with ONE copy of the prefix's
  keys and values (batch row 0's), and
* the row's own tail, slots P..span-1, attended per row under the row's mask,

and merges the two normalised parts exactly with their log-sum-exp: out = w o1 + (1 - w) o2,
w = sigmoid(lse1 - lse2). On CPU both parts run in torch's flash kernel, which returns the
log-sum-exp. The result equals full attention up to float rounding. It serves decode steps (one
query per row) and ragged prefill passes (several queries per row, all past the prefix).

A masked multi-token pass without a shared prefix (a prefill of one row, or of rows whose prefixes
differ) runs `grouped_attention`: the query heads of each key/value head folded into one block,
where transformers' sdpa path would first copy the keys and values once per query head
(`repeat_kv`, a third of the time of a ragged prefill over a long context on CPU).

Use: `with shared_prefix(model):` switches the model's attention to the registered implementation
`kit_rows` (sdpa underneath) for the block; a forward pass that passes `kit_shared=P` (P > 0)
takes the split path, a masked multi-token pass the grouped one, any other pass runs sdpa
unchanged. Only models whose attention implementation is "sdpa" are switched.
"""

from __future__ import annotations

import contextlib
import threading
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
    """transformers attention-interface function: split attention when `kit_shared` > 0, grouped
    attention without copies of the key/value heads for a masked multi-token pass (a ragged
    prefill), sdpa otherwise."""
    rows, heads, q_len, dim = query.shape
    scale = scaling if scaling is not None else dim ** -0.5
    plain = dropout or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None
    if not plain and kit_shared > 0 and (rows > 1 or q_len > 1):
        return split_attention(query, key, value, attention_mask, kit_shared, scale), None
    if not plain and q_len > 1 and attention_mask is not None:  # None back: no fused kernel here
        out = grouped_attention(query, key, value, attention_mask, scale)
        if out is not None:
            return out, None
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                  scaling=scaling, **kwargs)


def _fold(query: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """[rows, heads, q, dim] -> [rows, kv_heads, group * q, dim]: the queries of the heads that
    share a key/value head, as one block (no copy of the keys and values per query head)."""
    rows, heads, q_len, dim = query.shape
    return query.reshape(rows, kv_heads, (heads // kv_heads) * q_len, dim)


def _unfold(out: torch.Tensor, heads: int, q_len: int) -> torch.Tensor:
    """[rows, kv_heads, group * q, dim] -> [rows, q, heads, dim], the layout transformers' attention
    functions return."""
    rows, _, _, dim = out.shape
    return out.reshape(rows, heads, q_len, dim).transpose(1, 2).contiguous()


# per thread: the last mask seen and its additive forms; transformers passes one forward's mask
# object to every layer, so it is converted once per forward, not once per layer
_memo = threading.local()


def _additive(mask: torch.Tensor | None, start: int, group: int, dtype: torch.dtype) -> torch.Tensor | None:
    """mask[..., start:] (boolean: True = may attend; or additive float) as an additive float mask
    with its query rows repeated for the `group` folded query heads: [rows, 1, group * q, keys]."""
    if mask is None:
        return None
    if getattr(_memo, "mask", None) is not mask:
        _memo.mask, _memo.forms = mask, {}
    key = (start, group, dtype)
    if key not in _memo.forms:
        part = mask[:, :, :, start:]
        if part.dtype == torch.bool:
            part = torch.zeros(part.shape, dtype=dtype, device=part.device).masked_fill_(~part, float("-inf"))
        else:
            part = part.to(dtype)
        if group > 1 and part.shape[2] > 1:
            part = part.repeat(1, 1, group, 1)
        _memo.forms[key] = part
    return _memo.forms[key]


def grouped_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor,
                      scale: float) -> torch.Tensor | None:
    """Masked attention with the query heads of each key/value head folded into one block: what
    sdpa computes, without the copies of keys and values per query head that transformers makes
    (`repeat_kv`) for a masked multi-token pass. None where the fused kernel is missing."""
    rows, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    parts = _attend_with_lse(_fold(query, kv_heads), key, value, _additive(mask, 0, heads // kv_heads, query.dtype), scale)
    return None if parts is None else _unfold(parts[0], heads, q_len)


def split_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    mask: torch.Tensor | None, shared: int, scale: float) -> torch.Tensor:
    """Attention of every row's query tokens, keys 0..shared-1 taken from row 0 for every row.

    query [rows, heads, q, dim] (every query at a slot >= shared: it sees the whole prefix);
    key, value [rows, kv_heads, span, dim]; mask [rows, 1, q, span] (boolean: True = may attend;
    or additive float) or None. Returns [rows, q, heads, dim], the layout transformers' attention
    functions return.
    """
    rows, heads, q_len, dim = query.shape
    kv_heads = key.shape[1]
    group = heads // kv_heads
    q = _fold(query, kv_heads)  # [rows, kv_heads, group * q, dim]
    qs = q.transpose(0, 1).reshape(1, kv_heads, rows * group * q_len, dim)  # every row's queries, one matrix per kv head
    tail_mask = _additive(mask, shared, group, query.dtype)
    parts = _attend_with_lse(qs, key[0:1, :, :shared], value[0:1, :, :shared], None, scale)
    if parts is not None:
        o1, l1 = parts
        o2, l2 = _attend_with_lse(q, key[:, :, shared:], value[:, :, shared:], tail_mask, scale)
    else:  # no fused kernel for this device: the same in plain tensor ops
        o1, l1 = _attend_math(qs, key[0:1, :, :shared], value[0:1, :, :shared], None, scale)
        o2, l2 = _attend_math(q, key[:, :, shared:], value[:, :, shared:], tail_mask, scale)
    o1 = o1.reshape(kv_heads, rows, group * q_len, dim).transpose(0, 1)  # back to [rows, kv_heads, group * q, ...]
    l1 = l1.reshape(kv_heads, rows, group * q_len).transpose(0, 1)
    # softmax over both parts: weights e^lse1 and e^lse2, i.e. sigmoid(lse1 - lse2) for the prefix
    w = torch.sigmoid((l1 - l2).float()).unsqueeze(-1)
    out = torch.lerp(o2.float(), o1.float(), w)  # o2 + w (o1 - o2) in one pass
    return _unfold(out.to(query.dtype), heads, q_len)


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
