"""Tool calls as text, Hermes/Qwen style: render them into a prompt, parse them out of output.

Models whose chat template knows no tools (SmolLM2's) still get tools this way: the schemas go
into the system message with an instruction to answer

    <tool_call>
    {"name": "<function-name>", "arguments": {<args-json-object>}}
    </tool_call>

past assistant tool calls are written back in that same form, and tool results become a user
turn of `<tool_response>...</tool_response>` blocks (as Qwen2.5's own template does). The parser
is shared by every backend and every tool mode, so one model output always parses one way.

The parser is lenient only where small models are sloppy in harmless ways (a missing closing
tag, a ```json fence, Python-style single quotes); anything else that does not decode to
{"name": str, "arguments": object} becomes a `parse_errors` entry, not an exception.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
import warnings
from collections.abc import Callable
from typing import Any

from kit.llm.types import ChatMessage, ToolCall, ToolSchema, normalize_tools

OPEN, CLOSE = "<tool_call>", "</tool_call>"

TOOLS_PROMPT = """# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{{"name": <function-name>, "arguments": <args-json-object>}}
</tool_call>"""

# A block runs from <tool_call> to </tool_call>, or, when the model forgot to close it, to the
# next <tool_call> or the end of the output.
_BLOCK = re.compile(r"<tool_call>(.*?)(</tool_call>|(?=<tool_call>)|\Z)", re.DOTALL)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?\s*```$", re.DOTALL)


class ToolCallSyntaxError(ValueError):
    """A <tool_call> block that does not decode; reported in `parse_errors`, never raised out."""


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


# ----- rendering ---------------------------------------------------------------------------


def render_tools_section(tools: list[ToolSchema]) -> str:
    """The system-prompt section that lists the tools and says how to call them."""
    lines = "\n".join(json.dumps(t, ensure_ascii=False) for t in normalize_tools(tools))
    return TOOLS_PROMPT.format(tools=lines)


def render_tool_call(name: str, arguments: dict[str, Any] | str) -> str:
    """One call in the exact form the model is asked to produce."""
    args = _arguments_dict(arguments)
    body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
    return f"{OPEN}\n{body}\n{CLOSE}"


def to_prompt_messages(messages: list[ChatMessage], tools: list[ToolSchema] | None) -> list[ChatMessage]:
    """Rewrite an OpenAI conversation into plain system/user/assistant text turns.

    Tools go into the system message (one is added if there is none), assistant `tool_calls`
    become `<tool_call>` blocks after the assistant's text, and each run of consecutive tool
    messages becomes one user turn of `<tool_response>` blocks.
    """
    out: list[ChatMessage] = []
    for msg in messages:
        role, content = msg["role"], _text(msg.get("content"))
        if role == "assistant":
            calls = [render_tool_call(tc["function"]["name"], tc["function"].get("arguments") or {})
                     for tc in msg.get("tool_calls") or []]
            out.append({"role": "assistant", "content": "\n".join(([content] if content else []) + calls)})
        elif role == "tool":
            block = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1].get("_tool_turn"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool_turn": True})
        else:
            out.append({"role": role, "content": content})
    for msg in out:
        msg.pop("_tool_turn", None)
    if tools:
        section = render_tools_section(tools)
        if out and out[0]["role"] == "system":
            out[0]["content"] = f"{out[0]['content']}\n\n{section}" if out[0]["content"] else section
        else:
            out.insert(0, {"role": "system", "content": section})
    return out


def to_template_messages(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Prepare OpenAI messages for a chat template that supports tools natively.

    HF templates iterate `arguments` as a mapping, while the OpenAI format carries a JSON
    string; content must be a string (never None) for most templates.
    """
    out = []
    for msg in messages:
        new = {**msg, "content": _text(msg.get("content"))}
        if msg.get("tool_calls"):
            new["tool_calls"] = [
                {**tc, "type": "function",
                 "function": {**tc["function"], "arguments": _arguments_dict(tc["function"].get("arguments"))}}
                for tc in msg["tool_calls"]
            ]
        out.append(new)
    return out


# ----- parsing -----------------------------------------------------------------------------


def parse_tool_calls(
    raw: str, make_id: Callable[[], str] = new_call_id
) -> tuple[str, list[ToolCall], list[str]]:
    """Split model output into (text, tool calls, parse errors).

    Every `<tool_call>` block is removed from the text whether or not it decodes; a block that
    does not decode yields one error message, worded so it can be shown to the model.
    """
    calls: list[ToolCall] = []
    errors: list[str] = []
    texts: list[str] = []
    last = 0
    for i, match in enumerate(_BLOCK.finditer(raw), start=1):
        texts.append(raw[last:match.start()])
        last = match.end()
        body = match.group(1).strip()
        if not match.group(2):  # unclosed: the JSON ends where it ends, the rest is text
            body, rest = _split_leading_json(body)
            texts.append(rest)
        try:
            for name, args in _decode_block(body):
                calls.append(ToolCall(id=make_id(), name=name, arguments=args))
        except ToolCallSyntaxError as exc:
            snippet = body if len(body) <= 200 else body[:200] + "..."
            errors.append(f"tool call {i} could not be parsed: {exc}. Got: {snippet!r}")
    texts.append(raw[last:])
    text = "\n".join(t.strip() for t in texts if t.strip()).replace(CLOSE, "").strip()
    return text, calls, errors


def _split_leading_json(body: str) -> tuple[str, str]:
    """For an unclosed block: (the leading JSON value, whatever follows it)."""
    try:
        _, end = json.JSONDecoder().raw_decode(body)
    except json.JSONDecodeError:
        return body, ""
    return body[:end], body[end:]


def _decode_block(body: str) -> list[tuple[str, dict[str, Any]]]:
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body:
        raise ToolCallSyntaxError("empty <tool_call> block")
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        value = _python_literal(body)
        if value is None:
            raise ToolCallSyntaxError(f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    items = value if isinstance(value, list) else [value]
    if not items:
        raise ToolCallSyntaxError("empty list of tool calls")
    return [_decode_call(item) for item in items]


def _python_literal(body: str) -> Any:
    """Single-quoted dicts (`{'name': 'f'}`) are a common small-model slip; literal_eval runs no code."""
    if len(body) > 20_000 or not any(s in body for s in ("'", "True", "False", "None")):
        return None
    try:
        with warnings.catch_warnings():  # odd escapes like "\`" warn at parse time; the text is data
            warnings.simplefilter("ignore")
            value = ast.literal_eval(body)
        return json.loads(json.dumps(value))  # tuples -> lists, int keys -> str; sets, bytes fail
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None


def _decode_call(item: Any) -> tuple[str, dict[str, Any]]:
    if not isinstance(item, dict):
        raise ToolCallSyntaxError(f"expected a JSON object, got {type(item).__name__}")
    if isinstance(item.get("function"), dict):  # an OpenAI-shaped call echoed back
        item = item["function"]
    name = item.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ToolCallSyntaxError('missing "name" (a non-empty string)')
    args = item.get("arguments", item.get("parameters", {}))
    if args is None:
        args = {}
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise ToolCallSyntaxError(f'"arguments" is a string that is not JSON ({exc.msg})') from None
    if not isinstance(args, dict):
        raise ToolCallSyntaxError(f'"arguments" must be a JSON object, got {type(args).__name__}')
    return name.strip(), args


def _arguments_dict(arguments: Any) -> dict[str, Any]:
    """OpenAI carries arguments as a JSON string; templates and renderers want the object."""
    if isinstance(arguments, dict):
        return arguments
    if not arguments:
        return {}
    try:
        value = json.loads(arguments)
    except (TypeError, json.JSONDecodeError):
        return {"__raw__": str(arguments)}  # keep the model's broken text visible in the prompt
    return value if isinstance(value, dict) else {"__raw__": value}


def _text(content: Any) -> str:
    """OpenAI content may be None or a list of parts; templates want one string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in content)
    return str(content)
