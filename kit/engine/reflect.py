"""The reflector: after a round, rewrite each plan from what went wrong with it.

Per plan it sees the round's numbers (proposals, acceptances), the rejection reasons, the
failure attributions of the rollouts (task / agent / user, kit/checkers/attribution.py)
and a few examples. It picks one edit among those the evidence allows (a constrained
choice over their `text()`), then rewrites the plan prose with that edit (kit/engine/edits.py):

  Keep                  nothing to fix
  Simplify              multi_change or chain → one write (when writes fail or episodes fail)
  Harder                one write → two writes starting with it, a chain where the domain has one
                        (create, then change what was created) (when everything passed: the tasks are easy)
  SwitchTools(tools)    another tool pattern of the domain, one that fared better in another
                        plan this round, or one nobody tried yet (when this one failed)
  Persona(persona)      another simulated user (when user-attributed failures dominate)
  Hint(line)            a line added to the synthesizer prompts of this plan — the way
                        reflection adjusts the prompts (e.g. "state every id exactly")

Every decision lands in the plan's `history`, and plans/round_<k>.json keeps each round.

Coverage: a switch (or harder) may move a plan only to a pattern the next round's plans hold
fewer than their fair share of (plans / patterns, rounded up), and only away from a pattern
another plan still holds; a plan that failed outright (0 of its proposals accepted) may leave its
pattern and take one share over. Without this guard, evolution
collapsed the task mix: in rl-cpu (2026-12-02) round 1 switched 3 of 6 plans to the one pattern
that round 0 accepted best (update_task_status then create_task), dropped the only update-only
plan, and the agent trained on that data answered 75% of held-out requests with one of two
scripts and solved no update-only task.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Optional

from kit.engine.choice import Chooser
from kit.engine.edits import Edit, Harder, Hint, Keep, Persona, Simplify, SwitchTools
from kit.engine.plans import PERSONAS, PlanPair, Slice, device_fix_cap, tool_patterns
from kit.engine.prompts import Prompts
from kit.engine.records import Check, SynthesisFailure
from kit.envs.domain import Domain

# the hint offered when a plan's rejections (Check / SynthesisFailure) or failures (attribution label) name the key
HINTS = {
    Check.GROUNDED_ARGS: "Mention every id and value the agent will need, exactly as written in the database.",
    SynthesisFailure.WRITE_FAILED: "Pick records and values that the tool accepts; prefer values you saw in the database.",
    SynthesisFailure.EMPTY_VALUE: "Always write a short, concrete value (a few words).",
    Check.LLM_JUDGE: "Keep the request realistic and clearly tied to the plan.",
    "user": "The customer only states facts from their instructions and stops only when the request is done.",
}


def _edits(domain: Domain, plan: PlanPair, stats: dict, pattern_stats: dict,
           coverage: Optional[Counter] = None, lookup_room: bool = True, device_room: bool = True) -> list[Edit]:
    """The edits the evidence allows. `coverage`: tool pattern -> plans holding it in the next round so
    far (this plan included); None = no coverage guard (module docstring). `lookup_room`: False when the
    next round already holds its most read-only plans (max_lookup_share): no switch to a lookup. `device_room`:
    the same for device fixes (device_fix_share)."""
    sl = plan.slice
    rejections: Counter = stats["rejections"]
    failures: Counter = stats["failures"]
    current = ">".join(sl.tools)
    if coverage is None:
        room = lambda key: True  # noqa: E731
        can_leave = True
    else:
        share = max(1, math.ceil(sum(coverage.values()) / max(len(tool_patterns(domain)), 1)))
        barren = stats["proposals"] > 0 and stats["accepted"] == 0  # a plan that yields nothing may double up
        room = lambda key: coverage.get(key, 0) < share + (1 if barren else 0)  # noqa: E731
        can_leave = coverage.get(current, 0) > 1 or barren
    edits: list[Edit] = [Keep()]
    if sl.intent in ("multi_change", "chain") and (stats["accepted"] < stats["proposals"] or failures):
        edits.append(Simplify())
    # harder only on evidence that agents solve these tasks (rollouts ran, none failed); without
    # rollouts a fully accepted plan says the tasks are valid, not that they are easy
    if sl.intent == "change" and stats["accepted"] == stats["proposals"] and stats.get("episodes") and not failures \
            and can_leave and room(">".join(_apply(domain, plan, Harder()).tools)):
        edits.append(Harder())
    if stats["accepted"] < stats["proposals"] and can_leave:
        # switch only to patterns the round's evidence favours (a higher acceptance rate in
        # another plan) or that nobody tried yet (at most two of those), and that have room
        own = stats["accepted"] / max(stats["proposals"], 1)
        untried = 0
        for intent, tools in tool_patterns(domain):
            key = ">".join(tools)
            acc, n = pattern_stats.get(key, (0, 0))
            if key == current or not room(key) or (intent == "lookup" and not lookup_room) \
                    or (intent == "device_fix" and not device_room):
                continue
            if n and acc / n > own:
                edits.append(SwitchTools(tools=tuple(tools)))
            elif not n and untried < 2:
                edits.append(SwitchTools(tools=tuple(tools)))
                untried += 1
    if failures.get("user"):
        edits += [Persona(persona=p) for p in PERSONAS if p != sl.persona][:2]
    for key, hint in HINTS.items():
        if (rejections.get(key) or failures.get(key)) and hint not in plan.hints:
            edits.append(Hint(line=hint))
    return edits


def _apply(domain: Domain, plan: PlanPair, edit: Edit) -> Slice:
    sl = Slice(**vars(plan.slice))
    sl.tools = list(sl.tools)
    if isinstance(edit, Simplify):
        sl.intent, sl.tools = "change", sl.tools[:1]
    elif isinstance(edit, Harder):  # a pair that starts with this tool, another tool second where the domain has one
        pairs = [(i, t) for i, t in tool_patterns(domain) if i in ("multi_change", "chain") and t[0] == sl.tools[0]]
        sl.intent, sl.tools = (sorted(pairs, key=lambda p: (p[1][1] == p[1][0], p[0] != "chain"))[0] if pairs
                               else ("multi_change", sl.tools + sl.tools[:1]))
    elif isinstance(edit, SwitchTools):
        sl.tools = list(edit.tools)
        sl.intent = dict((">".join(t), i) for i, t in tool_patterns(domain)).get(">".join(edit.tools), sl.intent)
    elif isinstance(edit, Persona):
        sl.persona = edit.persona
    return sl


def reflect(domain: Domain, plans: list[PlanPair], stats_by_plan: dict[str, dict], examples: dict[str, list[str]],
            chooser: Chooser, prompts: Prompts, round_idx: int,
            pattern_stats: dict | None = None, max_lookup_share: Optional[float] = None,
            device_fix_share: Optional[float] = None) -> list[PlanPair]:
    """Next round's plans. `pattern_stats`: tool pattern "a>b" -> (accepted, proposals) this round.
    `max_lookup_share`: at most int(share × plans) read-only plans after the edits (None: no cap); on
    airline the lookups are the plans that succeed, and switching to them would drain the writes.
    `device_fix_share`: no switch to a device fix past round(share × plans) of them (None: no cap); a
    device fix is accepted nearly always, and switches to it would crowd out the writes under policy."""
    pattern_stats = pattern_stats or {}
    lookup_cap = len(plans) if max_lookup_share is None else int(max_lookup_share * len(plans))
    lookups = sum(p.slice.intent == "lookup" for p in plans)
    device_cap = len(plans) if device_fix_share is None else device_fix_cap(len(plans), device_fix_share)
    devices = sum(p.slice.intent == "device_fix" for p in plans)
    evidence = "; ".join(f"{k}: {a}/{n} accepted" for k, (a, n) in sorted(pattern_stats.items())) or "none"
    out = []
    coverage = Counter(">".join(p.slice.tools) for p in plans)
    for plan in plans:
        st = stats_by_plan.get(plan.id) or {"proposals": 0, "accepted": 0, "rejections": Counter(),
                                             "failures": Counter()}
        edits = _edits(domain, plan, st, pattern_stats, coverage, lookup_room=lookups < lookup_cap,
                       device_room=devices < device_cap)
        msgs = prompts.render(
            "reflector", domain=domain.name, synthesis=plan.synthesis, slice=plan.slice.describe(),
            proposals=st["proposals"], accepted=st["accepted"],
            rejections=json.dumps(dict(st["rejections"])) or "none",
            failures=json.dumps(dict(st["failures"])) or "none",
            examples=" | ".join(examples.get(plan.id, [])[:2])[:500] or "none", patterns=evidence)
        edit = edits[chooser.choose(msgs, [e.text() for e in edits], what=f"reflect {plan.id}")]
        new = PlanPair(id=plan.id, slice=_apply(domain, plan, edit), synthesis=plan.synthesis,
                       evaluation=plan.evaluation, hints=list(plan.hints), history=list(plan.history))
        coverage[">".join(plan.slice.tools)] -= 1
        coverage[">".join(new.slice.tools)] += 1
        lookups += (new.slice.intent == "lookup") - (plan.slice.intent == "lookup")
        devices += (new.slice.intent == "device_fix") - (plan.slice.intent == "device_fix")
        if isinstance(edit, Hint):
            new.hints.append(edit.line)
        if not isinstance(edit, (Keep, Hint)):
            rewritten = chooser.write(prompts.render("reflector_rewrite", synthesis=plan.synthesis,
                                                     edit=f"{edit.text()}; new slice: {new.slice.describe()}"),
                                      60, what=f"rewrite {plan.id}")
            new.synthesis = rewritten or f"Tasks where the customer needs: {new.slice.describe()}."
        new.history.append({"round": round_idx, "edit": edit, "options": len(edits),
                            "proposals": st["proposals"], "accepted": st["accepted"],
                            "rejections": dict(st["rejections"]), "failures": dict(st["failures"])})
        out.append(new)
    return out
