"""What the customer asks for: a task's request in words, built by code from its gold actions.

    req = task_request(domain, task)     # Request: what to do, the values the customer states
    req.opening(seed)                    # "Hi! I'd like to create a task with user id user_7 and title 'Buy milk'."
    req.reason_for_call(), req.known_info()   # the same facts, as scenario text ("You want to ...")

Why: a dialogue teaches the agent to read the request only if the request is in it. The
opening user turn of every gold dialogue, and the template the engine falls back to when its
model-written scenario fails the fidelity gate (kit/engine/fidelity.py), come from here, so
each names every value the gold writes need that the customer can know.

What the customer can know: an argument value of a gold write is stated unless it first
appears in the result of an earlier gold action and nowhere in the starting state or the
scenario (a new record's id: the agent learns it from the tool result, not from the user).
The wording is generic (tool name and argument names in words, a few fixed phrasings picked
by seed): plain, predictable text a 135M model can learn to produce and to read.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

CLOSING = "Thank you, that's all I needed. ###STOP###"
OPENINGS = (
    "Hi! I'd like to {req}.",
    "Hello, I need to {req}.",
    "Hi there. Could you {req}?",
    "Hello! Please {req}.",
    "Hi, can you help me {req}?",
)
REASONS = (
    "You want to {req}.",
    "You are contacting support to {req}.",
    "You need the agent to {req}.",
)
CREATE_VERBS = {"create", "add", "book", "open", "register", "make", "new"}


def value_text(v: Any) -> str:
    """A value as the customer writes it: strings with spaces in quotes, others as they print."""
    if isinstance(v, str):
        return f"'{v}'" if (" " in v.strip() or not v.strip()) else v
    return json.dumps(v) if isinstance(v, (list, dict)) else str(v)


_PERSON = [(r"\byou are\b", "I am"), (r"\byou were\b", "I was"), (r"\byou have\b", "I have"),
           (r"\byour\b", "my"), (r"\byours\b", "mine"), (r"\byourself\b", "myself"), (r"\byou\b", "I")]


_QUOTED = re.compile(r"""((?<!\w)'[^']+'(?!\w)|"[^"]+")""")


def first_person(text: str) -> str:
    """Scenario prose ("You want to delete your tasks.") as the customer says it ("I want to delete my tasks.")."""
    parts = _QUOTED.split(text or "")  # quoted values ('Send thank-you notes') are kept as they are
    for i in range(0, len(parts), 2):
        for pat, rep in _PERSON:
            parts[i] = re.sub(pat, lambda m, rep=rep: rep if m.group(0)[0].islower() or rep == "I" or rep.startswith("I ")
                              else rep[0].upper() + rep[1:], parts[i], flags=re.I)
    return "".join(parts)


def _words(name: str) -> str:
    return name.replace("_", " ").strip()


@dataclass
class Step:
    """One gold write as the customer asks for it: the tool, the values stated, those left to the agent."""

    tool: str
    stated: dict[str, Any]
    from_results: list[str] = field(default_factory=list)

    def phrase(self) -> str:
        parts = _words(self.tool).split()
        verb, noun = parts[0], " ".join(parts[1:])
        obj = f"{'a' if verb in CREATE_VERBS else 'the'} {noun}".strip() if noun else ""
        if self.from_results and not verb in CREATE_VERBS:
            obj = f"the new {noun}".strip()  # the record an earlier step made
        args = [f"{_words(k)} {value_text(v)}" for k, v in self.stated.items()]
        with_ = (" with " + (", ".join(args[:-1]) + " and " + args[-1] if len(args) > 1 else args[0])) if args else ""
        return " ".join(x for x in (verb, obj) if x) + with_


@dataclass
class Request:
    task_id: str
    steps: list[Step]
    fallback_text: str = ""  # no gold writes (a lookup, a transfer): the scenario's own words

    def text(self) -> str:
        if not self.steps:
            return self.fallback_text
        return ", and then ".join(s.phrase() for s in self.steps)

    def values(self) -> list[Any]:
        """Every value the customer states (what `request_stated` looks for in the first user turn)."""
        return [v for s in self.steps for v in s.stated.values()]

    def opening(self, seed: Any = None) -> str:
        rng = random.Random(json.dumps([self.task_id, seed], default=str))
        if not self.steps:
            return first_person(self.fallback_text) or "Hi, I need some help."
        return rng.choice(OPENINGS).format(req=self.text())

    def _rng(self, what: str, seed: Any) -> random.Random:
        return random.Random(json.dumps([self.task_id, what, seed], default=str))

    def reason_for_call(self, seed: Any = None) -> str:
        if not self.steps:
            return self.fallback_text
        return self._rng("reason", seed).choice(REASONS).format(req=self.text())

    def known_info(self, seed: Any = None) -> str:
        """The stated values as scenario facts, in one of a few phrasings (so a user model trained on them
        learns to read facts, not one sentence shape)."""
        pairs = [(k, v) for s in self.steps for k, v in s.stated.items()]
        if not pairs:
            return ""
        style = self._rng("known", seed).randrange(3)
        if style == 0:
            return "You know that " + "; ".join(f"the {_words(k)} is {value_text(v)}" for k, v in pairs) + "."
        if style == 1:
            return " ".join(f"{'Your' if k.endswith('user_id') else 'The'} {_words(k)} is {value_text(v)}."
                            for k, v in pairs)
        return "Facts you can give: " + ", ".join(f"{_words(k)} {value_text(v)}" for k, v in pairs) + "."


def scenario_opening(domain, task, seed: Any = None) -> str:
    """The customer's first message: their scenario's reason for call and known info, said in the
    first person ("You marked 'X' as completed by mistake..." -> "I marked 'X' as completed by
    mistake..."), when that text names every value the gold writes need; else `opening()`.

    Why copy the scenario: a simulated user trained to restate its own scenario learns one skill
    that carries to any wording of a scenario (a 135M model reads 'set back to pending' poorly but
    copies it well), so the request the agent must act on reaches the dialogue."""
    from kit.rollout.fidelity import _norm_value, required_user_values

    request = task_request(domain, task)
    instr = getattr(task.user_scenario, "instructions", None) if task.user_scenario else None
    reason = (getattr(instr, "reason_for_call", None) or "").strip() if instr is not None and not isinstance(instr, str) else ""
    known = (getattr(instr, "known_info", None) or "").strip() if instr is not None and not isinstance(instr, str) else ""
    if reason:
        rng = random.Random(json.dumps([task.id, "hello", seed], default=str))
        text = " ".join(first_person(x) for x in (reason, known) if x)
        text = rng.choice(("Hi! ", "Hello, ", "Hi there. ", "Hello! ", "Hi, ")) + text[0].lower() + text[1:] \
            if not text.startswith("I ") else rng.choice(("Hi! ", "Hello. ", "Hi there. ", "Hello! ", "Hi. ")) + text
        needed = required_user_values(task, domain=domain)
        if all(v in _norm_value(text) for v in needed):
            return text
    return request.opening(seed)


def _leaves(obj: Any, out: set[str]) -> set[str]:
    if isinstance(obj, dict):
        for v in obj.values():
            _leaves(v, out)
    elif isinstance(obj, list):
        for v in obj:
            _leaves(v, out)
    elif obj is not None and not isinstance(obj, bool):
        out.add(str(obj))
    return out


def _db_text(env) -> str:
    db = getattr(env.env.tools, "db", None)
    if db is None:
        return ""
    return json.dumps(db.model_dump(mode="json") if hasattr(db, "model_dump") else db, default=str)


def task_request(domain, task, actions: list | None = None) -> Request:
    """The request of `task` (or of explicit gold `actions`: objects with name and arguments, requestor
    'assistant'), checked against the task's starting state and scenario."""
    if actions is None:
        crit = task.evaluation_criteria
        actions = [a for a in ((crit.actions if crit else None) or []) if getattr(a, "requestor", "assistant") == "assistant"]
    env = domain.fork(task)
    known = _db_text(env) + " " + (str(task.user_scenario) if task.user_scenario is not None else "")
    produced: set[str] = set()  # values first seen in a gold action's result
    steps: list[Step] = []
    for a in actions:
        args = dict(a.arguments)
        if domain.tool_kind(a.name) == "write":
            stated, later = {}, []
            for k, v in args.items():
                if str(v) in produced and str(v) not in known:
                    later.append(k)
                else:
                    stated[k] = v
            steps.append(Step(a.name, stated, later))
        obs = env.execute(a.name, args, "assistant")
        if not obs.error:
            try:
                produced |= _leaves(json.loads(obs.content), set())
            except (json.JSONDecodeError, TypeError):
                produced.add(obs.content)
    fallback = ""
    if not steps:
        instr = getattr(task.user_scenario, "instructions", None) if task.user_scenario else None
        fallback = (getattr(instr, "reason_for_call", None) or str(instr or "")).strip()
    return Request(task_id=task.id, steps=steps, fallback_text=fallback)
