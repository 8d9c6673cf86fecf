"""The one call shape every backend speaks: OpenAI-style messages and tool schemas in,
`Completion`s out.

Chat messages (`ChatMessage`) are plain dicts, as the OpenAI chat API spells them (a kit.trajectory
`Message` is the stored record; kit.rollout.views renders records into these):
  {"role": "system" | "user" | "assistant" | "tool", "content": str,
   "tool_calls": [{"id", "type": "function", "function": {"name", "arguments": <JSON str>}}],
   "tool_call_id": str}
Tools are OpenAI function schemas: {"type": "function", "function": {"name", "description",
"parameters"}}. A completion's tool calls come back already decoded (`arguments` is a dict);
text that looked like a tool call but did not parse is listed in `parse_errors`, never raised,
so a rollout can show the model an error observation and go on.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import json
from collections.abc import Coroutine
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, Field

from kit.llm.capabilities import Capabilities

ChatMessage = dict[str, Any]  # one chat message in OpenAI form; kit.trajectory.Message is the record
ToolSchema = dict[str, Any]
ToolMode = Literal["auto", "native", "prompt"]
T = TypeVar("T")


class ToolCall(BaseModel):
    """One decoded tool call: what a backend reads out of a completion and what a trajectory
    stores (kit.trajectory; its JSON in trajectories.jsonl is this model's dump, fields in this order)."""

    id: str = Field(default="", description="Call id; tool results answer it via `tool_call_id`.")
    name: str = Field(description="Function name as the model wrote it (not checked against the tools).")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Decoded JSON arguments.")
    requestor: Literal["assistant", "user"] = Field(
        default="assistant", description="Who made the call: the agent, or the user simulator (its own tools).")

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI `tool_calls` entry for an assistant message (arguments as a JSON string)."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }


class Completion(BaseModel):
    """One sampled assistant turn."""

    text: str = Field(description="Assistant text with tool-call blocks removed.")
    tool_calls: list[ToolCall] = Field(default_factory=list)
    raw: str = Field(description="What the model produced, before tool-call parsing.")
    parse_errors: list[str] = Field(
        default_factory=list, description="One message per tool-call block that could not be decoded."
    )
    prompt_tokens: int | None = Field(default=None, description="Prompt length; None if the server did not say.")
    completion_tokens: int | None = Field(
        default=None, description="Tokens generated for this completion; None if unknown (e.g. n>1 usage)."
    )
    finish_reason: str | None = Field(default=None, description='"stop", "length" or "tool_calls".')
    token_ids: list[int] | None = Field(default=None, description=(
        "The ids the model sampled, up to and including the end-of-turn id; None where the backend "
        "does not see them (caps.token_ids). Training scores these, never a re-tokenization of `raw`."))
    logprobs: list[float] | None = Field(
        default=None, description="The log-probability of each of `token_ids`, where the backend reports it (caps.logprobs).")

    def to_message(self) -> ChatMessage:
        """This completion as an OpenAI assistant message, ready to append to the conversation."""
        msg: ChatMessage = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            msg["tool_calls"] = [tc.to_openai() for tc in self.tool_calls]
        return msg


class SamplingParams(BaseModel):
    """Sampling knobs shared by all backends (OpenAI names where they exist)."""

    n: int = Field(default=1, ge=1, description="Completions per conversation.")
    temperature: float = Field(default=1.0, ge=0.0, description="0 means greedy.")
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0, description=(
        "Sample among the k likeliest tokens. 0: no top-k, the full distribution (what on-policy RL "
        "needs: the loss scores tokens under the full softmax). None: the backend's default (hf: the "
        "model's generation_config, else transformers' 50; vLLM: the model's; HTTP: the server's)."))
    max_new_tokens: int = Field(default=256, ge=1, description="Sent as `max_tokens` to HTTP servers.")
    seed: int | None = Field(default=None, description="Makes sampling reproducible where the backend allows.")
    stop: list[str] = Field(default_factory=list, description="Stop strings; not included in the output.")


def as_params(params: SamplingParams | dict | None = None, **overrides: Any) -> SamplingParams:
    """Accept a SamplingParams, a dict, or keyword overrides."""
    if params is None:
        base: dict[str, Any] = {}
    elif isinstance(params, SamplingParams):
        base = params.model_dump()
    else:
        base = dict(params)
    base.update({k: v for k, v in overrides.items() if v is not None})
    if isinstance(base.get("stop"), str):
        base["stop"] = [base["stop"]]
    return SamplingParams(**base)


def normalize_tools(tools: list[ToolSchema] | None) -> list[ToolSchema]:
    """Accept OpenAI `{"type": "function", "function": {...}}` or bare `{"name", "parameters"}`."""
    out = []
    for tool in tools or []:
        if "function" in tool:
            out.append({"type": "function", **tool, "function": dict(tool["function"])})
        else:
            out.append({"type": "function", "function": dict(tool)})
    return out


class Backend(abc.ABC):
    """Abstract base: subclasses implement `generate_batch`; `chat` is one conversation of it."""

    tool_mode: ToolMode = "auto"
    caps: ClassVar[Capabilities] = Capabilities()
    """What this backend offers beyond generation (kit.llm.capabilities); subclasses declare theirs."""

    @abc.abstractmethod
    def generate_batch(
        self,
        conversations: list[list[ChatMessage]],
        tools: list[ToolSchema] | None = None,
        params: SamplingParams | dict | None = None,
    ) -> list[list[Completion]]:
        """For each conversation, `params.n` completions. `tools` is shared by all of them."""

    def chat(
        self,
        messages: list[ChatMessage],
        tools: list[ToolSchema] | None = None,
        params: SamplingParams | dict | None = None,
        **overrides: Any,
    ) -> list[Completion]:
        """`params.n` completions of one conversation; keyword overrides like `n=4, seed=0` work."""
        return self.generate_batch([messages], tools, as_params(params, **overrides))[0]

    def clear_cache(self) -> None:
        """Forget cached prompt states (a prefix cache), so the next call starts cold. No-op by default."""

    def close(self) -> None:
        """Release what the backend holds (HTTP clients, engines). Safe to call twice."""


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine from sync code, also inside a notebook whose event loop is already running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
