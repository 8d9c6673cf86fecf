"""Write calls a customer may ask for that the tool would run but the policy may forbid.

The generators beside this module draw only calls the policy allows. A τ² agent must also learn to
decline: cancel a basic-economy booking made weeks ago without insurance, resume a line whose bills
are unpaid, send a payment request for a bill that is not overdue. These generators draw such calls
from every record (not only the eligible ones); the engine (kit/engine/synthesize.py, intent
`refuse`) keeps the ones that run without error, change the database, and break one of the domain's
coded rules (kit/envs/rules), and builds a task whose gold leaves the database as it was: the reads
an agent makes to check, then a refusal that names the rule.

Each candidate comes with `reads` (what the agent looks at before it declines) and, through
customer.customer_view, the customer's words for database-only ids.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any, Callable, Optional

from kit.envs.arguments import WriteCandidate, draw


def _airline_cancel(db: Any, rng: random.Random, limit: int) -> list[WriteCandidate]:
    def options(res, _rng):
        if res.user_id not in db.users:
            return []
        return [WriteCandidate({"reservation_id": res.reservation_id},
                               {"user_id": res.user_id, "reservation_id": res.reservation_id},
                               f"cancel reservation {res.reservation_id} ({res.origin}->{res.destination}, {res.cabin}, "
                               f"insurance {res.insurance}, booked {res.created_at})",
                               reads=(("get_reservation_details", {"reservation_id": res.reservation_id}),))]
    return draw(list(db.reservations.values()), rng, limit, None, options)


def _telecom_lines(db: Any):
    for customer in db.customers:
        for lid in customer.line_ids:
            line = next((x for x in db.lines if x.line_id == lid), None)
            if line is not None:
                yield customer, line


def _telecom_resume(db: Any, rng: random.Random, limit: int) -> list[WriteCandidate]:
    def options(pair, _rng):
        customer, line = pair
        if str(getattr(line.status, "value", line.status)).lower() != "suspended":
            return []
        return [WriteCandidate({"customer_id": customer.customer_id, "line_id": line.line_id},
                               {"customer_id": customer.customer_id, "phone_number": line.phone_number},
                               f"resume line {line.line_id} ({line.phone_number}) of {customer.full_name}")]
    return draw(list(_telecom_lines(db)), rng, limit, None, options)


def _telecom_payment_request(db: Any, rng: random.Random, limit: int) -> list[WriteCandidate]:
    def options(customer, _rng):
        bills = [b for b in db.bills if b.bill_id in customer.bill_ids]
        return [WriteCandidate({"customer_id": customer.customer_id, "bill_id": b.bill_id},
                               {"customer_id": customer.customer_id, "phone_number": customer.phone_number},
                               f"payment request for bill {b.bill_id} ({getattr(b.status, 'value', b.status)}) of "
                               f"{customer.full_name}") for b in bills]
    return draw(list(db.customers), rng, limit, None, options)


FORBIDDEN: dict[str, dict[str, Callable[[Any, random.Random, int], list[WriteCandidate]]]] = {
    "airline": {"cancel_reservation": _airline_cancel},
    "telecom": {"resume_line": _telecom_resume, "send_payment_request": _telecom_payment_request},
}


def forbidden_candidates(domain: str, db: Any, tool: str, rng: random.Random,
                         limit: int = 24) -> Optional[list[WriteCandidate]]:
    """Calls of `tool` over every record (the policy is not consulted here: the engine keeps those a rule
    refuses), as the customer sees them (customer.customer_view), each with the reads that check it;
    None where `domain` has no such generator for `tool`."""
    from kit.envs.arguments.customer import customer_view

    gen = FORBIDDEN.get(domain, {}).get(tool)
    if gen is None:
        return None
    out = []
    for cand in gen(db, rng, limit):
        view = customer_view(domain, db, tool, cand)
        if view is None:
            continue
        reads: list = []
        for r in (*view.reads, *cand.reads):
            if r not in reads:
                reads.append(r)
        out.append(dataclasses.replace(view, reads=tuple(reads)))
    return out


def refusal_tools(domain: str) -> tuple[str, ...]:
    return tuple(FORBIDDEN.get(domain, {}))
