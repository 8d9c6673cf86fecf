"""Whole, coherent argument sets for the write tools of the τ² domains, drawn from the database.

The engine (kit/engine/synthesize.py) used to build a gold write by choosing each argument on its
own from a flat pool of values seen in read results, with model-written free text as a fallback.
That fails whenever an argument's value lives under another name (an airline `payment_id` is a
key of the user's `payment_methods`), must agree with the others (the new item of a retail
exchange is a variant of the old item's product; the paid bags follow from the total, the
cabin and the membership) or is not in any read result at all (a new address). Here, as in
APIGen-MT's blueprints, each write tool has a generator that walks the domain's records and
returns complete argument dicts that the tool accepts, that change the database, and that the
domain's policy allows (the rules of kit/envs/rules hold for a task whose gold is that one
write). The model then only chooses among candidates; it never writes a value.

One module per domain (airline.py, retail.py, telecom.py), each with a `GENERATORS` dict
tool -> generator(db, rng, limit, fixed) -> list[WriteCandidate]. Coverage: all 6 airline write
tools, all 7 retail write tools, all 6 telecom write tools (tests/test_world_arguments.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional


@dataclass(frozen=True)
class WriteCandidate:
    """One complete write call and what a customer asking for it would know."""

    arguments: dict  # the full argument dict of the write call, every value from the db / schema enum / policy bounds
    knows: dict  # what the customer can say to identify things; values appear in the db
    summary: str  # one short line a person (or the choosing model) reads
    # filled by customer.customer_view: the customer's words for the values only the database knows
    # (argument -> "paying with your gift card"), and the read calls (tool, arguments) whose results hold them
    said: dict = field(default_factory=dict)
    reads: tuple = ()
    # how the customer identifies themself where the policy asks the agent to find them first (retail: "your
    # email is ..."; the agent's first read, find_user_id_by_email, takes it): a field of their record -> value
    identity: dict = field(default_factory=dict)
    # why the customer asks, in their words, where the policy needs a circumstance the call's arguments do not
    # hold (airline send_certificate: "because flight HAT001 on 2024-05-15 of your reservation ABC123 was cancelled")
    reason: str = ""


Generator = Callable[..., list]


def agrees(cand: WriteCandidate, fixed: Optional[dict]) -> bool:
    """Whether `cand` agrees with every fixed value: a key is compared with the candidate's
    argument of that name, else with its `knows` entry of that name; a key in neither (the tool
    has no such argument and the customer states no such fact) does not constrain."""
    for key, value in (fixed or {}).items():
        if key in cand.arguments:
            if cand.arguments[key] != value:
                return False
        elif key in cand.knows and cand.knows[key] != value:
            return False
    return True


def draw(records: Iterable, rng: random.Random, limit: int, fixed: Optional[dict],
         options: Callable[[object, random.Random], list]) -> list[WriteCandidate]:
    """At most `limit` candidates, one per record, from the records in a random order: for each
    record, `options(record, rng)` lists its valid candidates; one agreeing with `fixed` is drawn.
    `records` must come in a deterministic order (the db's), so the draw depends on `rng` alone."""
    order = list(records)
    rng.shuffle(order)
    out: list[WriteCandidate] = []
    for record in order:
        if len(out) >= limit:
            break
        ok = [c for c in options(record, rng) if agrees(c, fixed)]
        if ok:
            out.append(rng.choice(ok))
    return out


def _registry() -> dict[str, dict[str, Generator]]:
    from kit.envs.arguments import airline, retail, telecom

    return {"airline": airline.GENERATORS, "retail": retail.GENERATORS, "telecom": telecom.GENERATORS}


GENERATORS: dict[str, dict[str, Generator]] = {}


def write_candidates(domain: str, db, tool: str, rng: random.Random, limit: int = 12,
                     fixed: dict | None = None, as_customer: bool = False) -> list[WriteCandidate] | None:
    """Candidates for one write of `domain` (its name: "airline", "retail", "telecom") on the agent
    database `db` (the tau2 pydantic DB object, e.g. env.agent_db of a kit Domain fork); None when
    the domain or tool has no generator (the engine then falls back to its own per-argument choice).
    `fixed`: arguments already decided (e.g. {"user_id": ...}): only candidates agreeing with them
    (see `agrees`). Deterministic given rng. At most `limit` candidates, drawn from a random sample
    of records. The db is only read. `as_customer`: each candidate with the customer's words and the
    agent's lookups for its database-only values (customer.py); a candidate the customer could not
    single out in words is dropped."""
    gen = GENERATORS.get(domain, {}).get(tool)
    if gen is None:
        return None
    cands = gen(db, rng, limit, fixed)
    if as_customer:
        from kit.envs.arguments.customer import customer_view

        cands = [v for c in cands if (v := customer_view(domain, db, tool, c)) is not None]
    return cands


GENERATORS.update(_registry())

__all__ = ["GENERATORS", "WriteCandidate", "agrees", "draw", "write_candidates"]
