"""Plan pairs and the meta-planner.

A plan pair is (synthesis plan, evaluation plan) over one *slice* of the domain:

  intent     lookup (read tools only, the agent must tell a fact) | change (one write)
             | multi_change (two writes) | chain (a write that makes a record, then a write to that
             record: create_task then update_task_status of the new task; book_reservation then a change
             to the new reservation; the second write's id is the first one's result) | lookup_change (a read, then one write that uses an id it
             returned: the customer names themself, the agent looks the id up) | refuse (a write the
             policy forbids) | device_fix (a fault on the customer's phone that the customer fixes
             with their own tools as the agent guides them; tools: the gold's writes, the user's
             device action last: kit/envs/arguments/device.py)
  tools      the tool pattern: which agent tools the gold actions use, in order
  persona    who the simulated user is
  edge       how the dialogue is harder than a plain request (facts only on request,
             two requests in one call, ...)

The meta-planner asks the model to pick each slice dimension among the options the domain
offers (constrained choices, kit/engine/choice.py), preferring slices not yet planned, then
to write both plans as prose. A plan whose similarity to an earlier one this round exceeds
`max_similarity` is rejected (similarity = 0.6 · Jaccard of slice features + 0.4 · Jaccard of
word 3-gram shingles of the plan text); `diversity` = 1 − mean pairwise similarity.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Optional

from kit.engine.choice import Chooser
from kit.engine.edits import parse_edit
from kit.engine.prompts import Prompts
from kit.envs.domain import Domain

PERSONAS = [
    "a busy professional who writes short, direct messages",
    "a polite retiree who explains things at length",
    "a first-time customer who is unsure of the terms",
    "an impatient customer who wants it done quickly",
    "a careful customer who double-checks every detail",
    "a friendly customer who chats a little before asking",
]
EDGES = [
    "none: the customer states the whole request at once",
    "facts_on_request: the customer gives ids and values only when the agent asks",
    "vague_start: the customer starts vaguely and clarifies when asked",
]
GENERIC_TOOLS = {"transfer_to_human_agents", "calculate", "think"}


@dataclass
class Slice:
    intent: str
    tools: list[str]
    persona: str
    edge: str

    def features(self) -> set[str]:
        return {f"intent:{self.intent}", f"edge:{self.edge.split(':')[0]}", f"persona:{self.persona}",
                *(f"tool:{t}" for t in self.tools), "pattern:" + ">".join(self.tools)}

    def describe(self) -> str:
        return (f"intent {self.intent}; tools {' then '.join(self.tools)}; user persona: {self.persona}; "
                f"dialogue edge: {self.edge}")


@dataclass
class PlanPair:
    id: str
    slice: Slice
    synthesis: str
    evaluation: str
    hints: list[str] = field(default_factory=list)
    history: list[dict] = field(default_factory=list)  # one entry per reflection; its "edit" is typed (edits.py)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["history"] = [{**h, "edit": parse_edit(h["edit"]).model_dump(mode="json")} if "edit" in h else h
                        for h in d["history"]]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "PlanPair":
        """A plan from plans/round_<k>.json, of this kit or an older one (an edit as text there)."""
        d = dict(d)
        d["slice"] = Slice(**d["slice"])
        d["history"] = [{**h, "edit": parse_edit(h["edit"])} if "edit" in h else h for h in d.get("history") or []]
        return cls(**d)


def lookup_param(domain: Domain, read: str, write: str) -> Optional[str]:
    """The id argument of `write` that `read` looks up, or None: a required `<thing>_id` of the write
    whose thing the read's name mentions (get_users -> user_id), and which the read does not itself
    need (get_user_details(user_id) finds nothing a customer without the id could ask for)."""
    def required(name: str) -> list[str]:
        fn = next((s["function"] for s in domain.tool_schemas("assistant") if s["function"]["name"] == name), {})
        return list((fn.get("parameters") or {}).get("required") or [])

    read_words = set(read.lower().split("_"))
    needs = set(required(read))
    for p in required(write):
        thing = p[:-3] if p.endswith("_id") else None
        if thing and p not in needs and (thing in read_words or thing + "s" in read_words):
            return p
    return None


def chain_param(domain: Domain, first: str, second: str) -> Optional[str]:
    """The id argument of write `second` that write `first` creates (create_task -> update_task_status's
    task_id; book_reservation -> cancel_reservation's reservation_id), or None: the rule of `lookup_param`
    (a required `<thing>_id` of `second` whose thing `first`'s name mentions and `first` does not take), for
    a `first` that makes records (its verb: create, book, add, ...)."""
    from kit.rollout.request import CREATE_VERBS

    if first == second or first.split("_")[0] not in CREATE_VERBS:
        return None
    return lookup_param(domain, first, second)


def tool_patterns(domain: Domain, max_pairs: int = 6, seed: int = 0) -> list[tuple[str, list[str]]]:
    """(intent, tools) pairs the domain supports: every read tool that takes arguments alone, every
    write tool alone, ordered pairs of write tools: at most one per write tool and at most `max_pairs`,
    pairs of two different tools first (the same write twice only where a domain has one write),
    and lookups then a write (`lookup_param`): at most one per write tool; and, where the domain has
    calls its policy forbids (kit/envs/arguments/forbidden.py), a request to refuse per such tool.

    Why the cap: the meta-planner spreads plans evenly over these patterns, so the share of
    two-write tasks is the share of pair patterns. Uncapped, mock (two writes) had four pairs
    against two single writes, and an agent trained on that data made a second write after
    every request (measured: all 120 held-out episodes of laptop-repro). A lookup then a write
    has one write: it adds single-write tasks whose id the agent must find (mock: get_users then
    create_task for a customer who gives their name), so the pairs' share drops, never rises."""
    names = [n for n in domain.tool_names("assistant") if n not in GENERIC_TOOLS]
    reads = [n for n in names if domain.tool_kind(n) == "read"]
    writes = [n for n in names if domain.tool_kind(n) == "write"]
    # a read alone is a customer's question about something they name: a read without arguments (mock's
    # get_users, airline's list_all_airports) is no such question, and the synthesizer rejects every
    # proposal of that plan as unaskable; it stays offered as the lookup before a write
    askable = [r for r in reads if _arguments(domain, r)]
    out = [("change", [w]) for w in writes] + [("lookup", [r]) for r in askable]
    rng = random.Random(seed)
    pairs = list(itertools.permutations(writes, 2))
    rng.shuffle(pairs)
    if not pairs:
        pairs = [(w, w) for w in writes]
    # a pair whose second write takes the id of the record the first one makes is a chain (chain_param)
    out += [("chain" if chain_param(domain, *p) else "multi_change", list(p)) for p in pairs[:min(max_pairs, len(writes))]]
    lookups = [("lookup_change", [r, w]) for w in writes
               for r in [next((r for r in reads if lookup_param(domain, r, w)), None)] if r is not None]
    from kit.envs.arguments.forbidden import refusal_tools

    refusals = [("refuse", [w]) for w in refusal_tools(domain.name) if w in writes]
    return out + lookups[:max(1, max_pairs // 2)] + refusals + device_fix_patterns(domain)


def _arguments(domain: Domain, tool: str) -> list[str]:
    fn = next((s["function"] for s in domain.tool_schemas("assistant") if s["function"]["name"] == tool), {})
    return list(((fn.get("parameters") or {}).get("properties") or {}).keys())


def device_fix_patterns(domain: Domain) -> list[tuple[str, list[str]]]:
    """("device_fix", tools) per device fault pattern of the domain (kit/envs/arguments/device.py; telecom)."""
    from kit.envs.arguments.device import device_patterns

    user_tools = set(domain.tool_names("user"))
    return [("device_fix", list(p)) for p in device_patterns(domain.name) if p[-1] in user_tools]


def device_fix_cap(n: int, share: Optional[float]) -> int:
    """How many of n plans are device fixes at `share` (rounded; None or 0: none)."""
    return int(round((share or 0.0) * n))


def _shingles(text: str, n: int = 3) -> set[str]:
    words = re.findall(r"[a-z0-9_]+", text.lower())
    return {" ".join(words[i:i + n]) for i in range(max(1, len(words) - n + 1))} if words else set()


def _jaccard(a: set, b: set) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def similarity(a: PlanPair, b: PlanPair) -> float:
    feat = _jaccard(a.slice.features(), b.slice.features())
    text = _jaccard(_shingles(a.synthesis + " " + a.evaluation), _shingles(b.synthesis + " " + b.evaluation))
    return 0.6 * feat + 0.4 * text


def diversity(plans: list[PlanPair]) -> float:
    pairs = list(itertools.combinations(plans, 2))
    if not pairs:
        return 0.0
    return 1.0 - sum(similarity(a, b) for a, b in pairs) / len(pairs)


def write_plan_texts(chooser: Chooser, prompts: Prompts, sl: Slice) -> tuple[str, str]:
    synthesis = chooser.write(prompts.render("plan_synthesis", slice=sl.describe()), 60, what="plan synthesis")
    if not synthesis:
        synthesis = f"Tasks where the customer needs: {sl.describe()}."
    evaluation = chooser.write(prompts.render("plan_evaluation", synthesis=synthesis), 48, what="plan evaluation")
    if not evaluation:
        evaluation = "The task is solvable with the listed tools and states every value the agent needs."
    return synthesis, evaluation


def meta_plan(domain: Domain, n: int, chooser: Chooser, prompts: Prompts, max_similarity: float = 0.75,
              seed: int = 0, max_tries: Optional[int] = None,
              max_lookup_share: Optional[float] = None,
              device_fix_share: Optional[float] = None) -> tuple[list[PlanPair], dict]:
    """N plan pairs for the domain; returns (plans, stats with rejected near-duplicates). At most
    int(max_lookup_share × n) of them are read-only (intent `lookup`; None: no cap): a domain with many
    read tools (airline: 6 reads, 6 writes) otherwise spends a third of its plans on lookups. Until every
    write tool is in some plan, the patterns offered are those holding a write tool no plan has yet.
    Exactly round(device_fix_share × n) of them are device fixes where the domain has device faults (the
    last ones: the slots they need are kept for them, the patterns of the rest offered first)."""
    patterns = tool_patterns(domain, seed=seed)
    lookup_cap = n if max_lookup_share is None else int(max_lookup_share * n)
    device_cap = device_fix_cap(n, device_fix_share) if device_fix_patterns(domain) else 0
    if not patterns:
        raise ValueError(f"domain {domain.name!r} has no read or write tools for the meta-planner to plan over")
    tools_line = ", ".join(n for n in domain.tool_names("assistant") if n not in GENERIC_TOOLS)
    plans: list[PlanPair] = []
    rejected = 0
    tries = 0
    used_patterns: dict[str, int] = {}
    writes = {t for t in domain.tool_names("assistant") if domain.tool_kind(t) == "write"}
    while len(plans) < n and tries < (max_tries or 4 * n):
        tries += 1
        existing = "\n".join(f"- {p.slice.describe()}" for p in plans) or "- none yet"
        base = dict(domain=domain.name, tools=tools_line, existing=existing)
        # every write tool in some plan first (airline's six writes: the model alone picked three), then
        # fewest-used patterns first: the model chooses among the least covered slices
        lookups = sum(p.slice.intent == "lookup" for p in plans)
        refusals = sum(p.slice.intent == "refuse" for p in plans)
        allowed = [p for p in patterns if (p[0] != "lookup" or lookups < lookup_cap)
                   and (p[0] != "refuse" or refusals < max(1, n // 8))] or patterns
        covered = {t for p in plans if p.slice.intent != "refuse" for t in p.slice.tools}
        allowed = [p for p in allowed if p[0] != "refuse" and set(p[1]) & (writes - covered)] or allowed
        devices = sum(p.slice.intent == "device_fix" for p in plans)
        owed = device_cap - devices  # device plans still to write: the last slots are theirs
        allowed = ([p for p in patterns if p[0] == "device_fix"] if 0 < owed >= n - len(plans)
                   else [p for p in allowed if p[0] != "device_fix"] or [p for p in patterns if p[0] != "device_fix"])
        least = min(used_patterns.get(">".join(t), 0) for _, t in allowed)
        fresh = [p for p in allowed if used_patterns.get(">".join(p[1]), 0) == least]
        pi = chooser.choose(prompts.render("meta_planner", **base, slice="the tool pattern"),
                            [f"{i}: {' then '.join(t)}" for i, t in fresh], what="plan tools")
        intent, tools = fresh[pi]
        persona = PERSONAS[chooser.choose(prompts.render("meta_planner", **base, slice="the customer persona"),
                                          PERSONAS, what="plan persona")]
        # the least used dialogue edges are offered (the 135M model alone gave airline 24 of 24 and telecom 40 of 40
        # plans facts_on_request and retail none: retail's agent never learned to ask who the customer is)
        edge_use = Counter(p.slice.edge for p in plans)
        least_edge = min(edge_use[e] for e in EDGES)
        edges = [e for e in EDGES if edge_use[e] == least_edge]
        edge = edges[chooser.choose(prompts.render("meta_planner", **base, slice="the dialogue edge"),
                                    edges, what="plan edge")]
        sl = Slice(intent=intent, tools=list(tools), persona=persona, edge=edge)
        synthesis, evaluation = write_plan_texts(chooser, prompts, sl)
        cand = PlanPair(id=f"plan{len(plans)}", slice=sl, synthesis=synthesis, evaluation=evaluation)
        if any(similarity(cand, p) > max_similarity for p in plans):
            rejected += 1
            continue
        used_patterns[">".join(tools)] = used_patterns.get(">".join(tools), 0) + 1
        plans.append(cand)
    if len(plans) < n:
        raise RuntimeError(f"meta-planner produced {len(plans)}/{n} distinct plans in {tries} tries "
                           f"(max_similarity={max_similarity}); raise max_similarity or lower num_plans")
    return plans, {"plans_proposed": tries, "plans_rejected_similar": rejected, "diversity": diversity(plans)}


def save_plans(path, plans: list[PlanPair]) -> None:
    from kit.engine.store import atomic_write

    atomic_write(path, json.dumps([p.to_dict() for p in plans], indent=1, ensure_ascii=False))


def load_plans(path) -> list[PlanPair]:
    with open(path, encoding="utf-8") as f:
        return [PlanPair.from_dict(d) for d in json.load(f)]
