"""A token prefix shared by many training rows, computed once for all of them, with exact gradients.

    prefix = PrefixStates(model, ids[:p])       # the prefix's pass, with gradients
    for chunk in micro_batches:                 # each attends to the prefix's keys and values
        loss(model(chunk_suffix_ids, cache=prefix.cache(len(chunk)), ...)).backward()
    prefix.backward()                           # the prefix's share of every chunk's gradient, once

Used by GRPO's update (kit/train/grpo_update.py: the system prompt every row of a minibatch shares)
and by SFT (kit/train/sft.py `completion_loss`: a batch's rows run in chunks of `micro_batch_size`).
"""

from __future__ import annotations

from typing import Any

import torch


def can_share_prefix(model: Any) -> bool:
    """Whether a prefix's cache can be shared: not under DistributedDataParallel (one forward per
    backward there) nor with gradient checkpointing (it turns the cache off)."""
    if getattr(model, "module", None) is not None:  # DistributedDataParallel wraps `module`
        return False
    on = getattr(model, "is_activation_checkpointing", None)  # transformers >= 5; the older name warns there
    return not (on if on is not None else getattr(model, "is_gradient_checkpointing", False))


class PrefixStates:
    """The keys and values of a token prefix that every row of a minibatch shares (the system prompt with
    the policy and the tools), computed once, with gradients, for all of the minibatch's micro-batches.

    Each micro-batch attends to them through leaf copies (`cache(b)`), so its backward pass stops there
    and leaves the gradient of the loss with respect to the prefix's keys and values on the leaves,
    summed over micro-batches; `backward()` then sends that sum through the prefix's own pass once. By the
    chain rule the parameters get the gradients they get when every micro-batch (or every row) runs the
    prefix itself (tests/test_grpo_prefix.py), while the prefix is computed once per minibatch, not once
    per micro-batch: the idea of AReaL's tree training and of Prefix Grouper. Memory: the prefix's
    activations are held until `backward()`, beside one micro-batch's. Not under DDP or with gradient
    checkpointing (`can_share_prefix`)."""

    def __init__(self, model: Any, ids: list[int]):
        from transformers import DynamicCache

        self.model, self.p = model, len(ids)
        self._config = model.config.get_text_config(decoder=True)
        device = next(model.parameters()).device
        cache = DynamicCache(config=self._config)
        model(input_ids=torch.tensor([ids], dtype=torch.long, device=device), cache=cache, use_cache=True,
              logits_to_keep=1)
        self.states = [t for layer in cache.layers for t in (layer.keys, layer.values)]
        grad = torch.is_grad_enabled()
        self.leaves = [t.detach().requires_grad_(grad and t.requires_grad) for t in self.states]

    @classmethod
    def for_rows(cls, model: Any, rows: list, min_prefix: int = 64) -> "PrefixStates | None":
        """The shared prefix of `rows` (at least two, sharing `min_prefix` tokens), or None."""
        if len(rows) < 2 or not can_share_prefix(model):
            return None
        from kit.train.sequences import common_prefix

        p = common_prefix(rows, min_prefix)
        return cls(model, rows[0].ids[:p]) if p else None

    def cache(self, b: int) -> Any:
        """A cache holding the prefix's keys and values for `b` rows (copies of the leaves)."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self._config)
        for i in range(0, len(self.leaves), 2):
            k, v = self.leaves[i], self.leaves[i + 1]
            cache.update(k.expand(b, *k.shape[1:]), v.expand(b, *v.shape[1:]), i // 2)
        return cache

    def backward(self) -> None:
        """Send the gradients the micro-batches left on the leaves through the prefix's pass (once)."""
        pairs = [(t, leaf.grad) for t, leaf in zip(self.states, self.leaves) if leaf.grad is not None and t.requires_grad]
        if pairs:
            torch.autograd.backward([t for t, _ in pairs], [g for _, g in pairs])
        self.states, self.leaves = [], []
