"""Model backends behind one call shape: OpenAI-style messages + tool schemas in, Completions out.

    backend = make_backend("embedded")                       # SmolLM2-135M-Instruct, CPU ok
    backend = make_backend("hf:/path/to/model-folder")      # any HF folder, CPU or GPU
    backend = make_backend("openai:http://127.0.0.1:8000/v1#model-name")  # vLLM, SGLang, ...
    backend = make_backend("vllm:/path/to/model-folder")    # vLLM offline engine (GPU)
    backend = make_backend({"spec": "openai:http://127.0.0.1:8000/v1", "tool_mode": "prompt"})

    completions = backend.chat(messages, tools, n=4, temperature=0.8, seed=0)
    groups = backend.generate_batch([conv1, conv2], tools, SamplingParams(n=8))

Modules: spec (ModelSpec, the one reader of model specs), types (records, Backend), toolcalls
(render/parse <tool_call>), prompting (chat templates), hf, openai_backend, vllm_backend,
embedded (the GGUF -> HF folder). Importing kit.llm imports neither torch nor vllm; a backend
imports what it needs when constructed.
"""

from __future__ import annotations

from typing import Any

from kit.llm.embedded import EmbeddedModelMissing, embedded_model_path, ensure_embedded_model
from kit.llm.openai_backend import EndpointError
from kit.llm.spec import ModelSpec
from kit.llm.toolcalls import parse_tool_calls, render_tool_call, render_tools_section, to_prompt_messages
from kit.llm.types import Backend, Completion, ChatMessage, SamplingParams, ToolCall, ToolSchema, as_params

__all__ = [
    "Backend", "Completion", "EmbeddedModelMissing", "EndpointError", "ChatMessage", "SamplingParams",
    "ToolCall", "ToolSchema", "as_params", "embedded_model_path", "ensure_embedded_model",
    "make_backend", "ModelSpec", "parse_tool_calls", "render_tool_call", "render_tools_section",
    "to_prompt_messages",
]


def make_backend(spec: str | dict[str, Any] | ModelSpec, **options: Any) -> Backend:
    """Build the backend a spec names (kit.llm.spec); keyword options go to its constructor."""
    parsed = ModelSpec.parse(spec)
    kind, kwargs = parsed.kind, parsed.backend_kwargs()
    kwargs.update(options)
    if kind == "embedded" or kwargs.get("path") == "embedded":
        kwargs["path"] = str(ensure_embedded_model())
        kind = "hf" if kind == "embedded" else kind
    if kind == "hf":
        from kit.llm.hf import HFBackend

        return HFBackend(**kwargs)
    if kind == "vllm":
        from kit.llm.vllm_backend import VLLMBackend

        return VLLMBackend(**kwargs)
    from kit.llm.openai_backend import OpenAIBackend

    return OpenAIBackend(**kwargs)
