"""The task synthesizer: explore a fork with read tools, pick gold actions, run them, write
the user's scenario, and package a tau2 `Task`.

One proposal, step by step (every decision is the model's, among options the environment
offers, see kit/engine/choice.py):

  0. world     the domain's database plus a few sampled records (kit/envs/worlds.py), kept as
               the task's initial_state, so tasks differ in ids, names and titles.
  1. explore   a few read calls in a forked environment; the model picks each call among
               the read tools and argument values seen so far (the pool starts from a sample
               of record keys, as a support agent starts from a customer's id). Every value in
               every result goes into the pool with the call that revealed it.
  2. actions   where the domain draws a write's arguments from its world (kit/envs/arguments: airline,
               retail, telecom), the model picks one of those whole calls; otherwise,
               for each tool of the plan's pattern the model picks argument values: seen
               values of a field with the argument's name, the schema's enum, or — for free
               text such as a title — a short value it writes itself; a written value that is
               the prompt's own words (lead-ins like 'The value of "title" is', the persona,
               "a customer who...", an unfinished phrase) is rewritten, up to 2 samples, then
               an optional argument is left out and a required one takes the domain's
               template value (kit/envs/worlds.py, a recorded repair) or ends the proposal
               (lead-ins go in `choice.clean_text`; the rest is `free_value_problem`).
               A lookup_change plan (a read, then a write) runs the read first, and the model
               picks a record of its result a customer can name (a unique name or email beside
               the id the write needs): the write gets the id, the customer gives the name.
  3. execute   the gold actions run in a fresh fork. A write that errors or changes nothing
               is *repaired*: its arguments are chosen again without the values that failed
               (at most `max_repairs` times); each repair is recorded.
  4. scenario  the model writes why the customer calls and what the customer knows; each field
               passes the fidelity gate (kit/grounding.py: it carries the values the request
               needs, has no meta-text or assistant-speak, invents no ids) or is replaced by the
               phrasing bank's (kit/rollout/phrasing.py: many wordings, template or free_form,
               drawn from the task id; a recorded repair, counted per round). The task
               instructions are code. A plan whose dialogue edge is facts_on_request has the
               customer withhold their own id until the agent asks (`ask_for`: the gold dialogue
               holds the question and the answer); otherwise the gold dialogue states the whole
               request in its first user turn.
  raw          (`raw=True`, the no_validation ablation's setting) the synthesizer keeps what the model
               wrote: no world candidates in 2., a flagged free-text value kept, no repair in 3. (a
               write that errors or changes nothing stays in the gold, a gold call's error too), the
               model's scenario text kept in 4. (only an empty one is replaced). Each thing kept is
               noted in the proposal's `unrepaired`; validation (kit/engine/validate.py) is what
               catches them.
  device_fix   (telecom) instead of 1.-4.: a fault on the customer's phone, fixed by the customer's own
               device actions as the agent guides them (`_device_fix`, kit/envs/arguments/device.py).
  5. package   a tau2 Task: user scenario (persona + structured instructions), gold actions
               (the reads whose results the writes used, then the writes), communicate_info
               for lookups, reward basis DB (+ COMMUNICATE), and in description.notes the plan,
               the tags `shape` and `phrasing` (kit/tags.py: task_tags) and `ask_for`. The
               ground-truth final state is the fork after the gold actions (its hash is in the
               proposal record).
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from kit.engine.choice import Chooser, option_text
from kit.engine.plans import GENERIC_TOOLS, PlanPair, chain_param, lookup_param
from kit.engine.prompts import Prompts
from kit.engine.records import Check, Rejection, SynthesisFailure
from kit.envs.domain import Domain

from kit.envs.worlds import free_text_template, sample_world
from kit.grounding import contains, norm, text_problems
from kit.rollout.phrasing import facts_text, scenario_text, task_instructions
from kit.rollout.request import Request, Step, task_request
from kit.tags import tagged_notes

from tau2.data_model.tasks import (  # noqa: E402  (kit.envs imported tau2 offline)
    Action, Description, EvaluationCriteria, InitialState, InitializationData, StructuredUserInstructions, Task,
    UserScenario,
)

MAX_OPTIONS = 12


@dataclass
class Call:
    name: str
    arguments: dict
    output: Any = None
    content: str = ""
    error: bool = False

    def render(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.arguments.items())
        return f"{self.name}({args})"


@dataclass
class Proposal:
    """Everything the synthesizer did for one task attempt (written to proposals.jsonl)."""

    unit: str
    attempt: int
    plan_id: str
    task: Optional[Task] = None
    explored: list[dict] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)
    failure: Optional[Rejection] = None  # why no task could be built at all (Check.SYNTHESIS)
    gold_fingerprint: Optional[str] = None  # EpisodeEnv.fingerprint() after the gold (not tau2's db hash)
    state_changed: Optional[bool] = None
    decisions: list[dict] = field(default_factory=list)
    fidelity: dict[str, list[str]] = field(default_factory=dict)  # gate problems per model-written field
    unrepaired: list[str] = field(default_factory=list)  # raw synthesis: what a repair would have changed

    def record(self) -> dict:
        return {"unit": self.unit, "attempt": self.attempt, "plan_id": self.plan_id,
                "task_id": self.task.id if self.task else None, "explored": self.explored,
                "repairs": self.repairs, "failure": self.failure.message() if self.failure else None,
                "gold_fingerprint": self.gold_fingerprint,
                "state_changed": self.state_changed, "decisions": self.decisions,
                "fidelity": self.fidelity, "unrepaired": self.unrepaired}


# ----- model-written free-text values --------------------------------------------------------------

FREE_VALUE_TRIES = 2
_DANGLING = {"a", "an", "the", "of", "in", "to", "and", "or", "for", "with", "on", "at", "by", "is", "be", "that"}


def free_value_problem(value: str, persona: str, domain: str, tool: str = "") -> str:
    """Why a model-written free-text argument is unusable ("" when it is fine): empty, the prompt's
    own words (the persona, 'a customer of the service', 'the value of ...', the customer's request,
    the call itself: 'Create a new task for ...' as create_task's title) instead of a value."""
    v = (value or "").strip()
    if not v:
        return "empty"
    words = re.findall(r"[a-z0-9]+", v.lower())
    if not words:
        return "no letters or digits"
    low = " ".join(words)
    if re.match(r"(the )?(value|title|name) (of|should|is)\b", low):
        return "echoes the question"
    if re.match(r"an? (\w+ ){0,2}(customer|client|user|caller|person)\b", low) or f"{domain} service" in v.lower():
        return "describes the customer, not a value"
    if re.match(r"(you|i|we) (will|are|am|must|want|would|need|should)\b", low):
        return "an instruction, not a value"
    if re.match(r"(the|this|our|my) (customer|client|user|caller|person) (wants|would|needs|asks|is|has|will)\b", low):
        return "narrates the request, not a value"
    tool_words = [w for w in re.findall(r"[a-z0-9]+", tool.lower()) if len(w) > 2]
    if len(tool_words) >= 2 and all(re.search(rf"\b{w}", low) for w in tool_words):
        return "restates the tool call"
    if words[-1] in _DANGLING:
        return "an unfinished phrase"
    persona_words = set(re.findall(r"[a-z0-9]+", (persona or "").lower()))
    content = [w for w in words if len(w) > 2]
    if len(content) >= 2 and sum(w in persona_words for w in content) / len(content) >= 0.6:
        return "copies the persona"
    return ""


# ----- the value pool ----------------------------------------------------------------------------


def _stem(name: str) -> str:
    s = name.lower()
    for suf in ("_ids", "_id", "_list", "_number", "_code"):
        if s.endswith(suf):
            s = s[: -len(suf)]
    if len(s) > 4 and s.endswith("s") and not s.endswith(("ss", "us")):
        s = s[:-1]
    return s


class Pool:
    """Values seen in the environment, by field name, with the read call that revealed them."""

    def __init__(self):
        self.values: dict[str, dict[str, tuple[Any, Optional[int]]]] = {}

    def add(self, key: str, value: Any, source: Optional[int]) -> None:
        if isinstance(value, bool) or value is None or (isinstance(value, str) and not value.strip()):
            return
        if not isinstance(value, (str, int, float)):
            return
        slot = self.values.setdefault(key, {})
        rep = json.dumps(value)
        if rep not in slot or (slot[rep][1] is None and source is not None):
            slot[rep] = (value, source)

    def walk(self, obj: Any, source: Optional[int], key: str = "", depth: int = 0) -> None:
        if depth > 6:
            return
        if isinstance(obj, dict):
            for k, v in list(obj.items())[:200]:
                self.walk(v, source, str(k), depth + 1)
        elif isinstance(obj, list):
            for v in obj[:50]:
                self.walk(v, source, key, depth + 1)
        elif key:
            self.add(key, obj, source)

    def candidates(self, param: str) -> list[tuple[Any, Optional[int]]]:
        exact = list(self.values.get(param, {}).values())
        if exact:
            return exact
        stem = _stem(param)
        out = []
        for key, slot in self.values.items():
            if _stem(key) == stem:
                out += list(slot.values())
        return out

    def summary(self, limit: int = 8) -> str:
        parts = []
        for key, slot in list(self.values.items())[:limit]:
            vals = [option_text(v) for v, _ in list(slot.values())[:3]]
            parts.append(f"{key}: {', '.join(vals)}")
        return "; ".join(parts) or "nothing yet"


def seed_pool(domain: Domain, rng: random.Random, per_table: int = 4, start: Optional[Task] = None) -> Pool:
    """Record keys of every table (a sample), as ids a customer could give (in the `start` world)."""
    pool = Pool()
    db = domain.fork(start).agent_db
    for tname in type(db).model_fields:
        table = getattr(db, tname, None)
        if not hasattr(table, "keys"):
            continue
        keys = list(table.keys())
        for key in rng.sample(keys, min(per_table, len(keys))):
            record = table[key]
            rec = record.model_dump() if hasattr(record, "model_dump") else record
            field_name = next((f for f, v in rec.items() if v == key), None) if isinstance(rec, dict) else None
            pool.add(field_name or f"{tname}_key", key, None)
    return pool


# ----- tool schemas ------------------------------------------------------------------------------


def _schema(domain: Domain, name: str) -> dict:
    for s in domain.tool_schemas("assistant"):
        if s["function"]["name"] == name:
            return s["function"]
    raise KeyError(f"tool {name!r} is not an agent tool of domain {domain.name!r}")


def _params(fn: dict) -> list[tuple[str, dict, bool]]:
    props = (fn.get("parameters") or {}).get("properties") or {}
    req = set((fn.get("parameters") or {}).get("required") or [])
    return [(k, v, k in req) for k, v in props.items()]


def _owner(candidate) -> Optional[dict]:
    """The customer a world write candidate acts for ({user_id} or {customer_id}): a later write of the same
    request is drawn for them."""
    return {k: v for k, v in {**candidate.knows, **candidate.arguments}.items()
            if k in ("user_id", "customer_id")} or None


def _parse_output(content: str) -> Any:
    try:
        return json.loads(content)
    except (json.JSONDecodeError, TypeError):
        return None


# ----- the synthesizer ---------------------------------------------------------------------------


class Synthesizer:
    def __init__(self, domain: Domain, chooser: Chooser, prompts: Prompts, explore_steps: int = 2,
                 max_repairs: int = 2, repair_scenario: bool = True, taken: Optional[Any] = None,
                 raw: bool = False):
        self.domain = domain
        self.raw = raw  # keep what the model wrote (module docstring, `raw`)
        # () -> the gold action keys of the tasks accepted so far (Seen.actions_taken): world write calls
        # already in one are offered only when no other is left
        self.taken = taken
        self.chooser = chooser
        self.prompts = prompts
        self.explore_steps = explore_steps
        self.max_repairs = max_repairs
        self.repair_scenario = repair_scenario
        names = [n for n in domain.tool_names("assistant") if n not in GENERIC_TOOLS]
        self.reads = [n for n in names if domain.tool_kind(n) == "read"]
        self.start: Optional[Task] = None  # the world of the current proposal (kit/envs/worlds.py)
        self.notes: list[str] = []  # the current proposal's repairs
        self.kept: list[str] = []  # the current proposal's unrepaired defects (raw)

    # 1. explore
    def _read_options(self, pool: Pool, done: set[str], rng: random.Random, only: Optional[str] = None) -> list[Call]:
        opts = []
        for name in ([only] if only else self.reads):
            params = [(p, s) for p, s, req in _params(_schema(self.domain, name)) if req]
            choices = []
            for p, s in params:
                vals = [v for v, _ in pool.candidates(p)] or list(s.get("enum") or [])
                choices.append(vals[:6])
            for combo in __import__("itertools").product(*choices) if params else [()]:
                call = Call(name, {p: v for (p, _), v in zip(params, combo)})
                if call.render() not in done:
                    opts.append(call)
        rng.shuffle(opts)
        return opts[:MAX_OPTIONS]

    def _run_read(self, env, call: Call, pool: Pool, idx: int) -> Call:
        obs = env.call_tool(call.name, dict(call.arguments), "assistant")
        call.content, call.error = obs.content, bool(obs.error)
        call.output = _parse_output(obs.content)
        if not call.error:
            pool.walk(call.output if call.output is not None else {}, idx)
        return call

    def explore(self, plan: PlanPair, pool: Pool, rng: random.Random) -> list[Call]:
        env = self.domain.fork(self.start)
        calls: list[Call] = []
        done: set[str] = set()
        for step in range(self.explore_steps):
            opts = self._read_options(pool, done, rng)
            if not opts:
                break
            msgs = self.prompts.render("synth_explore", domain=self.domain.name, synthesis=plan.synthesis,
                                       hints=plan.hints, so_far="; ".join(c.render() for c in calls) or "none")
            call = opts[self.chooser.choose(msgs, [c.render() for c in opts], what="explore")]
            done.add(call.render())
            calls.append(self._run_read(env, call, pool, len(calls)))
        return calls

    # 2. actions
    def _choose_args(self, plan: PlanPair, tool: str, pool: Pool, rng: random.Random,
                     banned: dict[str, set], persona: str,
                     fixed: Optional[dict] = None) -> tuple[dict, dict[str, Optional[int]]]:
        fn = _schema(self.domain, tool)
        args: dict[str, Any] = {}
        sources: dict[str, Optional[int]] = {}
        for p, s, required in _params(fn):
            if p in (fixed or {}):
                args[p], sources[p] = fixed[p], None
                continue
            desc = s.get("description") or p
            # values that failed before are left out, unless nothing else is left for this argument
            seen = _unbanned(pool.candidates(p), banned.get(p, set()))
            enum = [v for v, _ in _unbanned([(v, None) for v in s.get("enum") or []], banned.get(p, set()))]
            options: list[tuple[Any, Optional[int]]] = [(v, None) for v in enum] if enum else seen
            if s.get("type") == "boolean":
                options = [(True, None), (False, None)]
            if not required:
                msgs = self.prompts.render("synth_argument", domain=self.domain.name, synthesis=plan.synthesis,
                                           tool=tool, tool_description=fn.get("description", ""), seen=pool.summary(),
                                           param=p, param_description=f"optional: {desc}")
                if self.chooser.choose(msgs, ["leave it out", "give a value"], what=f"{tool}.{p} include") == 0:
                    continue
            if options:
                rng.shuffle(options)
                options = options[:MAX_OPTIONS]
                msgs = self.prompts.render("synth_argument", domain=self.domain.name, synthesis=plan.synthesis,
                                           tool=tool, tool_description=fn.get("description", ""), seen=pool.summary(),
                                           param=p, param_description=desc)
                v, src = options[self.chooser.choose(msgs, [option_text(v) for v, _ in options], what=f"{tool}.{p}")]
            elif s.get("type") in ("integer", "number"):
                v, src = [1, 2, 3][self.chooser.choose(self.prompts.render(
                    "synth_argument", domain=self.domain.name, synthesis=plan.synthesis, tool=tool,
                    tool_description=fn.get("description", ""), seen=pool.summary(), param=p,
                    param_description=desc), ["1", "2", "3"], what=f"{tool}.{p}")], None
            else:
                msgs = self.prompts.render(
                    "synth_free_value", domain=self.domain.name, tool=tool, tool_description=fn.get("description", ""),
                    persona=persona, synthesis=plan.synthesis, param=p, param_description=desc)
                problem = ""
                for _ in range(FREE_VALUE_TRIES):  # a fresh sample each time (the chooser reseeds per call)
                    v = self.chooser.write(msgs, 16, what=f"{tool}.{p} text", one_line=True)
                    problem = free_value_problem(v, persona, self.domain.name, tool) or next(
                        (p for p in text_problems(v) if p.startswith(("assistant-speak", "meta-text"))), "")
                    if not problem:
                        break
                    if self.raw:
                        self.kept.append(f"{tool}.{p} = {v!r} ({problem})")
                        break
                    self.chooser.log.append({"what": f"{tool}.{p} text rejected", "text": problem})
                else:
                    if not required:  # an optional argument is left out rather than filled with noise
                        continue
                    v = free_text_template(self.domain.name, p, rng)
                    if v is None:
                        raise _NoTask(SynthesisFailure.FREE_VALUE,
                                      f"no usable value for {tool}.{p} in {FREE_VALUE_TRIES} tries ({problem})")
                    self.notes.append(f"fidelity: {tool}.{p} ({problem}) -> template")
                src = None
            args[p] = v
            sources[p] = src
        return args, sources

    # 3.-5.
    def propose(self, plan: PlanPair, unit: str, attempt: int, task_id: str, seed: int) -> Proposal:
        rng = random.Random(seed)
        prop = Proposal(unit=unit, attempt=attempt, plan_id=plan.id)
        log_start = len(self.chooser.log)
        self.notes = prop.repairs  # template fallbacks of free-text arguments are repairs too
        self.kept = prop.unrepaired
        try:
            self._propose(plan, prop, task_id, rng)
        except _NoTask as e:
            prop.failure = Rejection(Check.SYNTHESIS, e.detail, cause=e.cause)
        prop.decisions = self.chooser.log[log_start:]
        return prop

    def _propose(self, plan: PlanPair, prop: Proposal, task_id: str, rng: random.Random) -> None:
        if plan.slice.intent == "device_fix":
            return self._device_fix(plan, prop, task_id, rng)
        world = sample_world(self.domain.name, rng)
        initial = InitialState(initialization_data=InitializationData(agent_data=world)) if world else None
        self.start = Task(id=task_id, user_scenario=UserScenario(instructions="(being written)"), initial_state=initial)
        pool = seed_pool(self.domain, rng, start=self.start)
        explored = self.explore(plan, pool, rng)
        prop.explored = [{"call": c.render(), "error": c.error} for c in explored]
        sl = plan.slice
        info, refusal = None, None
        if sl.intent == "lookup":
            gold, info = self._lookup(plan, pool, explored, rng)
            facts = {k: v for k, v in gold[-1].arguments.items()}
            request = Request(task_id=task_id, steps=[Step(gold[-1].name, dict(gold[-1].arguments))])
        elif sl.intent == "lookup_change":
            gold, facts, request = self._lookup_write(plan, prop, pool, explored, rng, task_id)
        elif sl.intent == "refuse":
            gold, facts, request, refusal = self._refusal(plan, rng, task_id)
        else:
            gold, facts, said, identity, reasons = self._writes(plan, prop, pool, explored, rng)
            request = task_request(self.domain, self.start, actions=gold,
                                   looked_up={k: w for words in said for k, w in words.items()}).describe(said)
            request.identity = identity
            for step, why in zip(request.steps, reasons):
                step.reason = why
            facts.update(identity)
        env = self.domain.fork(self.start)
        before = env.fingerprint()
        for c in gold:
            obs = env.execute(c.name, dict(c.arguments), "assistant")
            if obs.error and not self.raw:
                raise _NoTask(SynthesisFailure.GOLD_ACTION_ERROR, f"{c.render()}: {obs.content[:160]}")
            if obs.error:
                self.kept.append(f"gold call {c.render()} errors: {obs.content[:100]}")
        prop.gold_fingerprint = env.fingerprint()
        prop.state_changed = prop.gold_fingerprint != before
        scenario, phrasing, ask_for = self._scenario(plan, prop, gold, facts, request)
        actions = [Action(action_id=f"a{i}", requestor="assistant", name=c.name, arguments=dict(c.arguments))
                   for i, c in enumerate(gold)]
        notes = {"plan": plan.id, "slice": sl.describe(), "evaluation_plan": plan.evaluation,
                 "generator": "kit.engine.synthesize (model-chosen, constrained)"}
        prop.task = Task(
            id=task_id,
            description=Description(purpose=plan.synthesis, notes=tagged_notes(
                notes, shape=(f"refuse:{sl.tools[0]}" if refusal else ">".join(sl.tools)), phrasing=phrasing,
                **({"ask_for": list(ask_for)} if ask_for else {}), **({"refusal": refusal} if refusal else {}),
                **({"chained": True} if sl.intent == "chain" else {}))),
            user_scenario=scenario,
            initial_state=initial,
            evaluation_criteria=EvaluationCriteria(
                actions=actions, communicate_info=[info] if info else None,
                reward_basis=["DB", "COMMUNICATE"] if info else ["DB"]),
        )

    def _device_fix(self, plan: PlanPair, prop: Proposal, task_id: str, rng: random.Random) -> None:
        """A fault on the customer's phone that they fix themselves as the agent guides them
        (kit/envs/arguments/device.py): the model picks the faulty phone among the database's active lines;
        the task's initialization breaks it (tau2's user-side initialization actions, and the line's roaming
        where the fault is the line's too); the gold holds the user's check and fix (requestor "user") and the
        agent's reads and write where the line needs one; tau2's env assertions check the symptom is gone.
        The scenario states the symptom in the customer's words (code: a model's prose could name the cause,
        which the customer does not know)."""
        from kit.engine.validate import evaluation_action_keys, evaluation_tasks
        from kit.envs.arguments.device import device_candidates, device_task, task_phones
        from kit.eval.leak import gold_action_keys

        sl = plan.slice
        cands = device_candidates(self.domain.name, self.domain.fork(None).agent_db, rng, sl.tools, limit=MAX_OPTIONS,
                                  avoid_phones=task_phones(evaluation_tasks(self.domain)))
        if cands is None:
            raise _NoTask(SynthesisFailure.NO_ARGUMENTS, f"{self.domain.name} has no device fault fixed by "
                          f"{' then '.join(sl.tools)}")
        notes = tagged_notes({"plan": plan.id, "slice": sl.describe(), "evaluation_plan": plan.evaluation,
                              "generator": "kit.engine.synthesize (model-chosen, constrained)"},
                             shape="device_fix:" + ">".join(sl.tools), phrasing="template")
        drafts = [device_task(self.domain, c, task_id, random.Random(rng.random()), persona=sl.persona,
                              purpose=plan.synthesis, notes=notes) for c in cands]
        # never propose what the held-out check refuses: the whole solution of an evaluation task (tau2's
        # telecom tasks are all on one phone); then faults no accepted task has fixed yet
        evals = list(evaluation_action_keys(self.domain).values())
        kept = [(c, t) for c, t in zip(cands, drafts) if not any(k <= gold_action_keys(t) for k in evals)]
        if self.taken is not None and kept:
            done = self.taken()
            kept = [(c, t) for c, t in kept if not gold_action_keys(t) <= done] or kept
        if not kept:
            raise _NoTask(SynthesisFailure.NO_ARGUMENTS, f"no phone left for {' then '.join(sl.tools)} "
                          "outside the evaluation tasks")
        msgs = self.prompts.render("synth_call", domain=self.domain.name, synthesis=plan.synthesis, hints=plan.hints,
                                   tool=sl.tools[-1], tool_description="a fault on the customer's phone to fix")
        cand, task = kept[self.chooser.choose(msgs, [c.summary for c, _ in kept], what="device fault")]
        self.start = task
        env = self.domain.fork(task)
        before = env.fingerprint()
        for a in task.evaluation_criteria.actions:
            obs = env.execute(a.name, dict(a.arguments), a.requestor)
            if obs.error:
                raise _NoTask(SynthesisFailure.GOLD_ACTION_ERROR, f"{a.name}({a.arguments}) by {a.requestor}: "
                              f"{obs.content[:160]}")
        prop.gold_fingerprint = env.fingerprint()
        prop.state_changed = prop.gold_fingerprint != before
        task.description.notes = tagged_notes(json.loads(notes), shape="device_fix:" + ">".join(sl.tools),
                                              phrasing="template", device=cand.fault)
        prop.task = task

    def _lookup(self, plan, pool, explored, rng) -> tuple[list[Call], str]:
        tool = plan.slice.tools[0]
        env = self.domain.fork(self.start)
        opts = self._read_options(pool, set(), rng, only=tool)
        if not opts:
            raise _NoTask(SynthesisFailure.NO_ARGUMENTS, f"no values seen for the arguments of {tool}")
        # the customer asks about something they name (a flight, an order): a listing with no arguments
        # ("list all airports", then one airport as the answer) is a question no customer could ask
        opts = [c for c in opts if c.arguments]
        if not opts:
            raise _NoTask(SynthesisFailure.UNASKABLE, f"{tool} takes no arguments: the customer cannot say "
                          "which of its values they want")
        msgs = self.prompts.render("synth_explore", domain=self.domain.name, synthesis=plan.synthesis,
                                   hints=plan.hints, so_far="; ".join(c.render() for c in explored) or "none")
        call = self._run_read(env, opts[self.chooser.choose(msgs, [c.render() for c in opts], what="lookup call")],
                              Pool(), 0)
        if call.error:
            raise _NoTask(SynthesisFailure.GOLD_ACTION_ERROR, f"{call.render()}: {call.content[:160]}")
        facts = Pool()
        facts.walk(call.output, 0)
        values = [(k, v) for k, slot in facts.values.items() for v, _ in slot.values()
                  if isinstance(v, (str, int, float)) and len(str(v)) <= 60]
        if not values and isinstance(call.output, (str, int, float)) and len(str(call.output)) <= 60:
            values = [("result", call.output)]  # a search that returns the value itself (a user id by email)
        if not values:
            raise _NoTask(SynthesisFailure.NOTHING_TO_TELL, f"{call.render()} returned no scalar value")
        rng.shuffle(values)
        values = values[:MAX_OPTIONS]
        msgs = self.prompts.render("synth_info", tool=call.name, output=call.content[:600])
        k, v = values[self.chooser.choose(msgs, [f"{k}: {v}" for k, v in values], what="lookup info")]
        return [call], str(v)

    def _refusal(self, plan, rng: random.Random, task_id: str) -> tuple[list[Call], dict, Request, str]:
        """A request the policy forbids (kit/envs/arguments/forbidden.py): the customer asks for a write that
        the tool would run but a rule of the domain refuses; the gold is the reads that check it, the
        database stays as it was, and the agent's last word is the refusal with the rule's reason."""
        from kit.envs.arguments.forbidden import forbidden_candidates

        tool = plan.slice.tools[0]
        env = self.domain.fork(self.start)
        cands = forbidden_candidates(self.domain.name, env.agent_db, tool, rng, limit=4 * MAX_OPTIONS)
        kept: list[tuple[Any, str]] = []
        for cand in cands or []:
            probe = Task(id=task_id, user_scenario=UserScenario(instructions="(being written)"),
                         initial_state=self.start.initial_state if self.start else None,
                         evaluation_criteria=EvaluationCriteria(actions=[Action(
                             action_id="w", requestor="assistant", name=tool, arguments=dict(cand.arguments))]))
            why = self.domain.policy_violations(probe)
            if not why:
                continue
            trial = self.domain.fork(self.start)
            before = trial.fingerprint()
            obs = trial.execute(tool, dict(cand.arguments), "assistant")
            if obs.error or trial.fingerprint() == before:
                continue  # the tool itself refuses (or changes nothing): not a policy decision
            kept.append((cand, why[0]))
            if len(kept) >= MAX_OPTIONS:
                break
        if not kept:
            raise _NoTask(SynthesisFailure.NO_ARGUMENTS, f"no {tool} call that the tool runs and the policy forbids")
        msgs = self.prompts.render("synth_call", domain=self.domain.name, synthesis=plan.synthesis, hints=plan.hints,
                                   tool=tool, tool_description=_schema(self.domain, tool).get("description", "")[:300])
        cand, why = kept[self.chooser.choose(msgs, [c.summary for c, _ in kept], what=f"{tool} call to refuse")]
        reads = [Call(name, dict(args)) for name, args in cand.reads]
        asked = reads + [Call(tool, dict(cand.arguments))]
        request = task_request(self.domain, self.start, actions=asked,
                               looked_up=dict(cand.said)).describe([dict(cand.said)])
        facts = {k: (cand.said.get(k) or v) for k, v in cand.arguments.items() if cand.said.get(k, None) != ""}
        reason = why.split("): ", 1)[-1]  # the rule's own words, without "<domain> policy (<rule>): "
        return reads, facts, request, reason

    def _one_write(self, plan, prop, tool: str, writes: list[Call], pool: Pool, rng: random.Random,
                   fixed: Optional[dict] = None, then: tuple[str, ...] = ()) -> tuple[dict, dict, Any, Optional[Any]]:
        """Arguments for one write (the model's choices, `fixed` ones given), run after the `writes` kept so
        far; a write that errors or changes nothing is chosen again without the values that failed. `then`:
        the writes that follow it for the same customer (a world candidate is kept only if its customer can
        make them too). (arguments, their sources in the pool, the tool's result, the world candidate or None)."""
        banned: dict[str, set] = {}
        tried: set[str] = set()  # world candidates that failed (by their arguments)
        for tries in range(self.max_repairs + 1):
            env = self.domain.fork(self.start)  # replay the writes kept so far, then try this one
            for w in writes:
                env.execute(w.name, dict(w.arguments), "assistant")
            world = None if self.raw else self._world_args(plan, tool, env, rng, fixed, tried, then)
            if world is not None:
                args, src = dict(world.arguments), {p: None for p in world.arguments}
            else:
                args, src = self._choose_args(plan, tool, pool, rng, banned, plan.slice.persona, fixed=fixed)
            before = env.fingerprint()
            obs = env.execute(tool, dict(args), "assistant")
            problem = (f"error: {obs.content[:120]}" if obs.error
                       else ("no_change" if env.fingerprint() == before else None))
            if problem is None:
                return args, src, obs, world
            if self.raw:  # kept as the model chose it
                self.kept.append(f"{tool}({args}) -> {problem}")
                return args, src, obs, world
            prop.repairs.append(f"{tool}({args}) -> {problem}; chosen again")
            tried.add(json.dumps(args, sort_keys=True, default=str))
            for p, v in args.items():
                if p not in (fixed or {}):
                    banned.setdefault(p, set()).add(json.dumps(v))
        raise _NoTask(SynthesisFailure.WRITE_FAILED, f"{tool} failed after {self.max_repairs} repairs ({problem})")

    def _world_args(self, plan, tool: str, env, rng: random.Random, fixed: Optional[dict],
                    tried: set[str], then: tuple[str, ...] = ()) -> Optional[Any]:
        """Arguments of a write drawn whole from the world (kit/envs/arguments: a reservation and the
        payment method its owner holds, an order's item and an available variant, ...), the model choosing
        among the candidates; None where the domain has no generator for the tool (the per-argument
        choice above). A domain with a generator but no candidate left ends the proposal. The candidate
        comes as the customer sees it: words for the values only the database knows, and the reads that
        find them (kit/envs/arguments/customer.py)."""
        from kit.envs.arguments import write_candidates

        cands = write_candidates(self.domain.name, env.agent_db, tool, rng, limit=MAX_OPTIONS, fixed=fixed,
                                 as_customer=True)
        if cands is None:
            return None
        cands = [c for c in cands if json.dumps(c.arguments, sort_keys=True, default=str) not in tried]
        if then and cands:
            # the customer of a two-write request must be able to make both: a retail user with a delivered
            # order to return and no pending order to cancel ended every such proposal at its second write
            # (in today's database: a later write on a record the first one makes may still find none here,
            # so a filter that leaves nothing keeps every candidate; the probe draws do not touch `rng`)
            probe = random.Random(0)
            cands = [c for c in cands if all(write_candidates(self.domain.name, env.agent_db, t, probe, limit=1,
                                                              fixed=_owner(c)) != [] for t in then)] or cands
        if self.taken is not None and cands:
            from kit.eval.leak import action_key

            done = self.taken()
            cands = [c for c in cands if action_key(tool, dict(c.arguments)) not in done] or cands
        if not cands:
            raise _NoTask(SynthesisFailure.NO_ARGUMENTS, f"no {tool} call the world allows"
                          + (" beyond the ones that failed" if tried else ""))
        fn = _schema(self.domain, tool)
        msgs = self.prompts.render("synth_call", domain=self.domain.name, synthesis=plan.synthesis, hints=plan.hints,
                                   tool=tool, tool_description=fn.get("description", "")[:300])
        return cands[self.chooser.choose(msgs, [c.summary for c in cands], what=f"{tool} call")]

    def _writes(self, plan, prop, pool, explored, rng) -> tuple[list[Call], dict, list[dict], dict, list[str]]:
        """(gold calls, facts for the scenario, per write the customer's words for looked-up values, how the
        customer identifies themself (WriteCandidate.identity), per write why they ask (WriteCandidate.reason)).
        A world write's lookups (WriteCandidate.reads) come right before it, each read once."""
        writes: list[Call] = []
        steps: list[Call] = []  # the writes with the reads that find their looked-up values
        said: list[dict] = []
        sources: dict[int, Optional[int]] = {}
        facts: dict[str, Any] = {}
        owner: Optional[dict] = None  # a world write's customer: the next write is for the same one
        identity: dict = {}
        reasons: list[str] = []  # per write, why the customer asks (WriteCandidate.reason)
        chain = chain_param(self.domain, *plan.slice.tools[:2]) if plan.slice.intent == "chain" else None
        for i, tool in enumerate(plan.slice.tools):
            fixed = owner
            if chain and i == 1:  # the record the first write made: its id from that write's result
                made = _parse_output(result.content)
                if not isinstance(made, dict) or made.get(chain) is None:
                    raise _NoTask(SynthesisFailure.NOTHING_TO_LOOK_UP, f"{plan.slice.tools[0]} returned no {chain}")
                fixed = {**(owner or {}), chain: made[chain]}
            later = tuple(plan.slice.tools[i + 1:]) if i == 0 and not chain else ()
            args, src, result, world = self._one_write(plan, prop, tool, writes, pool, rng, fixed=fixed, then=later)
            if world is not None:
                owner = _owner(world)
            words = dict(world.said) if world is not None else {}
            identity = identity or (dict(world.identity) if world is not None else {})
            reasons.append(world.reason if world is not None else "")
            for name, rargs in (world.reads if world is not None else ()):
                if not any(c.name == name and c.arguments == rargs for c in steps):
                    steps.append(Call(name, dict(rargs)))
            writes.append(Call(tool, args))
            steps.append(writes[-1])
            said.append(words)
            # what the write returned (a new record's id, ...) is known to later gold actions
            pool.walk(_parse_output(result.content) or {}, len(explored) + len(writes) - 1)
            for p, v in args.items():
                facts[p] = words[p] if p in words else v
                if src.get(p) is not None:
                    sources[src[p]] = src[p]
        reads = [explored[i] for i in sorted(sources) if i < len(explored)]
        return [Call(c.name, dict(c.arguments)) for c in reads] + steps, \
            {k: v for k, v in facts.items() if v != ""}, said, identity, reasons

    def _lookup_write(self, plan, prop, pool, explored, rng, task_id: str) -> tuple[list[Call], dict, Request]:
        """A read, then the write that uses an id it returned: the customer names the record (a name or
        email beside the id in the read's result) instead of giving the id, so the agent must look it up."""
        read, write = plan.slice.tools[0], plan.slice.tools[-1]
        param = lookup_param(self.domain, read, write)
        if param is None:
            raise _NoTask(SynthesisFailure.NO_LOOKUP, f"{write} has no id argument that {read} returns")
        opts = self._read_options(pool, set(), rng, only=read)
        if not opts:
            raise _NoTask(SynthesisFailure.NO_ARGUMENTS, f"no values seen for the arguments of {read}")
        msgs = self.prompts.render("synth_explore", domain=self.domain.name, synthesis=plan.synthesis,
                                   hints=plan.hints, so_far="; ".join(c.render() for c in explored) or "none")
        call = self._run_read(self.domain.fork(self.start),
                              opts[self.chooser.choose(msgs, [c.render() for c in opts], what="lookup call")], Pool(), 0)
        if call.error:
            raise _NoTask(SynthesisFailure.GOLD_ACTION_ERROR, f"{call.render()}: {call.content[:160]}")
        if call.arguments:  # a search by what the customer knows (an email, a phone number): its arguments
            found = call.output if isinstance(call.output, (str, int)) else next(
                (i for i, _, _ in named_records(call.output, param, unique=False)), None)
            if found is None:
                raise _NoTask(SynthesisFailure.NOTHING_TO_LOOK_UP, f"{call.render()} returned no {param}")
            rid, identity = found, dict(call.arguments)
        else:  # a listing: the customer names a record of it
            named = named_records(call.output, param)
            # the sampled world's own customers first: the base database's (mock's user_1) are the ones
            # evaluation tasks use, and the held-out check would reject their requests more often
            base = _base_keys(self.domain)
            named = [n for n in named if str(n[0]) not in base] or named
            if not named:
                raise _NoTask(SynthesisFailure.NOTHING_TO_LOOK_UP,
                              f"{call.render()} returned no {param} with a unique name or email")
            rng.shuffle(named)
            named = named[:MAX_OPTIONS]
            msgs = self.prompts.render("synth_argument", domain=self.domain.name, synthesis=plan.synthesis, tool=write,
                                       tool_description=_schema(self.domain, write).get("description", ""),
                                       seen=pool.summary(), param=param, param_description="the customer, by name")
            rid, key, name = named[self.chooser.choose(msgs, [f"{n} ({i})" for i, _, n in named],
                                                       what=f"{write}.{param}")]
            identity = {key: name}
        args, _, _, _ = self._one_write(plan, prop, write, [], pool, rng, fixed={param: rid})
        step = Step(write, {k: v for k, v in args.items() if k != param}, [param])
        gold = [Call(call.name, dict(call.arguments)), Call(write, args)]
        return gold, dict(args), Request(task_id=task_id, steps=[step], identity=identity)

    def _scenario(self, plan: PlanPair, prop: Proposal, gold: list[Call], facts: dict,
                  request: Request) -> tuple[UserScenario, str, tuple[str, ...]]:
        """(scenario, its phrasing tag, the facts the customer gives only when asked). The model writes
        reason_for_call and known_info; each passes the fidelity gate (kit/grounding.text_problems:
        carries the values the request needs, no meta-text or assistant-speak, invents no ids) or is
        replaced by the phrasing bank's (kit/rollout/phrasing.py; a recorded repair). The bank's task
        instructions are code; a plan whose dialogue edge is facts_on_request has the customer withhold
        their own id until the agent asks."""
        actions = "; ".join(c.render() for c in gold)
        needed = request.values()
        db = self.domain.fork(self.start).agent_db.model_dump(mode="json")
        known_text = json.dumps(db, default=str) + " " + request.text()
        bank = scenario_text(request, seed="scenario", labels=record_labels(db),
                             ask_for_id=plan.slice.edge.startswith("facts_on_request"))
        reason = self.chooser.write(self.prompts.render(
            "synth_reason", persona=plan.slice.persona, synthesis=plan.synthesis, hints=plan.hints,
            actions=actions), 40, what="reason_for_call")
        fact_line = ", ".join(f"{k} = {option_text(v)}" for k, v in facts.items()) or "none"
        known = self.chooser.write(self.prompts.render(
            "synth_known_info", actions=actions, facts=fact_line, hints=plan.hints), 40, what="known_info")
        phrasing, ask_for = "free_form", ()
        if self.raw:
            missing = [v for v in needed if not contains(norm(reason), v)]
            for name, text, values in (("reason_for_call", reason, ()), ("known_info", known, missing)):
                problems = text_problems(text, values, known_text, second_person=True)
                prop.fidelity[name] = problems
                if problems:
                    prop.unrepaired.append(f"{name}: {problems[0]}")
        elif self.repair_scenario:
            problems = text_problems(reason, (), known_text, second_person=True)
            prop.fidelity["reason_for_call"] = problems
            if problems or not reason:
                reason, phrasing, ask_for = bank.reason_for_call, bank.phrasing, bank.ask_for
                prop.repairs.append(f"fidelity: reason_for_call ({(problems or ['empty'])[0]}) -> template")
            low = norm(reason)
            problems = text_problems(known, [v for v in needed if not contains(low, v)], known_text, second_person=True)
            prop.fidelity["known_info"] = problems
            if problems:  # the bank's own known info goes with the bank's reason; beside model prose, every fact
                known = bank.known_info if phrasing == bank.phrasing and reason == bank.reason_for_call \
                    else facts_text(request)
                prop.repairs.append(f"fidelity: known_info ({problems[0]}) -> template")
        if not reason:
            reason, phrasing, ask_for = bank.reason_for_call, bank.phrasing, bank.ask_for
        instructions = task_instructions(request, "scenario", tuple(ask_for))
        return UserScenario(persona=plan.slice.persona, instructions=StructuredUserInstructions(
            domain=self.domain.name, reason_for_call=reason, known_info=known or None,
            unknown_info=None, task_instructions=instructions)), phrasing, tuple(ask_for)


_NAME_FIELDS = ("name", "full_name", "username", "email")


def named_records(output: Any, param: str, unique: bool = True) -> list[tuple[Any, str, str]]:
    """[(id, field, value)]: records of a read's result holding `param` (user_id) and a name or email
    that no other record there has (`unique`), so a customer can be found by it."""
    found: list[tuple[Any, str, str]] = []

    def walk(obj: Any, depth: int = 0) -> None:
        if depth > 4:
            return
        if isinstance(obj, dict):
            if isinstance(obj.get(param), (str, int)):
                key = next((k for k in _NAME_FIELDS if isinstance(obj.get(k), str) and obj[k].strip()), None)
                if key or not unique:
                    found.append((obj[param], key or "", (obj.get(key) or "").strip() if key else ""))
            for v in obj.values():
                walk(v, depth + 1)
        elif isinstance(obj, list):
            for v in obj:
                walk(v, depth + 1)

    walk(output)
    counts: dict[str, int] = {}
    for _, _, name in found:
        counts[name.lower()] = counts.get(name.lower(), 0) + 1
    if not unique:
        return found
    return [(i, k, n) for i, k, n in found if counts[n.lower()] == 1 and str(i).lower() not in n.lower()]


def _base_keys(domain: Domain) -> set[str]:
    """Record keys of the domain's own starting database (before a world adds records)."""
    db = domain.pristine_agent_db
    return {str(k) for table in (vars(db).values() if db is not None else ()) if isinstance(table, dict) for k in table}


def record_labels(db: dict) -> dict[str, str]:
    """Record key -> its title or name, for every table of a database dump (how a customer calls a task)."""
    out: dict[str, str] = {}
    for table in (db or {}).values():
        if not isinstance(table, dict):
            continue
        for key, rec in table.items():
            if isinstance(rec, dict):
                label = rec.get("title") or rec.get("name")
                if isinstance(label, str) and label.strip():
                    out[str(key)] = label.strip()
    return out


def _unbanned(options: list, banned: set) -> list:
    kept = [(v, src) for v, src in options if json.dumps(v) not in banned]
    return kept or list(options)


class _NoTask(Exception):
    """The synthesizer could not build a task: why (typed) and the detail for people."""

    def __init__(self, cause: SynthesisFailure, detail: str):
        super().__init__(f"{cause}: {detail}")
        self.cause, self.detail = cause, detail
