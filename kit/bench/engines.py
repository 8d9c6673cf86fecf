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

A third reference engine is not transformers: `OpenVINOGenAI` ("openvino"), OpenVINO GenAI's
continuous batching pipeline (paged KV cache, prefix caching, its own scheduler and sampler) on an
OpenVINO export of the same model (kit/bench/openvino_export.py: `kit bench export-openvino`). It
too replaces only `_generate`: the prompts are the kit's rendering, tokenized by the kit's tokenizer
and handed over as token ids (so OpenVINO applies no chat template of its own), and the sampled ids
come back through the same `_completion` (decoding, stop strings, tool-call parsing, token counts).

    ref = openvino_backend(backend, "/path/to/export", threads=2)

None accounts for its generation time (`caps.stats` is False): the benchmark profiles the kit's
arms only.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
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


OPENVINO_PRECISIONS = ("f32", "native")
"""How the openvino engine computes: "f32" pins float32 inference and a float32 KV cache (the numerics
of the kit's float32 arms); "native" leaves OpenVINO's CPU defaults (bf16 inference on a CPU with bf16
instructions, a u8 KV cache)."""


class OpenVINOGenAI(TransformersEngine):
    """OpenVINO GenAI's continuous batching pipeline on an OpenVINO export (`folder`) of the backend's
    model: one pipeline call per chunk of rows, prefix caching on (the blocks of earlier turns' prompts
    are reused, as vLLM's would be), `threads` inference threads (INFERENCE_NUM_THREADS; None: torch's
    count, what the transformers arms use).

    The pipeline is `ContinuousBatchingPipeline`, the engine `LLMPipeline` runs when given a
    SchedulerConfig, called directly because each row needs a generation config of its own:
    LLMPipeline takes one config for the whole batch, and one `rng_seed` seeds every row's sampler
    alike, so G rows of the same prompt would sample the same tokens. Each row's seed is drawn from
    torch's generator, which `generate_batch` seeds with the call's seed (a seeded call repeats).
    Sampling: the temperature, top-k and top-p that `model.generate` would resolve (the same
    distribution as the other arms). `clear_cache` starts a new pipeline (there is no call to empty
    its prefix cache)."""

    engine = "openvino"

    def __init__(self, *, folder: str | Path, threads: int | None = None, precision: str = "f32", **kwargs: Any):
        if precision not in OPENVINO_PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(OPENVINO_PRECISIONS)}, not {precision!r}")
        from kit.bench.openvino_export import check_export, import_genai

        self.genai = import_genai()
        self.folder = check_export(folder)
        super().__init__(**kwargs)
        if threads is None:
            import torch

            threads = torch.get_num_threads()
        self.threads = int(threads)
        self.precision = precision
        self._pipe: Any = None
        self._start()

    def properties(self) -> dict[str, Any]:
        """The OpenVINO CPU properties the pipeline is compiled with."""
        props: dict[str, Any] = {"INFERENCE_NUM_THREADS": self.threads}
        if self.precision == "f32":
            props.update(INFERENCE_PRECISION_HINT="f32", KV_CACHE_PRECISION="f32")
        return props

    def _start(self) -> None:
        sched = self.genai.SchedulerConfig()
        sched.enable_prefix_caching = True
        sched.max_num_seqs = max(self.max_batch_size, 1)
        self._pipe = self.genai.ContinuousBatchingPipeline(str(self.folder), sched, "CPU", self.properties())

    def clear_cache(self) -> None:
        super().clear_cache()
        if self._pipe is not None:  # a new pipeline: an empty prefix cache (the compiled model is rebuilt)
            self._pipe = None
            self._start()
            self._warm()

    def _warm(self) -> None:
        """One request on the new pipeline: its first inference costs more (buffers allocated, kernels
        chosen; ~0.4 s measured), what the bench's untimed warm-up takes off the other arms. Its prompt
        (a few hundred raw tokens, no chat template) starts unlike any rendered prompt, so none of its
        cached blocks is a prefix the next prompts could reuse."""
        import numpy as np
        import openvino as ov

        ids = self.tokenizer("Warm up. " * 100, add_special_tokens=False)["input_ids"]
        cfg = self.genai.GenerationConfig()
        cfg.max_new_tokens = 2
        cfg.apply_chat_template = False
        self._pipe.generate([ov.Tensor(np.asarray([ids], dtype=np.int64))], [cfg])

    def close(self) -> None:
        super().close()
        self._pipe = None

    def _row_config(self, gen: Any, params: SamplingParams, seed: int) -> Any:
        cfg = self.genai.GenerationConfig()
        cfg.max_new_tokens = params.max_new_tokens
        cfg.apply_chat_template = False  # the ids are the kit's rendering already
        cfg.eos_token_id = min(self.eos_ids)
        cfg.stop_token_ids = set(self.eos_ids)
        cfg.do_sample = bool(gen.do_sample)
        if cfg.do_sample:
            cfg.temperature = float(gen.temperature)
            cfg.top_p = float(gen.top_p if gen.top_p is not None else 1.0)
            if gen.top_k:  # None or 0: no top-k (OpenVINO's default)
                cfg.top_k = int(gen.top_k)
            cfg.rng_seed = seed
        if params.stop:
            cfg.stop_strings = {s for s in params.stop if s}
            cfg.include_stop_str_in_output = True  # the ids as sampled; _completion cuts the text
        return cfg

    def _generate(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        import numpy as np
        import openvino as ov
        import torch

        from kit.llm.fast import effective_config, plain_sampling

        gen = self._generation_config(params)
        effective = effective_config(self.model, gen)
        if not plain_sampling(effective):
            raise RuntimeError("the openvino arm samples with temperature / top-k / top-p only; this model's "
                               "generation_config asks for more (repetition penalties, ...)")
        rows = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        seeds = torch.randint(0, 2**31 - 1, (len(rows),)).tolist()  # generate_batch seeded torch's generator
        configs = [self._row_config(effective, params, s) for s in seeds]
        inputs = [ov.Tensor(np.asarray([row], dtype=np.int64)) for row in rows]
        results = self._pipe.generate(inputs, configs)
        if len(results) != len(rows):
            raise RuntimeError(f"openvino returned {len(results)} of {len(rows)} requests")
        return [self._completion(list(r.m_generation_ids[0]), len(row), params.stop) for r, row in zip(results, rows)]


def openvino_backend(backend: Any, folder: str | Path | None, threads: int | None = None,
                     precision: str = "f32") -> OpenVINOGenAI:
    """The openvino reference backend on `backend`'s tokenizer, tool mode and batch size, generating
    with OpenVINO GenAI on `folder` (an OpenVINO export of `backend`'s model)."""
    from kit.bench.openvino_export import import_genai

    if not folder:
        from kit.errors import BadInput

        raise BadInput("the openvino arms need an OpenVINO export of the model: --openvino-model DIR "
                       "(made by `kit bench export-openvino --python SIDE_VENV/bin/python --out DIR`)")
    import_genai()  # before the folder: a missing package is the first thing to fix
    if not isinstance(backend, HFBackend):
        raise ValueError(f"the openvino reference engine needs an hf backend (kit.llm.hf.HFBackend), "
                         f"not {type(backend).__name__}")
    _same_architecture(backend.model, folder)
    return OpenVINOGenAI(folder=folder, threads=threads, precision=precision, model=backend.model,
                         tokenizer=backend.tokenizer, tool_mode=backend.tool_mode,
                         max_batch_size=backend.max_batch_size)


def _same_architecture(model: Any, folder: str | Path) -> None:
    """BadInput unless the export's config.json describes `model`'s shape (an export of another model)."""
    import json

    from kit.bench.openvino_export import check_export

    path = check_export(folder)
    theirs = json.loads((path / "config.json").read_text())
    ours = model.config.to_dict()
    keys = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")
    diff = [f"{k} {theirs.get(k)} vs {ours.get(k)}" for k in keys if theirs.get(k) != ours.get(k)]
    if diff:
        from kit.errors import BadInput

        raise BadInput(f"{path} is an export of another model than the bench's ({'; '.join(diff)})")


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
