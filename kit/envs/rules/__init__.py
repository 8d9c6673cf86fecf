"""Coded policy rules of the τ² domains: what a domain's policy forbids that its tools allow.

A rule takes (domain, task) and returns why the task's gold actions break the policy, or None.
Its answer starts with "<domain> policy (<rule function name>): ", so a rejection names the rule.
The engine's validator (kit/engine/validate.py, check `policy`) rejects a synthesized task that
breaks a rule of its domain. tau2 ships the domains, so their rules live here, one module per
domain (airline.py, retail.py, telecom.py; the shared reading of gold actions in gold.py); a
domain of one's own brings its own (`register_domain(..., policy_rules=[...])`, or
`POLICY_RULES` in its module).

A rule reads only the gold actions' arguments and the database: the task's initial state, with
the gold actions before it applied in order (`gold.before_each`). What a rule cannot see (what
the user said, e.g. a cancellation's reason) it never guesses: it refuses only what is certainly
forbidden. scripts/replay_policy_rules.py runs every rule over tau2's own tasks; the tasks whose
gold tau2 itself lets break its policy are listed in tests/test_rules.py (KNOWN_DISAGREEMENTS).
"""

from __future__ import annotations

from kit.envs.rules import airline, retail, telecom
from kit.envs.rules.airline import airline_no_cancel_after_flown
from kit.envs.rules.gold import PolicyRule

BUILTIN_RULES: dict[str, tuple[PolicyRule, ...]] = {
    "airline": airline.RULES,
    "retail": retail.RULES,
    "telecom": telecom.RULES,
}

__all__ = ["BUILTIN_RULES", "PolicyRule", "airline_no_cancel_after_flown"]
