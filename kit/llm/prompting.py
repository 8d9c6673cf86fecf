"""From an OpenAI conversation to the exact prompt string a local model sees.

One function, `render_prompt`, is used by every local backend (transformers, vLLM) and should
be used by SFT data building too, so a model is trained on the same text it is sampled from.

Tool mode:
  "native"  the tokenizer's own chat template renders `tools` and `tool_calls`
  "prompt"  tools are written into the system message, Hermes style (kit.llm.toolcalls)
  "auto"    native when the template really renders tools, prompt otherwise
Either way the output is parsed by `kit.llm.toolcalls.parse_tool_calls`.
"""

from __future__ import annotations

from typing import Any

from kit.llm.toolcalls import to_prompt_messages, to_template_messages
from kit.llm.types import ChatMessage, ToolMode, ToolSchema, normalize_tools

_PROBE_NAME = "kit_probe_tool_7f3a"
_PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": _PROBE_NAME,
        "description": "probe",
        "parameters": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]},
    },
}


def template_supports_tools(tokenizer: Any) -> bool:
    """True when the chat template renders a tool schema it is given.

    Checking that the probe tool's name shows up in the prompt catches both templates without
    tools and templates that accept `tools=` and silently drop it (SmolLM2's).
    """
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # several named templates; HF picks "tool_use" when tools are given
        template = template.get("tool_use") or template.get("default")
    if not template or "tools" not in template:
        return False
    try:
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": "hi"}], tools=[_PROBE_TOOL], tokenize=False, add_generation_prompt=True
        )
    except Exception:  # noqa: BLE001 -- a template that raises on tools does not support them
        return False
    return _PROBE_NAME in rendered


def resolve_tool_mode(tokenizer: Any, mode: ToolMode) -> str:
    if mode not in ("auto", "native", "prompt"):
        raise ValueError(f"tool_mode must be 'auto', 'native' or 'prompt', got {mode!r}")
    if mode == "auto":
        return "native" if template_supports_tools(tokenizer) else "prompt"
    return mode


def render_prompt(
    tokenizer: Any,
    messages: list[ChatMessage],
    tools: list[ToolSchema] | None = None,
    tool_mode: str = "prompt",
    add_generation_prompt: bool = True,
) -> str:
    """The prompt text for `messages` (+ `tools`). `tool_mode` must already be resolved."""
    tools = normalize_tools(tools)
    if tool_mode == "native":
        return tokenizer.apply_chat_template(
            to_template_messages(messages),
            tools=tools or None,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )
    if tool_mode == "prompt":
        return tokenizer.apply_chat_template(
            to_prompt_messages(messages, tools), tokenize=False, add_generation_prompt=add_generation_prompt
        )
    raise ValueError(f"tool_mode must be resolved to 'native' or 'prompt' first, got {tool_mode!r}")
