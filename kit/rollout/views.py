"""What each role sees of a trajectory, as OpenAI-style chat messages.

The agent sees user text, its own messages, its own tool calls and their results, and the
errors the environment reports to it. The user sees the same dialogue from the other side
(the agent's messages as `user`, its own as `assistant`) plus its own tool calls; it
never sees the agent's tool calls. This is tau2's split of the two histories.
"""

from __future__ import annotations

from kit.trajectory import Message


def _calls(m: Message, requestor: str) -> list[dict]:
    return [c.to_openai() for c in (m.tool_calls or []) if c.requestor == requestor]


def agent_view(messages: list[Message], system: str) -> list[dict]:
    out: list[dict] = [{"role": "system", "content": system}]
    for m in messages:
        if m.role == "assistant":
            msg: dict = {"role": "assistant", "content": m.content or ""}
            calls = _calls(m, "assistant")
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        elif m.role == "user" and m.has_text():
            out.append({"role": "user", "content": m.content})
        elif m.role == "tool" and m.requestor == "assistant":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content or ""})
        elif m.role == "system" and m.meta.get("to") == "assistant":  # feedback, e.g. unparseable call
            out.append({"role": "user", "content": m.content or ""})
    return out


def user_view(messages: list[Message], system: str) -> list[dict]:
    out: list[dict] = [{"role": "system", "content": system}]
    for m in messages:
        if m.role == "assistant" and m.has_text():
            out.append({"role": "user", "content": m.content})
        elif m.role == "user":
            msg: dict = {"role": "assistant", "content": m.content or ""}
            calls = _calls(m, "user")
            if calls:
                msg["tool_calls"] = calls
            if m.has_text() or calls:
                out.append(msg)
        elif m.role == "tool" and m.requestor == "user":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content or ""})
        elif m.role == "system" and m.meta.get("to") == "user":
            out.append({"role": "user", "content": m.content or ""})
    # a chat model answers after a `user` turn: the opening agent greeting is one
    return out
