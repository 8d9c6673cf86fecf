"""vLLM offline engine backend (GPU only; the `vllm` extra).

Prompts are rendered by kit.llm.prompting, exactly as for the transformers backend, tokenized
here without extra special tokens, and passed to `LLM.generate` as token prompts: so a model sees
byte-identical prompts on either backend, and a template's own BOS is never doubled. (`LLM.chat`
would render with vLLM's copy of the template and cannot do "prompt" tool mode.) Output is parsed
by the shared tool-call parser.

Importing this module never imports vllm; constructing `VLLMBackend` without vllm or without
CUDA raises kit.errors.Unavailable (a RuntimeError) that says what is missing; `unavailable()`
says it before anything loads (recipe validation).

One engine per process: each `vllm.LLM` takes its gpu_memory_utilization (0.85) of the card, so a
second in-process engine for another model (an agent and its user simulator, say) cannot fit
beside the first. Constructing a `VLLMBackend` for a different model while one is alive in this
process raises `TwoEngines` before vllm is imported; serve one of them with `vllm serve` (`make
vllm-serve`) and name it 'openai:http://HOST:PORT/v1#MODEL'. The same folder twice shares nothing
either, but is the caller's business (kit.llm.make_backend caches by spec).
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any

from kit.errors import Unavailable
from kit.llm.prompting import render_prompt, resolve_tool_mode
from kit.llm.capabilities import Capabilities
from kit.llm.toolcalls import parse_tool_calls
from kit.llm.types import Backend, Completion, ChatMessage, SamplingParams, ToolMode, ToolSchema, as_params


NO_VLLM = ("the vllm backend needs the `vllm` package (GPU only), which is not in the kit's environment",
           "serve the model with `vllm serve` from its own environment (make vllm-env; make vllm-serve "
           "VLLM_MODEL=PATH; README: GPU install) and name it 'openai:http://HOST:PORT/v1#model', or use the "
           "'hf' backend (vLLM 0.33.0 requires transformers<5.21, the kit pins 5.24)")
NO_CUDA = ("the vllm backend needs a CUDA GPU and this machine has none",
           "on CPU use backend 'hf' (recipes: `backend: hf`; specs: 'hf:PATH')")


class TwoEngines(Unavailable):
    """A second in-process vLLM engine, for another model, while one is alive in this process."""


_LIVE: "weakref.WeakSet[VLLMBackend]" = weakref.WeakSet()  # this process's engines (closed ones drop out)


def _check_one_engine(path: str) -> None:
    """Raise TwoEngines when an alive VLLMBackend of this process serves a model other than `path`."""
    other = next((b for b in list(_LIVE) if getattr(b, "llm", None) is not None
                  and os.path.realpath(b.path) != os.path.realpath(path)), None)
    if other is not None:
        raise TwoEngines(
            f"two in-process vLLM engines on one GPU: one already serves {other.path} in this process, and "
            f"{path} would need a second (each takes its gpu_memory_utilization of the card)",
            f"serve one of them with `vllm serve` in its own environment (make vllm-serve VLLM_MODEL={path}) and "
            "name it 'openai:http://HOST:PORT/v1#MODEL' (README: GPU install); or close() the first backend")


def unavailable() -> tuple[str, str] | None:
    """(what is missing, how to fix it) when this machine cannot run the vllm backend, else None."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return NO_VLLM
    import torch

    return None if torch.cuda.is_available() else NO_CUDA


class VLLMBackend(Backend):
    """A model folder served in-process by vLLM.

    Args:
        path: an HF model folder.
        tool_mode: "auto" | "native" | "prompt" (see kit.llm.prompting).
        dtype, gpu_memory_utilization, max_model_len, tensor_parallel_size: passed to `vllm.LLM`.
        logprobs: completions carry the log-probability of each sampled token (vLLM's
            `SamplingParams(logprobs=0)`: the sampled token only; vLLM's default logprobs mode is
            the model's raw distribution, before temperature and top-p).
        engine_kwargs: anything else `vllm.LLM` accepts (enable_prefix_caching, seed, ...).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        tool_mode: ToolMode = "auto",
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        tensor_parallel_size: int = 1,
        logprobs: bool = True,
        **engine_kwargs: Any,
    ):
        self.caps = Capabilities(tokenizer=True, token_ids=True, logprobs=logprobs)
        _check_one_engine(str(path))
        try:
            import vllm
        except ImportError as exc:
            from kit.errors import Unavailable

            raise Unavailable(*NO_VLLM) from exc
        import torch

        if not torch.cuda.is_available():
            from kit.errors import Unavailable

            raise Unavailable(*NO_CUDA)
        if not Path(path).is_dir():
            from kit.errors import NotFound

            raise NotFound(f"model folder not found: {path} (hub ids are not downloaded)")
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        self._vllm = vllm
        self.path = str(path)
        kwargs = dict(
            model=self.path,
            dtype=dtype,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            **engine_kwargs,
        )
        if max_model_len is not None:
            kwargs["max_model_len"] = max_model_len
        self.llm = vllm.LLM(**kwargs)
        _LIVE.add(self)
        self.tokenizer = self.llm.get_tokenizer()
        self.tool_mode = resolve_tool_mode(self.tokenizer, tool_mode)

    def render(self, messages: list[ChatMessage], tools: list[ToolSchema] | None = None) -> str:
        return render_prompt(self.tokenizer, messages, tools, self.tool_mode)

    def generate_batch(
        self,
        conversations: list[list[ChatMessage]],
        tools: list[ToolSchema] | None = None,
        params: SamplingParams | dict | None = None,
    ) -> list[list[Completion]]:
        params = as_params(params)
        prompts = []
        for conv in conversations:
            ids = self.tokenizer(self.render(conv, tools), add_special_tokens=False)["input_ids"]
            prompts.append({"prompt_token_ids": ids})
        # One SamplingParams per conversation: with a seed, conversation i samples with seed + i,
        # so equal prompts in a batch still give different (reproducible) samples.
        sampling = [self._sampling(params, None if params.seed is None else params.seed + i)
                    for i in range(len(prompts))]
        outputs = self.llm.generate(prompts, sampling_params=sampling, use_tqdm=False)
        results = []
        for out in outputs:  # vLLM returns outputs in prompt order
            n_prompt = len(out.prompt_token_ids or [])
            results.append([self._completion(o, n_prompt, self.caps.logprobs) for o in out.outputs])
        return results

    def _sampling(self, params: SamplingParams, seed: int | None) -> Any:
        extra = {} if params.top_k is None else {"top_k": params.top_k or -1}  # vLLM: -1 = no top-k
        return self._vllm.SamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_new_tokens,
            seed=seed,
            stop=params.stop or None,
            logprobs=0 if self.caps.logprobs else None,
            **extra,
        )

    @staticmethod
    def _completion(out: Any, prompt_tokens: int, logprobs: bool = False) -> Completion:
        """A kit Completion from a vLLM CompletionOutput (its `logprobs`: one {token id: Logprob} per
        sampled token, the sampled token always among them)."""
        raw = out.text
        text, calls, errors = parse_tool_calls(raw)
        return Completion(
            text=text,
            tool_calls=calls,
            raw=raw,
            parse_errors=errors,
            prompt_tokens=prompt_tokens,
            completion_tokens=len(out.token_ids),
            finish_reason="tool_calls" if calls else out.finish_reason,
            token_ids=list(out.token_ids),
            logprobs=[float(step[t].logprob) for t, step in zip(out.token_ids, out.logprobs)]
            if logprobs and out.logprobs is not None else None,
        )

    def close(self) -> None:
        self.llm = None  # vLLM frees GPU memory when the engine is garbage-collected
