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


def airline_no_cancel_after_flown(domain: "Domain", task) -> Optional[str]:
    """Airline policy: a reservation with a flown segment cannot be cancelled by the agent."""
    env = domain.fork(task)
    for a in task.evaluation_criteria.actions or []:
        if a.name == "cancel_reservation":
            res = env.env.tools.db.reservations.get(a.arguments.get("reservation_id"))
            flights = getattr(res, "flights", []) if res is not None else []
            if any(getattr(f, "status", None) == "flown" for f in flights):
                return "airline policy: cannot cancel a reservation with a flown segment"
    return None


BUILTIN_RULES: dict[str, tuple[PolicyRule, ...]] = {"airline": (airline_no_cancel_after_flown,)}
