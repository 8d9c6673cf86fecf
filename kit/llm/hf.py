"""transformers backend: batched generation for many conversations at once, CPU or GPU.

`generate_batch` renders every conversation (kit.llm.prompting), repeats each prompt n times and
generates for all rows together (chunks of `max_batch_size`), so the G rollouts of a GRPO group
advance together. With a seed, sampling runs under a forked torch RNG seeded with it: the same call
gives the same completions, and the caller's global RNG is left as it was. (Outputs can depend on
batch composition and on what the prefix cache holds: float rounding differs. Same inputs and
cache, same outputs; not bit-equal to a batch of one.)

Two generation paths, same sampling distribution (transformers' temperature, top-k and top-p
semantics, argmax when greedy, `StopStringCriteria`; the fast path draws through
kit.llm.fast.generate.Sampler, so its seeded samples are not `model.generate`'s):

* fast (kit.llm.fast.generate), for full-attention decoders with plain sampling settings: each row
  reuses the KV states of its longest known token prefix from the prefix cache (the previous turn
  of the same conversation: prompt and completion; or the system prompt shared by the batch), only
  the rows' new tokens are prefilled (grouped by length, little padding), keys/values are written
  in place (kit.llm.fast.row_cache: no per-step cache copy) and finished rows leave the batch. Each
  finished row's states go back to the prefix cache for its next turn.
* `model.generate` otherwise (sliding-window or hybrid models, a generation_config with repetition
  penalties etc., or `fast_decode=False`): rows are left-padded; the prefix common to all rows of
  a chunk is taken from the prefix cache, copied into each row's cache, and only the tails are
  prefilled. Rows are laid out [prefix][left pads][own tokens]; positions come from the attention
  mask, so they continue across the pads.

Stored states are dropped when the weights change (see `invalidate`).

transformers' own generation as it comes (one left-padded `model.generate` call per chunk, and
continuous batching `model.generate_batch`) is not a path of this backend: those are the reference
arms `kit bench rollout` measures it against, kit/bench/engines.py (subclasses that replace
`_generate`, the one generation call).

Simplified on purpose: no streaming, no per-conversation tools (a group shares its task's
tools), and stop strings end a row only at token boundaries; the text is cut at the stop string.
"""

from __future__ import annotations

import contextlib
import copy
import os
from pathlib import Path
from typing import Any

from kit.llm import precision
from kit.llm.capabilities import Capabilities
from kit.llm.fast import PrefixKVCache, common_prefix_len
from kit.llm.prompting import render_prompt, resolve_tool_mode
from kit.llm.toolcalls import CLOSE, OPEN, parse_tool_calls
from kit.llm.types import (
    Backend,
    Completion,
    ChatMessage,
    SamplingParams,
    ToolMode,
    ToolSchema,
    as_params,
)


class HFBackend(Backend):
    """A causal LM + tokenizer from transformers.

    Args:
        path: an HF model folder (never a hub id to download: runs are offline).
        model, tokenizer: an already-loaded pair instead of `path` (e.g. the policy a trainer holds).
        device: "cpu", "cuda", "cuda:1"...; default cuda when available.
        dtype: torch dtype or its name; default bfloat16 on GPU, float32 on CPU.
        tool_mode: "auto" | "native" | "prompt" (see kit.llm.prompting).
        max_batch_size: most rows (conversation x sample) in one generate call.
        prefix_cache_min_tokens: shortest shared token prefix worth caching; 0 or None disables it.
        prefix_cache_size: most token sequences whose KV states are kept (LRU); 0 disables caching.
        prefix_cache_bytes: most bytes of KV states kept (LRU); default: $KIT_KV_CACHE_GIB (a stage's
            `kv_cache_gib`) when set, else 4 GiB on CPU, a tenth of the GPU's memory (at most 4 GiB) on GPU.
        fast_decode: use kit.llm.fast.generate where the model and sampling settings allow it;
            False always uses `model.generate`.
        prefill_chunk: most prompt tokens per row in one forward pass of the fast path (bounds the
            activations of long prompts).
        pack_weights: fast path on a float32 CPU model: run the linear layers on oneDNN-prepacked
            copies of their weights (kit.llm.fast.packed_linear; skinny batched matmuls stop re-packing
            the weights every call). "auto" packs when the linear weights take at most 2 GiB (the
            copies cost as much memory again); True packs at any size; False never.
        shared_prefix_attention: fast path: when all rows of a batch share a prompt prefix (the
            system prompt of a group), decode steps attend it once for all rows
            (kit.llm.fast.shared_prefix_attention); False attends it per row.
        cpu_bf16: packed weights in bfloat16 on a CPU with bf16 instructions (kit.llm.precision);
            None: as the running stage's `cpu_bf16` says ($KIT_CPU_BF16).

    Trainers that update the weights through `param.data` (which bumps no version counter) must call
    `invalidate()` afterwards; in-place optimizer steps and `load_state_dict` are detected.
    """

    caps = Capabilities(parallel=False, tokenizer=True, scores=True, token_ids=True, stats=True)

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        model: Any = None,
        tokenizer: Any = None,
        device: str | None = None,
        dtype: Any = None,
        tool_mode: ToolMode = "auto",
        max_batch_size: int = 64,
        prefix_cache_min_tokens: int | None = 32,
        prefix_cache_size: int = 64,
        prefix_cache_bytes: int | None = None,
        fast_decode: bool = True,
        prefill_chunk: int = 256,
        pack_weights: bool | str = "auto",
        shared_prefix_attention: bool = True,
        cpu_bf16: bool | None = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from kit.llm.fast import GenStats, PackedLinears, supports_model

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if model is None:
            if path is None:
                raise ValueError("HFBackend needs a model folder `path` or a loaded `model` and `tokenizer`")
            if not Path(path).is_dir():
                from kit.errors import NotFound

                raise NotFound(f"HF model folder not found: {path} (hub ids are not downloaded)",
                               "give a local folder with config.json and the weights, or 'embedded'")
            device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            if dtype is None:
                dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
            elif isinstance(dtype, str):
                dtype = getattr(torch, dtype)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True).to(device)
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        elif tokenizer is None:
            raise ValueError("pass the `tokenizer` together with `model`")
        self.model = model.eval() if path is not None else model
        self.tokenizer = tokenizer
        self.device = model.device
        self.path = str(path) if path is not None else getattr(model, "name_or_path", "")
        self.max_batch_size = max_batch_size
        self.tool_mode = resolve_tool_mode(tokenizer, tool_mode)
        if prefix_cache_bytes is None and os.environ.get("KIT_KV_CACHE_GIB"):  # a stage's kv_cache_gib
            prefix_cache_bytes = int(float(os.environ["KIT_KV_CACHE_GIB"]) * (1 << 30))
        if prefix_cache_bytes is None:
            prefix_cache_bytes = 4 << 30
            if self.device.type == "cuda":
                total = torch.cuda.get_device_properties(self.device).total_memory
                prefix_cache_bytes = min(prefix_cache_bytes, total // 10)
        self.prefix_cache = (
            PrefixKVCache(prefix_cache_size, prefix_cache_min_tokens, prefix_cache_bytes)
            if prefix_cache_min_tokens and prefix_cache_size
            else None
        )
        self.prefill_chunk = prefill_chunk
        self.fast_decode = fast_decode and supports_model(model)
        self.stats = GenStats()  # where generation time went (fast path)
        if pack_weights not in (True, False, "auto"):
            raise ValueError(f"pack_weights must be True, False or 'auto', not {pack_weights!r}")
        self.cpu_bf16 = precision.enabled(cpu_bf16)
        self.packed = (PackedLinears(max_bytes=(2 << 30) if pack_weights == "auto" else 1 << 62, bf16=self.cpu_bf16)
                       if pack_weights and self.fast_decode else None)
        self.shared_prefix_attention = shared_prefix_attention
        self._stop_criteria: dict[tuple[str, ...], Any] = {}

        gc = model.generation_config
        eos = gc.eos_token_id if gc.eos_token_id is not None else tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        if tokenizer.eos_token_id is not None:
            self.eos_ids.add(tokenizer.eos_token_id)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.eos_ids)
        # Special tokens are dropped from the text, except tool-call tags that some vocabularies
        # (Qwen, Hermes) register as added tokens.
        tags = {tokenizer.convert_tokens_to_ids(t) for t in (OPEN, CLOSE)} - {None, tokenizer.unk_token_id}
        self.skip_ids = set(tokenizer.all_special_ids) - tags

    def invalidate(self) -> None:
        """Forget cached prefix KV states: call after changing the weights behind the backend's back."""
        self.clear_cache()
        if self.packed is not None:
            self.packed.clear()

    def clear_cache(self) -> None:
        """Forget cached prefix KV states (the packed weights stay: they are still valid)."""
        if self.prefix_cache is not None:
            self.prefix_cache.clear()

    def close(self) -> None:
        self.clear_cache()

    def score_options(self, messages: list[ChatMessage], options: list[str]) -> list[float]:
        """Each option's mean log-probability per token as the continuation of `messages` (rendered
        by the chat template, generation prompt added, no tools). The prompt's KV states are
        computed once; the options then run as one batch on top of them (right-padded: a pad comes
        after every token that is scored, so it changes none of their logits), on the packed weights
        generation uses (bf16 with `cpu_bf16`). An option that encodes to no token scores -1e9."""
        import torch
        from transformers import DynamicCache

        tok, model = self.tokenizer, self.model
        prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        p_ids = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids.to(model.device)
        encoded = [tok(opt, add_special_tokens=False).input_ids for opt in options]
        out = [-1e9] * len(options)
        packed = self.packed.use(model) if self.packed is not None else contextlib.nullcontext()
        with torch.inference_mode(), packed:
            cache = DynamicCache(config=model.config.get_text_config(decoder=True))
            first = model(input_ids=p_ids, cache=cache, use_cache=True)
            first_lp = torch.log_softmax(first.logits[0, -1].float(), -1)
            longer = [i for i, ids in enumerate(encoded) if len(ids) > 1]
            rest: dict[int, float] = {}
            if longer:
                width = max(len(encoded[i]) for i in longer) - 1
                batch = torch.tensor([encoded[i][:-1] + [self.pad_id] * (width - len(encoded[i]) + 1) for i in longer],
                                     device=model.device)
                cache.batch_repeat_interleave(len(longer))
                logp = torch.log_softmax(model(input_ids=batch, cache=cache, use_cache=True).logits.float(), -1)
                for row, i in enumerate(longer):
                    targets = torch.tensor(encoded[i][1:], device=model.device)
                    rest[i] = logp[row, : len(targets)].gather(1, targets[:, None]).sum().item()
            for i, ids in enumerate(encoded):
                if ids:
                    out[i] = (first_lp[ids[0]].item() + rest.get(i, 0.0)) / len(ids)
        return out

    def render(self, messages: list[ChatMessage], tools: list[ToolSchema] | None = None) -> str:
        """The exact prompt text this backend feeds the model."""
        return render_prompt(self.tokenizer, messages, tools, self.tool_mode)

    def generate_batch(
        self,
        conversations: list[list[ChatMessage]],
        tools: list[ToolSchema] | None = None,
        params: SamplingParams | dict | None = None,
    ) -> list[list[Completion]]:
        import torch

        params = as_params(params)
        prompts = [self.render(conv, tools) for conv in conversations]
        rows = [(ci, p) for ci, p in enumerate(prompts) for _ in range(params.n)]
        results: list[list[Completion]] = [[] for _ in conversations]
        devices = [self.device] if self.device.type == "cuda" else []
        with self._sampling(), torch.random.fork_rng(devices=devices, enabled=params.seed is not None):
            if params.seed is not None:
                torch.manual_seed(params.seed)
            for start in range(0, len(rows), self.max_batch_size):
                chunk = rows[start : start + self.max_batch_size]
                outs = self._generate([p for _, p in chunk], params)
                for (ci, _), completion in zip(chunk, outs):
                    results[ci].append(completion)
        return results

    def generate_seeded(
        self,
        conversations: list[list[ChatMessage]],
        tools: list[ToolSchema] | None,
        params: SamplingParams,
        seeds: list[int | None],
        max_new_tokens: list[int] | None = None,
    ) -> list[Completion]:
        """One completion per conversation, row i sampled with its own seed `seeds[i]` (None: the global
        RNG), all rows in one batch where the fast path applies: the calls of several callers (each with
        its own seed, kit.llm.coalesce) run as one. A row's draws come from its own random stream, so
        they do not depend on the other rows (its logits can, by float rounding in a batch). Elsewhere,
        one `generate_batch` per row with its seed. `max_new_tokens`: a limit per row (default: params')."""
        from kit.llm.fast import effective_config, plain_sampling

        params = as_params(params).model_copy(update={"n": 1, "seed": None})
        gen = self._generation_config(params)
        effective = effective_config(self.model, gen) if self.fast_decode else None
        limits = list(max_new_tokens or [params.max_new_tokens] * len(conversations))
        if effective is None or not plain_sampling(effective) or any(s is None for s in seeds):
            return [self.generate_batch([conv], tools, params.model_copy(update={"seed": seed, "max_new_tokens": m}))[0][0]
                    for conv, seed, m in zip(conversations, seeds, limits)]
        prompts = [self.render(conv, tools) for conv in conversations]
        out: list[Completion] = []
        with self._sampling():
            for start in range(0, len(prompts), self.max_batch_size):
                end = start + self.max_batch_size
                out += self._generate_fast(prompts[start:end], params, effective, seeds=seeds[start:end],
                                           limits=limits[start:end])
        return out

    @contextlib.contextmanager
    def _sampling(self) -> Any:
        """The model in eval mode under `_grad_off()` for one generation call, its training mode restored after;
        a trainer holds the model when it was training: its weights may have moved since the last call."""
        was_training = self.model.training
        if was_training:
            self.invalidate()
        self.model.eval()
        try:
            with self._grad_off():
                yield
        finally:
            self.model.train(was_training)

    def _grad_off(self) -> Any:
        """The autograd mode generation runs under (inference mode: no version counters either)."""
        import torch

        return torch.inference_mode()

    def _generate(self, prompts: list[str], params: SamplingParams) -> list[Completion]:
        """One chunk of rows (at most `max_batch_size`): the fast path where it applies, else
        `model.generate` from the prefix cache's shared prefix, else one left-padded `model.generate`."""
        from kit.llm.fast import effective_config, plain_sampling

        gen = self._generation_config(params)
        if self.fast_decode:
            effective = effective_config(self.model, gen)
            if plain_sampling(effective):
                return self._generate_fast(prompts, params, effective)
        extra = {"tokenizer": self.tokenizer} if params.stop else {}
        if self.prefix_cache is not None:
            rows = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
            # every row keeps at least one token of its own: generate needs a new input to start from
            shared = min(common_prefix_len(rows), min(len(r) for r in rows) - 1)
            kv = self.prefix_cache.lookup(self.model, rows[0][:shared]) if shared > 0 else None
            if kv is not None:
                return self._generate_from_prefix(rows, shared, kv, gen, extra, params)
        return self._generate_padded(prompts, params, gen)

    def _generate_padded(self, prompts: list[str], params: SamplingParams, gen: Any) -> list[Completion]:
        """One `model.generate` call over the rows left-padded to one width, nothing cached."""
        extra = {"tokenizer": self.tokenizer} if params.stop else {}
        enc = self.tokenizer(
            prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False
        ).to(self.device)
        out = self.model.generate(**enc, generation_config=gen, **extra)
        new_tokens = out[:, enc["input_ids"].shape[1] :].tolist()
        prompt_lens = enc["attention_mask"].sum(dim=1).tolist()
        return [self._completion(ids, int(n), params.stop) for ids, n in zip(new_tokens, prompt_lens)]

    def _generate_fast(self, prompts: list[str], params: SamplingParams, gen: Any,
                       seeds: list[int] | None = None, limits: list[int] | None = None) -> list[Completion]:
        """kit.llm.fast.generate: per-row prefix reuse, ragged prefill, finished rows leave the batch."""
        from kit.llm.fast import Sampler, generate_rows

        rows = self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        with self.packed.use(self.model) if self.packed is not None else contextlib.nullcontext():
            new_tokens = generate_rows(
                self.model,
                rows,
                sampler=Sampler(gen, seeds),
                max_new_tokens=limits or params.max_new_tokens,
                eos_ids=self.eos_ids,
                pad_id=self.pad_id,
                store=self.prefix_cache,
                stop_criteria=self._stop_strings(params.stop),
                chunk=self.prefill_chunk,
                eager_mask=self.model.config._attn_implementation == "eager",
                stats=self.stats,
                split_attention=self.shared_prefix_attention,
            )
        return [self._completion(ids, len(row), params.stop) for ids, row in zip(new_tokens, rows)]

    def _stop_strings(self, stop: list[str]) -> Any:
        """transformers' StopStringCriteria for `stop` (built once per set: it scans the vocabulary)."""
        key = tuple(s for s in stop if s)
        if not key:
            return None
        if key not in self._stop_criteria:
            from transformers import StopStringCriteria

            if len(self._stop_criteria) >= 8:
                self._stop_criteria.clear()
            self._stop_criteria[key] = StopStringCriteria(self.tokenizer, list(key))
        return self._stop_criteria[key]

    def _generate_from_prefix(self, rows, shared, kv, gen, extra, params) -> list[Completion]:
        """Generate with the first `shared` tokens of every row already in `kv` (batch-1 states)."""
        import torch

        width = max(len(r) for r in rows) - shared
        ids, mask = [], []
        for row in rows:
            pads = width - (len(row) - shared)
            ids.append(row[:shared] + [self.pad_id] * pads + row[shared:])
            mask.append([1] * shared + [0] * pads + [1] * (len(row) - shared))
        input_ids = torch.tensor(ids, device=self.device)
        cache = self.prefix_cache.expand(self.model, kv, len(rows))
        gen.cache_implementation = None  # a cache object is passed instead
        out = self.model.generate(
            input_ids=input_ids,
            attention_mask=torch.tensor(mask, device=self.device),
            cache=cache,
            generation_config=gen,
            **extra,
        )
        new_tokens = out[:, input_ids.shape[1] :].tolist()
        return [self._completion(t, len(r), params.stop) for t, r in zip(new_tokens, rows)]

    def _generation_config(self, params: SamplingParams) -> Any:
        gen = copy.deepcopy(self.model.generation_config)
        sample = params.temperature > 0
        gen.update(
            max_new_tokens=params.max_new_tokens,
            do_sample=sample,
            temperature=params.temperature if sample else None,
            top_p=params.top_p if sample else None,
            # None: model.generate (and so the fast path) fills in the model's top_k, else transformers'
            # default, 50 -- not OpenAI's "no top-k"; 0 turns top-k off
            top_k=params.top_k if sample else None,
            num_return_sequences=1,
            pad_token_id=self.pad_id,
            eos_token_id=sorted(self.eos_ids),
            use_cache=True,
            stop_strings=params.stop or None,
        )
        return gen

    def _completion(self, ids: list[int], prompt_tokens: int, stop: list[str]) -> Completion:
        cut = next((i for i, t in enumerate(ids) if t in self.eos_ids), None)
        if cut is not None:
            body, n_tokens, finish = ids[:cut], cut + 1, "stop"
            sampled = ids[: cut + 1]  # the end-of-turn id is sampled too: training teaches to stop
        else:
            body = ids
            while body and body[-1] == self.pad_id:  # rows that stopped on a stop string are padded
                body = body[:-1]
            n_tokens, finish = len(body), ("length" if len(body) == len(ids) else "stop")
            sampled = body
        raw = self.tokenizer.decode([t for t in body if t not in self.skip_ids], skip_special_tokens=False)
        hits = [raw.find(s) for s in stop if s and s in raw]
        if hits:
            raw, finish = raw[: min(hits)], "stop"
        text, calls, errors = parse_tool_calls(raw)
        return Completion(
            text=text,
            tool_calls=calls,
            raw=raw,
            parse_errors=errors,
            prompt_tokens=prompt_tokens,
            completion_tokens=n_tokens,
            finish_reason="tool_calls" if calls else finish,
            token_ids=list(sampled),
        )

