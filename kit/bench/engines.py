"""transformers' own generation behind the kit's Backend: the reference arms of `kit bench rollout`.

The production sampler is kit.llm.hf.HFBackend (the kit's fast path). The benchmark measures it
against transformers' generation as it comes; these backends are HFBackend subclasses on the same
model and tokenizer that replace only the generation call (`_generate`, one chunk of rows), so the
chat template rendering, sampling settings, seeds, stop strings and tool-call parsing are the
production backend's, and the completions carry the same token ids and counts:

* `TransformersGenerate` ("generate"): one left-padded `model.generate` call per chunk of rows,
  nothing cached between calls (no prefix cache, no fast path, no packed weights).
* `TransformersGenerateBatch` ("generate_batch"): transformers' continuous batching,
  `model.generate_batch` (paged KV cache, its own prefix sharing). Its manager is kept across calls
  (`persistent_manager=True`), so blocks of earlier turns' prompts can be reused, and its cache is
  sized for the calls' rows (by default it would take 60% of the host's memory on CPU, zeroed at
  every call). Stop strings only cut the text (continuous batching has no stop-string criterion),
  the rows run to an end-of-turn id or `max_new_tokens`.

    ref = reference_backend(backend, "generate")   # backend: an HFBackend
    run_episodes(dom, tasks, ref, ref, cfg)

Neither accounts for its generation time (`caps.stats` is False): the benchmark profiles the kit's
arms only.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from kit.llm.hf import HFBackend
from kit.llm.types import Completion, SamplingParams


class TransformersEngine(HFBackend):
    """An HFBackend whose generation call is transformers' own (`engine` names which): none of the
    kit's prefix cache, fast path or packed weights; no generation-time stats."""

    engine = ""
    caps = dataclasses.replace(HFBackend.caps, stats=False)

    def __init__(self, *, model: Any, tokenizer: Any, tool_mode: str = "auto", max_batch_size: int = 64):
        super().__init__(model=model, tokenizer=tokenizer, tool_mode=tool_mode, max_batch_size=max_batch_size,
                         prefix_cache_min_tokens=0, fast_decode=False, pack_weights=False)


class TransformersGenerate(TransformersEngine):
    """transformers' batched `model.generate`: one left-padded call per chunk of rows, nothing cached."""

    engine = "generate"

    def _generate(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        return self._generate_padded(prompts, params, self._generation_config(params))


class TransformersGenerateBatch(TransformersEngine):
    """transformers' continuous batching `model.generate_batch`, its manager kept between calls."""

    engine = "generate_batch"

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self._cb: tuple[Any, int, Any] | None = None  # (settings, blocks, config) of the kept manager

    def clear_cache(self) -> None:
        super().clear_cache()
        if self._cb is not None:  # the manager holds the cached blocks
            self._cb = None
            self.model.destroy_cached_continuous_batching_manager()

    def _grad_off(self) -> Any:
        # generate_batch runs the model in a thread of its own, on tensors made in this one: inference
        # tensors would be refused there (it turns off gradients itself)
        import torch

        return torch.no_grad()

    def _generate(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        from transformers import ContinuousBatchingConfig

        from kit.llm.fast import effective_config

        rows = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        # the settings model.generate would resolve (its default top_k included): the same distribution
        gen = self._generation_config(params)
        gen = effective_config(self.model, gen) or gen
        gen.stop_strings = None  # not supported there: a stop string only cuts the text (_completion)
        settings = (gen.do_sample, gen.temperature, gen.top_p, gen.top_k, tuple(sorted(self.eos_ids)))
        page = ContinuousBatchingConfig.page_size
        need = sum(-(-(len(r) + params.max_new_tokens) // page) + 1 for r in rows)  # blocks these rows take
        if self._cb is None or self._cb[0] != settings or self._cb[1] < need:
            self.clear_cache()  # a manager keeps the settings it was made with
            blocks = max(2 * need, 64)  # room for the blocks kept for prefix sharing too
            # seed: a new manager reseeds torch's generator (randomly when None): with the call's seed, the
            # draws are the ones generate_batch's fork_rng set up
            self._cb = (settings, blocks, ContinuousBatchingConfig(num_blocks=blocks, seed=params.seed,
                                                                    max_requests_per_batch=self.max_batch_size))
        with _quiet_persistent_manager_warning():
            out = self.model.generate_batch(rows, generation_config=gen, continuous_batching_config=self._cb[2],
                                            max_new_tokens=params.max_new_tokens, persistent_manager=True,
                                            warmup=False)
        results = list(out.values())
        failed = [r.error for r in results if r.error is not None]
        if len(results) != len(rows) or failed:
            self.clear_cache()
            raise RuntimeError(f"transformers generate_batch returned {len(results)} of {len(rows)} requests"
                               + (f"; errors: {failed[:3]}" if failed else " (see its log above)"))
        return [self._completion(list(r.generated_tokens), len(row), params.stop) for r, row in zip(results, rows)]


REFERENCE_ENGINES: dict[str, type[TransformersEngine]] = {
    c.engine: c for c in (TransformersGenerate, TransformersGenerateBatch)
}
"""The reference engines by name."""


def reference_backend(backend: Any, engine: str) -> TransformersEngine:
    """A reference backend on `backend`'s model, tokenizer, tool mode and batch size, generating with
    transformers' `engine` ("generate" or "generate_batch"); close it when done (generate_batch's
    manager holds memory)."""
    if engine not in REFERENCE_ENGINES:
        raise ValueError(f"engine must be one of {', '.join(REFERENCE_ENGINES)}, not {engine!r}")
    if not isinstance(backend, HFBackend):
        raise ValueError(f"the {engine} reference engine needs an hf backend (kit.llm.hf.HFBackend), "
                         f"not {type(backend).__name__}")
    return REFERENCE_ENGINES[engine](model=backend.model, tokenizer=backend.tokenizer, tool_mode=backend.tool_mode,
                                     max_batch_size=backend.max_batch_size)


@contextlib.contextmanager
def _quiet_persistent_manager_warning():
    """generate_batch warns at every call that a kept manager was sized for its first requests: here
    the backend sizes it (and makes a new one when a call needs more)."""
    import logging

    class _Drop(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return "persistent_manager=True" not in record.getMessage()

    log = logging.getLogger("ContinuousBatchingLogger")
    drop = _Drop()
    log.addFilter(drop)
    try:
        yield
    finally:
        log.removeFilter(drop)
