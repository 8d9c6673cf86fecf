"""Shared-prefix KV caching for HFBackend: prefill a long common prompt prefix once, not per row.

Multi-turn rollouts re-render the whole conversation every turn, and every row of a batch starts
with the same system prompt (policy + tool schemas), so on CPU prefill dominates. `PrefixKVCache`
keeps a small LRU of batch-1 key/value states keyed by token prefix. A lookup reuses the entry
sharing the longest token prefix with the one asked for (sliced if it is longer, extended by one
forward pass over the missing tokens if it is shorter) and computes the rest from scratch only
when nothing useful is stored. `expand` turns an entry into a fresh `DynamicCache` of batch B for
`generate`; the stored tensors are copied, never handed out, since generation appends to caches.

Staleness: entries belong to one set of weights. `weights_key` (model identity, parameter count,
storage pointers and the sum of the parameters' autograd version counters) is checked on every
lookup and the whole cache is dropped when it changed; in-place optimizer steps and
`load_state_dict` bump the version counters. Writes through `param.data` do not, so a trainer that
updates weights that way must call `HFBackend.invalidate()` (HFBackend also clears the cache when
it is called while the model is in training mode).

Only models whose cache is plain full-attention `DynamicLayer`s (Llama, Qwen2, Mistral without
sliding window...) are served; for others `lookup` returns None once and the backend falls back.
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from typing import Any


def common_prefix_len(rows: list) -> int:
    """Length of the longest token prefix shared by all rows."""
    if not rows:
        return 0
    first, n = rows[0], min(len(r) for r in rows)
    for row in rows[1:]:
        i = 0
        while i < n and row[i] == first[i]:
            i += 1
        n = i
    return n


def weights_key(model: Any) -> tuple:
    """Cheap fingerprint of the weights: changes when parameters are updated in place or replaced."""
    params = list(model.parameters())
    try:
        version = sum(p._version for p in params)
    except RuntimeError:  # inference tensors have no version counter
        version = None
    return (id(model), len(params), version, sum(p.data_ptr() for p in params))


class PrefixKVCache:
    """LRU of batch-1 KV states (per layer: keys, values [1, heads, len, head_dim]) by token prefix."""

    def __init__(self, max_entries: int = 4, min_tokens: int = 32):
        self.max_entries = max_entries
        self.min_tokens = max(1, min_tokens)
        self.entries: OrderedDict[tuple[int, ...], list[tuple[Any, Any]]] = OrderedDict()
        self.supported: bool | None = None  # None: not yet known for this model
        self.stats = {"hits": 0, "extends": 0, "misses": 0, "reused_tokens": 0, "computed_tokens": 0}
        self._weights: tuple | None = None

    def clear(self) -> None:
        self.entries.clear()
        self._weights = None

    def lookup(self, model: Any, ids: list[int]) -> list[tuple[Any, Any]] | None:
        """KV states for exactly `ids` (batch 1), from the LRU or computed; None if unsupported."""
        if self.supported is False or len(ids) < self.min_tokens:
            return None
        key = weights_key(model)
        if key != self._weights:
            self.entries.clear()
            self._weights = key
        ids = tuple(ids)
        best, base = 0, None
        for stored in self.entries:
            n = common_prefix_len([stored, ids])
            if n > best:
                best, base = n, stored
        if base is not None and best >= self.min_tokens:
            self.entries.move_to_end(base)
            kv = [(k[:, :, :best], v[:, :, :best]) for k, v in self.entries[base]]
            self.stats["reused_tokens"] += best
            if best == len(ids):
                self.stats["hits"] += 1
                return kv
            self.stats["extends"] += 1
            if best == len(base):  # the new entry holds all of the old one
                del self.entries[base]
        else:
            best, kv = 0, None
            self.stats["misses"] += 1
        kv = self._forward(model, ids, best, kv)
        if kv is not None:
            self.entries[ids] = kv
            while len(self.entries) > self.max_entries:
                self.entries.popitem(last=False)
        return kv

    def _forward(self, model: Any, ids: tuple[int, ...], start: int, kv: list | None) -> list | None:
        import torch
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        config = model.config.get_text_config(decoder=True)
        cache = DynamicCache(ddp_cache_data=kv, config=config) if kv else DynamicCache(config=config)
        if any(type(layer) is not DynamicLayer for layer in cache.layers):
            self.supported = False
            return None
        device = model.device
        extra = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
        model(
            input_ids=torch.tensor([ids[start:]], device=device),
            position_ids=torch.arange(start, len(ids), device=device)[None],
            cache=cache,
            use_cache=True,
            **extra,  # the prefix's logits are never used
        )
        self.stats["computed_tokens"] += len(ids) - start
        if any(type(layer) is not DynamicLayer or layer.get_seq_length() != len(ids) for layer in cache.layers):
            self.supported = False
            return None
        self.supported = True
        return [(layer.keys, layer.values) for layer in cache.layers]

    @staticmethod
    def expand(model: Any, kv: list[tuple[Any, Any]], batch_size: int) -> Any:
        """A new DynamicCache holding `kv` repeated over `batch_size` rows (copies; `kv` stays untouched)."""
        from transformers import DynamicCache

        rows = [(k.expand(batch_size, -1, -1, -1), v.expand(batch_size, -1, -1, -1)) for k, v in kv]
        # DynamicLayer.update concatenates onto an empty tensor: a fresh contiguous copy
        return DynamicCache(ddp_cache_data=rows, config=model.config.get_text_config(decoder=True))
