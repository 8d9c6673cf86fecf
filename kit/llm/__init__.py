"""Model backends behind one call shape: OpenAI-style messages + tool schemas in, Completions out.

    backend = make_backend("embedded")                       # SmolLM2-135M-Instruct, CPU ok
    backend = make_backend("hf:/path/to/model-folder")      # any HF folder, CPU or GPU
    backend = make_backend("openai:http://127.0.0.1:8000/v1#model-name")  # vLLM, SGLang, ...
    backend = make_backend("vllm:/path/to/model-folder")    # vLLM offline engine (GPU)
    backend = make_backend({"spec": "openai:http://127.0.0.1:8000/v1", "tool_mode": "prompt"})

    completions = backend.chat(messages, tools, n=4, temperature=0.8, seed=0)
    groups = backend.generate_batch([conv1, conv2], tools, SamplingParams(n=8))

Modules: types (records, Backend), toolcalls (render/parse <tool_call>), prompting (chat
templates), hf, openai_backend, vllm_backend, embedded (the GGUF -> HF folder). Importing
kit.llm imports neither torch nor vllm; a backend imports what it needs when constructed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kit.llm.embedded import EmbeddedModelMissing, embedded_model_path, ensure_embedded_model
from kit.llm.openai_backend import EndpointError
from kit.llm.toolcalls import parse_tool_calls, render_tool_call, render_tools_section, to_prompt_messages
from kit.llm.types import Backend, Completion, Message, SamplingParams, ToolCall, ToolSchema, as_params

__all__ = [
    "Backend", "Completion", "EmbeddedModelMissing", "EndpointError", "Message", "SamplingParams",
    "ToolCall", "ToolSchema", "as_params", "embedded_model_path", "ensure_embedded_model",
    "make_backend", "parse_spec", "parse_tool_calls", "render_tool_call", "render_tools_section",
    "to_prompt_messages",
]

KINDS = ("embedded", "hf", "openai", "vllm")


def parse_spec(spec: str | dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A backend spec -> (kind, constructor kwargs).

    Strings: "embedded", "hf:PATH", "vllm:PATH", "openai:URL[#MODEL]", or a bare existing folder
    (= hf). PATH may be "embedded". Dicts: {"spec": <string>, **options} or
    {"backend": kind, **kwargs}; options are the backend's constructor arguments.
    """
    if isinstance(spec, dict):
        opts = dict(spec)
        if "spec" in opts:
            kind, base = parse_spec(opts.pop("spec"))
            return kind, {**base, **opts}
        kind = opts.pop("backend", opts.pop("kind", None))
        if kind not in KINDS:
            raise ValueError(f"backend spec dict needs 'spec' or 'backend' in {KINDS}, got {spec!r}")
        return kind, opts
    spec = spec.strip()
    if spec == "embedded":
        return "embedded", {}
    kind, sep, rest = spec.partition(":")
    if sep and kind in ("hf", "vllm"):
        return kind, {"path": rest}
    if sep and kind == "openai":
        url, _, model = rest.partition("#")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"openai spec needs an http(s) URL: 'openai:http://host:port/v1#model', got {spec!r}")
        return "openai", {"base_url": url, "model": model or None}
    if Path(spec).expanduser().is_dir():
        return "hf", {"path": str(Path(spec).expanduser())}
    raise ValueError(
        f"unknown backend spec {spec!r}: use 'embedded', 'hf:/model/folder', "
        "'openai:http://host:port/v1#model' or 'vllm:/model/folder'"
    )


def make_backend(spec: str | dict[str, Any], **options: Any) -> Backend:
    """Build the backend a spec names; keyword options go to its constructor."""
    kind, kwargs = parse_spec(spec)
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
