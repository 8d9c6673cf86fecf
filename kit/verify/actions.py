"""ACTION check: every gold action appears among the trajectory's tool calls.

Same rule as tau2's ActionEvaluator: a gold action matches a call with the same tool name
whose arguments agree on `compare_args` (all of the call's arguments when unset). The
requestor is not compared (tau2 does not compare it either).
"""

from __future__ import annotations

from kit.trajectory import Message, ToolCall


def action_matches(action, call: ToolCall) -> bool:
    if action.name != call.name:
        return False
    keys = call.arguments.keys() if action.compare_args is None else action.compare_args
    if len(keys) == 0:
        return True
    return {k: v for k, v in call.arguments.items() if k in keys} == {
        k: v for k, v in action.arguments.items() if k in keys
    }


def check_actions(gold_actions: list, messages: list[Message]) -> list[dict]:
    calls = [c for m in messages if m.role in ("assistant", "user") for c in (m.tool_calls or [])]
    return [
        {
            "action": {"name": a.name, "arguments": a.arguments, "requestor": a.requestor},
            "met": any(action_matches(a, c) for c in calls),
        }
        for a in gold_actions
    ]
