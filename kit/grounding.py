"""Deterministic checks that training text is grounded (no model involved).

    problems = agent_turn_problems(messages)            # an agent SFT sample: its view, ending with the target
    problems = user_turn_problems(messages)             # a user SFT sample (the user's view, roles flipped)
    problems = text_problems(text, needed, known)       # a model-written scenario field or free-text value
    kept, dropped = grounded_only(samples)              # what every SFT writer and trainer calls

Rules (PAPER.md's "dialogues that look right often do not execute", made checkable):
  agent    every argument value of the target turn's tool calls appears earlier: in the system
           prompt, in user text, in tool results or in the agent's own earlier text. Booleans and
           the free-text summary of a hand-off (`transfer_to_human_agents.summary`) are exempt:
           the agent writes those itself. An ungrounded call teaches the agent to invent values.
  user     the user's turn names no id, number, email or code that is neither in its scenario
           (the system prompt) nor said earlier; it is not assistant-speak ("how can I help",
           "I'd like to assist", "as an AI") nor meta-text about prompts, scenarios or tools.
  text     a model-written field carries every value it must carry (`needed`), contains no
           meta-text, instructions to a model or assistant-speak, and invents no ids (`known`:
           the text the facts may come from); a scenario field is addressed to the customer
           ("You want ..."), so it has no first-person words.
Matching is case-insensitive on normalised text (quotes and commas ignored, underscores read as
spaces), so 'Buy milk' matches "buy milk" and a customer's "basic economy" states the cabin
'basic_economy'. A sample with any problem is dropped, never trained on; callers count them.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterable

EXEMPT_ARGS = {("transfer_to_human_agents", "summary")}

# ids with digits (task_12, #W2378156), emails, numbers with several digits, dollar amounts
_FACT = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+|#?\b(?=[A-Za-z_]*\d)[A-Za-z0-9_]{3,}\b|\$?\d{2,}(?:\.\d+)?")
_ASSISTANT_SPEAK = re.compile(
    r"how (can|may|could) i (help|assist)|i('d| would)? (like|love|be happy|be glad) to (help|assist)|"
    r"as an ai|i am an ai|i'm an ai|you('re| are) an ai|an ai assistant|re-?writ(e|ing) the (input )?text|language model|i('m| am) here to help|is there anything else i can|"
    r"i have created|i've created|i can help you|(ready|happy|glad) to (help|assist)|\b(help|assist) you\b|"
    r"what('s| is) your (request|question)|let me know", re.I)
# a scenario field is written to the customer ("You want ..."): first person means someone else is talking
_FIRST_PERSON = re.compile(r"\b(i|i'm|i'll|i've|i'd|me|my|we|we're|our|us)\b", re.I)
_SECOND_PERSON = re.compile(r"\b(you|your|you're|you've|you'd)\b", re.I)
_META = re.compile(
    r"\b(scenario|prompts?|instructions?|custom action|placeholder|json|function call|tool call|"
    r"(the|this|a) (customer|user|caller)(?! ?(id|name|ids)\b)|to be (extremely )?transparent)\b|"
    r"<tool_call>|```|\{\{|\}\}", re.I)


def norm(text: Any) -> str:
    s = text if isinstance(text, str) else json.dumps(text, default=str)
    return re.sub(r"\s+", " ", s.lower().replace("'", "").replace('"', "").replace(",", "").replace("`", "").replace("_", " ")).strip()


def contains(haystack: str, value: Any) -> bool:
    """`value` (as the customer or a tool would write it) occurs in the normalised `haystack`."""
    v = norm(str(value) if not isinstance(value, str) else value)
    return bool(v) and v in haystack


def _leaves(obj: Any, key: str = "") -> list[tuple[str, Any]]:
    if isinstance(obj, dict):
        return [x for k, v in obj.items() for x in _leaves(v, k)]
    if isinstance(obj, list):
        return [x for v in obj for x in _leaves(v, key)]
    return [(key, obj)]


def _arguments(call: dict) -> dict:
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return {"<unparseable>": args}
    return args if isinstance(args, dict) else {"<arguments>": args}


def agent_turn_problems(messages: list[dict]) -> list[str]:
    """Ungrounded argument values of the last message's tool calls (the agent's view: system first)."""
    *before, target = messages
    seen = norm(" ".join(str(m.get("content") or "") for m in before))
    out = []
    for call in target.get("tool_calls") or []:
        name = call.get("function", call).get("name", "?")
        for key, value in _leaves(_arguments(call)):
            if value is None or isinstance(value, bool) or (name, key) in EXEMPT_ARGS:
                continue
            if not contains(seen, value):
                out.append(f"ungrounded argument {name}.{key}={value!r}")
    return out


def text_problems(text: str, needed: Iterable[Any] = (), known: str = "", second_person: bool = False) -> list[str]:
    """Why a model-written field cannot be used ([] when it can). `second_person`: the text is a
    scenario field addressed to the customer, so first-person words mean the model spoke as someone else."""
    t = text or ""
    if not t.strip():
        return ["empty"]
    out = []
    low = norm(t)
    missing = [v for v in needed if not contains(low, v)]
    if missing:
        out.append("misses " + ", ".join(repr(v) for v in missing[:4]))
    if _ASSISTANT_SPEAK.search(t):
        out.append("assistant-speak: " + _ASSISTANT_SPEAK.search(t).group(0))
    if _META.search(t):
        out.append("meta-text: " + _META.search(t).group(0))
    if second_person and _FIRST_PERSON.search(t):
        out.append("not addressed to the customer: " + _FIRST_PERSON.search(t).group(0))
    elif second_person and not _SECOND_PERSON.search(t):
        out.append("not addressed to the customer: no 'you'")
    ok = norm(known)
    invented = [f for f in _FACT.findall(t) if not contains(ok, f.lstrip("#$"))]
    if invented:
        out.append("invents " + ", ".join(invented[:4]))
    return out


def user_turn_problems(messages: list[dict]) -> list[str]:
    """Problems of a user SFT sample's target turn (the user's view: the agent speaks as 'user')."""
    *before, target = messages
    text = str(target.get("content") or "")
    if not text.strip():
        return []  # a user-tool call only: its arguments come from the agent's request
    known = " ".join(str(m.get("content") or "") for m in before)
    stripped = re.sub(r"###[A-Z-]+###", "", text)
    return [p for p in text_problems(stripped or "ok", (), known) if p != "empty"]


def sample_problems(sample: Any) -> list[str]:
    """Problems of one SFT sample (an SFTSample or its dict)."""
    role = getattr(sample, "role", None) or sample["role"]
    messages = getattr(sample, "messages", None) or sample["messages"]
    return agent_turn_problems(messages) if role == "agent" else user_turn_problems(messages)


def grounded_only(samples: Iterable[Any]) -> tuple[list, list[tuple[Any, list[str]]]]:
    """(samples without problems, [(dropped sample, its problems)])."""
    kept, dropped = [], []
    for s in samples:
        problems = sample_problems(s)
        if problems:
            dropped.append((s, problems))
        else:
            kept.append(s)
    return kept, dropped
