"""What the customer asks for: a task's request in words, built by code from its gold actions.

    req = task_request(domain, task)     # Request: what to do, the values the customer states
    req.opening(seed)                    # "Hi! I'd like to create a task called 'Buy milk' for user_7."
    scenario_opening(domain, task, seed) # the gold dialogue's first user turn: the scenario said by the customer

Why: a dialogue teaches the agent to read the request only if the request is in it. The
opening user turn of every gold dialogue, and the scenario the engine writes when its
model-written one fails the fidelity gate (kit/engine/synthesize.py), come from here and from the
phrasing bank (kit/rollout/phrasing.py), so each names every value the gold writes need that the
customer can know, in one of many wordings.

What the customer can know: an argument value of a gold write is stated unless it first
appears in the result of an earlier gold action and the customer cannot have it: before the
scenario is written (the synthesizer passes `actions`), a value nowhere in the starting state
(a new record's id: the agent learns it from the tool result, not from the user) or one the
synthesizer looks up (`looked_up`: the customer gave a name, the agent finds the id); once the
task has its scenario, a value the scenario does not name.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

CLOSING = "Thank you, that's all I needed. ###STOP###"
CREATE_VERBS = {"create", "add", "book", "open", "register", "make", "new"}


def value_text(v: Any) -> str:
    """A value as the customer writes it: strings with spaces in quotes, others as they print."""
    if isinstance(v, str):
        return f"'{v}'" if (" " in v.strip() or not v.strip()) else v
    return json.dumps(v) if isinstance(v, (list, dict)) else str(v)


_PERSON = [(r"\byou're\b", "I'm"), (r"\byou are\b", "I am"), (r"\byou were\b", "I was"), (r"\byou have\b", "I have"),
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
    # values the customer names in words, the agent finding the id by a lookup (argument -> "paying with
    # your gift card"; kit/envs/arguments/customer.py): said after the stated values
    described: dict[str, str] = field(default_factory=dict)
    reason: str = ""  # why the customer asks, where the policy needs it (WriteCandidate.reason): said last

    def phrase(self, only: list[str] | None = None) -> str:
        """The generic words of this write ("create a task with user id user_7 and title 'Buy milk'"),
        stating the values of `only` (default: every stated value)."""
        parts = _words(self.tool).split()
        # "modify the user address" reads as talk about a user (the fidelity gate's meta-text): the
        # customer's own record is their account
        verb, noun = parts[0], " ".join("account" if w == "user" else w for w in parts[1:])
        obj = f"{'a' if verb in CREATE_VERBS else 'the'} {noun}".strip() if noun else ""
        if [k for k in self.from_results if k not in self.described] and not verb in CREATE_VERBS:
            obj = f"the new {noun}".strip()  # the record an earlier step made
        keys = list(self.stated) if only is None else [k for k in self.stated if k in only]
        args = [f"{_words(k)} {value_text(self.stated[k])}" for k in keys]
        with_ = (" with " + (", ".join(args[:-1]) + " and " + args[-1] if len(args) > 1 else args[0])) if args else ""
        words = "".join(f", {w}" for w in self.described.values() if w)
        return " ".join(x for x in (verb, obj) if x) + with_ + words + (f", {self.reason}" if self.reason else "")


@dataclass
class Request:
    """The writes the customer asks for, and how they identify themself when they give no id
    (`identity`: a field of their record and its value, {"name": "Maya Okafor"}; the agent looks the id up)."""

    task_id: str
    steps: list[Step]
    fallback_text: str = ""  # no gold writes (a lookup, a transfer): the scenario's own words
    identity: dict[str, Any] = field(default_factory=dict)

    def text(self) -> str:
        if not self.steps:
            return self.fallback_text
        who = "".join(f" for the {_words(k)} {value_text(v)}" for k, v in self.identity.items())
        return ", and then ".join(s.phrase() for s in self.steps) + who

    def values(self) -> list[Any]:
        """Every value the customer states (what the first user turn must name)."""
        return [v for s in self.steps for v in (*s.stated.values(), *(w for w in s.described.values() if w),
                                                *([s.reason] if s.reason else []))] + list(self.identity.values())

    def describe(self, said: list[dict[str, str]]) -> "Request":
        """Give each write step (in order) the customer's words for its values that the agent looks up
        (`said[i]`: argument -> words, kit/envs/arguments/customer.py); only values left to the agent."""
        for step, words in zip(self.steps, said):
            step.described.update({k: w for k, w in words.items() if k in step.from_results})
        return self

    def opening(self, seed: Any = None) -> str:
        """A first message built from the request alone (for a task whose scenario does not name the
        values): the bank's template wording, said by the customer."""
        from kit.rollout.phrasing import dress, scenario_text

        if not self.steps:
            return first_person(self.fallback_text) or "Hi, I need some help."
        text = scenario_text(self, seed, family="template")
        said = " ".join(first_person(x) for x in (text.reason_for_call, text.known_info) if x)
        return dress(said, seed, key=self.task_id)


def _scenario_fields(task) -> tuple[str, str]:
    instr = getattr(task.user_scenario, "instructions", None) if task.user_scenario else None
    if instr is None or isinstance(instr, str):
        return "", ""
    return ((getattr(instr, "reason_for_call", None) or "").strip(), (getattr(instr, "known_info", None) or "").strip())


def _withheld(task) -> list[str]:
    """Arguments the customer gives only when the agent asks (the engine's facts_on_request tasks)."""
    from kit.tags import task_notes

    return list(task_notes(task).get("ask_for") or [])


def scenario_opening(domain, task, seed: Any = None) -> str:
    """The customer's first message: their scenario's reason for call and known info, said in the
    first person ("You marked 'X' as completed by mistake..." -> "I marked 'X' as completed by
    mistake..."), with a greeting and maybe a sign-off (kit/rollout/phrasing.py: dress), when that
    text names every value the gold writes need; else `opening()`. Facts the customer gives only
    when asked (`ask_for` in the task's notes) stay in the known info for `asked_exchange`.

    Why copy the scenario: a simulated user trained to restate its own scenario learns one skill
    that carries to any wording of a scenario (a 135M model reads 'set back to pending' poorly but
    copies it well), so the request the agent must act on reaches the dialogue."""
    from kit.rollout.fidelity import _norm_value, required_user_values
    from kit.rollout.phrasing import dress

    reason, known = _scenario_fields(task)
    withheld = _withheld(task)
    if reason:
        text = " ".join(first_person(x) for x in ((reason,) if withheld else (reason, known)) if x)
        later = {_norm_value(a.arguments[k]) for a in _gold_writes(domain, task) for k in withheld if k in a.arguments}
        needed = [v for v in required_user_values(task, domain=domain) if v not in later]
        if all(v in _norm_value(text) for v in needed):
            return dress(text, seed, key=task.id)
    return task_request(domain, task).opening(seed)


def asked_exchange(domain, task, seed: Any = None) -> list[tuple[str, str]]:
    """[(the agent's question, the customer's answer)] for facts the customer gives only when asked:
    the gold dialogue's turns between the opening and the first call ([] for most tasks)."""
    from kit.rollout.phrasing import answer_line, ask_line

    withheld = _withheld(task)
    _, known = _scenario_fields(task)
    if not withheld or not known:
        return []
    return [(ask_line(withheld, seed, key=task.id), answer_line(first_person(known), seed, key=task.id))]


def _gold_writes(domain, task) -> list:
    crit = task.evaluation_criteria
    return [a for a in ((crit.actions if crit else None) or []) if domain.is_write_tool(a.name, a.requestor)]


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
    return json.dumps(env.agent_db.model_dump(mode="json"), default=str)


def task_request(domain, task, actions: list | None = None, looked_up: dict[str, str] | None = None) -> Request:
    """The request of `task`, whose scenario says what the customer knows; or, before the scenario is
    written, of explicit gold `actions` (objects with name and arguments, requestor 'assistant'), where
    the starting state stands in for it except the arguments in `looked_up` (module docstring), each with
    the customer's words for it: a leaf those words state, such as a booking's amount beside the payment
    method the agent looks up, need not come from a result."""
    from kit.grounding import contains, norm

    written = actions is None
    looked_up = looked_up or {}
    if actions is None:
        crit = task.evaluation_criteria
        actions = [a for a in ((crit.actions if crit else None) or []) if getattr(a, "requestor", "assistant") == "assistant"]
    env = domain.fork(task)
    scenario = str(task.user_scenario) if task.user_scenario is not None else ""
    known = _db_text(env) + " " + scenario
    said = norm(scenario)
    produced: set[str] = set()  # values first seen in a gold action's result
    steps: list[Step] = []
    for a in actions:
        args = dict(a.arguments)
        if domain.tool_kind(a.name) == "write":
            stated, later = {}, []
            for k, v in args.items():
                leaves = _leaves(v, set())
                # a list or dict value is known when each of its leaves is (the database's JSON text
                # never holds a Python list's repr)
                unknown = (not contains(said, v)) if written else (
                    k in looked_up or any(leaf not in known for leaf in leaves))
                words = norm(looked_up.get(k, ""))
                if leaves and leaves <= produced | {x for x in leaves if contains(words, x)} and unknown:
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
