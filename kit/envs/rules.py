"""Coded policy rules of the τ² domains: what a domain's policy forbids that its tools allow.

A rule takes (domain, task) and returns why the task's gold actions break the policy, or None.
The engine's validator (kit/engine/validate.py, check `policy`) rejects a synthesized task that
breaks a rule of its domain. tau2 ships the domains, so their rules live here; a domain of one's
own brings its own (`register_domain(..., policy_rules=[...])`, or `POLICY_RULES` in its module).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from kit.envs.domain import Domain

PolicyRule = Callable[["Domain", object], Optional[str]]


USED = ("landed", "flying")  # a segment whose flight, on its date, has left: the segment is used


def airline_no_cancel_after_flown(domain: "Domain", task) -> Optional[str]:
    """Airline policy ("the agent can only cancel the whole trip that is not flown; if any of the
    segments are already used, the agent cannot help"): a gold `cancel_reservation` of a
    reservation with a used segment breaks it. A reservation's segments carry no status of their
    own; the flight's status on the segment's date (flights table) says whether it has left.
    tau2's own airline tasks 9 and 37 cancel NQNU5R, whose two segments have landed: the rule
    is checked on synthesized tasks only (the engine's validator), never on tau2's."""
    db = domain.fork(task).agent_db
    for a in task.evaluation_criteria.actions or []:
        if a.name != "cancel_reservation":
            continue
        res = db.reservations.get(a.arguments.get("reservation_id"))
        for seg in getattr(res, "flights", None) or []:
            flight = db.flights.get(seg.flight_number)
            day = flight.dates.get(seg.date) if flight is not None else None
            if getattr(day, "status", None) in USED:
                return (f"airline policy: cannot cancel reservation {res.reservation_id}: segment "
                        f"{seg.flight_number} on {seg.date} has {day.status}")
    return None


BUILTIN_RULES: dict[str, tuple[PolicyRule, ...]] = {"airline": (airline_no_cancel_after_flown,)}
