"""Scripted roles that follow one task's gold actions: they prove the loop, not a model.

`ScriptedAgent` and `ScriptedUser` speak the kit's Backend interface, so they run through
exactly the code path a model does (views, batching, tool execution, termination). Both
are bound to one task (run one `run_episodes` call per task). The agent makes its gold
tool calls in order, asks the user to do theirs (telecom device actions) one at a time, in
words (kit/rollout/domain_phrases.py: device_ask), and ends with a message stating every fact
to communicate plus ###STOP###. The user performs its gold actions when asked and reports "[done N]".
"""

from __future__ import annotations

import json
import re

from kit.llm.types import Backend, Completion, SamplingParams, ToolCall
from kit.replay import gold_actions, gold_final_text
from kit.rollout.domain_phrases import device_ask
from kit.rollout.phrasing import _Pick

_DONE = re.compile(r"\[done (\d+)\]")


def _text(s: str) -> Completion:
    return Completion(text=s, raw=s, finish_reason="stop")


def _calls(actions: list, prefix: str) -> Completion:
    calls = [ToolCall(id=f"{prefix}_{i}", name=a.name, arguments=dict(a.arguments)) for i, a in actions]
    return Completion(text="", tool_calls=calls, raw=json.dumps([c.model_dump() for c in calls]), finish_reason="tool_calls")


class _Scripted(Backend):
    def __init__(self, task):
        self.task = task
        self.gold = list(enumerate(gold_actions(task)))
        hist = task.initial_state.message_history if task.initial_state else None
        self.history = len(hist or [])
        self.pick = _Pick(task.id, "device")

    def generate_batch(self, conversations, tools=None, params=None):
        n = (params.n if isinstance(params, SamplingParams) else (params or {}).get("n", 1)) or 1
        return [[self.step(conv)] * n for conv in conversations]


class ScriptedAgent(_Scripted):
    def step(self, conv: list[dict]) -> Completion:
        made = sum(len(m.get("tool_calls") or []) for m in conv[1 + self.history:] if m["role"] == "assistant")
        done = max([int(x) for m in conv if m["role"] == "user" for x in _DONE.findall(m.get("content") or "")] or [0])
        pos = made + done  # gold actions carried out so far (the gold runs in order)
        if pos < len(self.gold):
            i, a = self.gold[pos]
            if a.requestor == "user":  # one device step at a time, asked for in words
                return _text(device_ask(a.name, dict(a.arguments), self.pick))
            return _calls([(i, a)], f"a{made}")
        return _text(gold_final_text(self.task) + " ###STOP###")


class ScriptedUser(_Scripted):
    def step(self, conv: list[dict]) -> Completion:
        mine = [m for m in conv[1 + self.history:] if m["role"] == "assistant"]
        made = sum(len(m.get("tool_calls") or []) for m in mine)
        theirs = [(i, a) for i, a in self.gold if a.requestor == "user"]
        if conv[-1]["role"] == "tool":
            return _text(f"I did that. [done {made}]")
        if not mine and self.history == 0:
            return _text("Hi, I need some help with my account.")
        if made < len(theirs):  # the agent spoke while a device step is due: it asked for it
            return _calls([theirs[made]], f"u{made}")
        return _text(f"Okay. [done {made}]")
