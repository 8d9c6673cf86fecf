"""What every rule reads: a task's gold actions, and the database just before each of them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

if TYPE_CHECKING:
    from kit.envs.domain import Domain

PolicyRule = Callable[["Domain", object], Optional[str]]


def gold_actions(task) -> list:
    """The task's gold actions, in order (none: [])."""
    crit = getattr(task, "evaluation_criteria", None)
    return list((crit.actions if crit is not None else None) or [])


def named(task, *names: str) -> list:
    """The task's gold actions called one of `names`, in order (for rules on arguments alone)."""
    return [a for a in gold_actions(task) if a.name in names]


def before_each(domain: "Domain", task, *names: str) -> Iterator[tuple[Any, Any]]:
    """(action, agent database just before it) for each gold action called one of `names`.

    The gold actions (every one, the user's too) run in order on a fork of the task's initial
    state, so a rule sees what earlier actions changed (an order already modified, a bill already
    paid). The database is the live one: read it before asking for the next pair. A call the tool
    refuses changes nothing, but is still yielded: the gold attempting what the policy forbids is
    what a rule reports, whether or not the tool also refuses it (the validator's `gold_runs`
    check reports the refusal). No fork is made when no gold action has one of the names.
    """
    actions = gold_actions(task)
    if not any(a.name in names for a in actions):
        return
    env = domain.fork(task)
    for a in actions:
        if a.name in names:
            yield a, env.agent_db
        env.execute(a.name, dict(a.arguments or {}), a.requestor)


def violation(domain: str, rule: Callable, why: str) -> str:
    """A rule's answer: "<domain> policy (<rule>): <why>"."""
    return f"{domain} policy ({rule.__name__}): {why}"
