"""Failure attribution: who made a failed episode fail — the task, the agent or the user?

Executable rules first, in this order; the first that fires decides:
  task   gold_unreachable      the task's own gold actions do not earn reward 1
         gold_action_error     a gold action errors when executed from the initial state
  user   (kit/rollout/fidelity.py) an invented fact, an unasked tool call or a stop before
         the goal (not one right after the agent said it was done), *before* the agent's first
         divergent action
  agent  wrong_write           the first agent write that matches no gold action
         missing_action        a gold action the agent never made (first one, in gold order; the
                               evidence says where the agent told the user it was done, if it did)
         failed_call           a gold action's only matching calls were answered with an error
         missing_argument      ... or left out some of its arguments (tau2's action rule matches a
                               call on the call's own arguments; the state differs)
         missing_info          a fact the agent had to communicate and did not
         ended_early           the episode ended by a limit (max steps, too many errors)
Only when no rule decides is an LLM attributor asked (if one is given); each label says which
decided it (`decided_by`: "rule" or "llm").
"""

from __future__ import annotations

from typing import Callable, Literal, Optional

from pydantic import BaseModel

from kit.envs.domain import Domain
from kit.replay import gold_trajectory
from kit.rollout.fidelity import claims_done, user_deviations
from kit.trajectory import Termination, Trajectory
from kit.verify import Verdict, verify
from kit.verify.actions import action_matches, check_actions

Label = Literal["task", "agent", "user", "undetermined"]


class Attribution(BaseModel):
    label: Label
    rule: str
    decided_by: Literal["rule", "llm", "none"] = "rule"
    turn: Optional[int] = None
    message: Optional[str] = None
    evidence: str = ""


def _first_divergence(domain: Domain, task, traj: Trajectory) -> Optional[Attribution]:
    gold = (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []
    for i, m in enumerate(traj.messages):
        if m.role != "assistant":
            continue
        for tc in m.tool_calls or []:
            if not domain.is_write_tool(tc.name, "assistant") or domain.tool(tc.name) is None:
                continue
            if not any(action_matches(a, tc) for a in gold):
                return Attribution(label="agent", rule="wrong_write", turn=i, message=m.content,
                                   evidence=f"{tc.name}({tc.arguments}) matches no gold action")
    return None


def _partial_gold_call(task, traj: Trajectory) -> Optional[Attribution]:
    """A gold action the action check counts as made although it was not: tau2's rule matches a call on
    the call's own arguments, so a call missing an argument matches. The agent's first such call, when no
    call made the action in full: answered with an error (`failed_call`, the state did not change) or
    made without some of the gold arguments (`missing_argument`, the state differs)."""
    gold = (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []
    results = {m.tool_call_id: m for m in traj.messages if m.role == "tool"}
    calls = [(i, tc) for i, m in enumerate(traj.messages) if m.role == "assistant" for tc in m.tool_calls or []]
    errored = lambda tc: tc.id in results and results[tc.id].error  # noqa: E731
    for a in gold:
        keys = set(a.arguments) if a.compare_args is None else set(a.compare_args)
        full = lambda tc: (tc.name == a.name and keys <= set(tc.arguments)  # noqa: E731
                           and all(tc.arguments[k] == a.arguments.get(k) for k in keys))
        if any(full(tc) and not errored(tc) for _, tc in calls):
            continue
        for i, tc in calls:
            if not action_matches(a, tc):
                continue
            if errored(tc):
                return Attribution(label="agent", rule="failed_call", turn=i, message=traj.messages[i].content,
                                   evidence=f"{tc.name}({tc.arguments}) was answered with an error: "
                                            f"{(results[tc.id].content or '')[:200]}")
            missing = sorted(keys - set(tc.arguments))
            if missing:
                return Attribution(label="agent", rule="missing_argument", turn=i, message=traj.messages[i].content,
                                   evidence=f"{tc.name}({tc.arguments}) left out {', '.join(missing)} "
                                            f"(gold: {a.arguments})")
    return None


def attribute(domain: Domain, task, traj: Trajectory,
              llm_attributor: Optional[Callable[[object, Trajectory], Attribution]] = None,
              criteria: Optional[Verdict] = None) -> Attribution:
    """Attribute a failed episode (call it only when the episode's reward is 0). `criteria`: the
    episode's kit.verify verdict where the caller has it (the episode is not verified again)."""
    gold_v = verify(domain, task, gold_trajectory(domain, task))
    if gold_v.reward != 1.0:
        return Attribution(label="task", rule="gold_unreachable",
                           evidence=f"gold replay scores {gold_v.reward} ({gold_v.breakdown}); {gold_v.error or ''}".strip())
    env = domain.fork(task)
    for a in (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []:
        obs = env.execute(a.name, dict(a.arguments), a.requestor)
        if obs.error:
            return Attribution(label="task", rule="gold_action_error", evidence=f"{a.name}: {obs.content[:200]}")
    v = criteria if criteria is not None else verify(domain, task, traj)
    agent_div = _first_divergence(domain, task, traj)
    devs = user_deviations(task, traj, goal_reached=v.reward == 1.0)
    first_dev = min(devs, key=lambda d: d.turn) if devs else None
    if first_dev is not None and (agent_div is None or first_dev.turn < (agent_div.turn or 0)):
        return Attribution(label="user", rule=first_dev.kind, turn=first_dev.turn,
                           message=traj.messages[first_dev.turn].content, evidence=first_dev.evidence)
    if agent_div is not None:
        return agent_div
    if traj.termination_reason in (Termination.MAX_STEPS, Termination.TOO_MANY_ERRORS):
        return Attribution(label="agent", rule="ended_early", evidence=f"terminated by {traj.termination_reason}")
    crit = task.evaluation_criteria
    missing = [c for c in check_actions((crit.actions if crit else None) or [], traj.messages) if not c["met"]]
    if missing:
        a = missing[0]["action"]
        claim = next((i for i, m in enumerate(traj.messages) if m.role == "assistant" and claims_done(m.content)), None)
        said = f"; at message {claim} it told the user the request was done" if claim is not None else ""
        return Attribution(label="agent", rule="missing_action", turn=claim,
                           evidence=f"never called {a['name']}({a['arguments']}){said}")
    failed = _partial_gold_call(task, traj)
    if failed is not None:
        return failed
    if v.communicate and not all(c["met"] for c in v.communicate):
        info = next(c["info"] for c in v.communicate if not c["met"])
        return Attribution(label="agent", rule="missing_info", evidence=f"never said {info!r}")
    if llm_attributor is not None:
        label = llm_attributor(task, traj)
        label.decided_by = "llm"
        return label
    return Attribution(label="undetermined", rule="no_rule_fired", decided_by="none",
                       evidence=f"reward {v.reward}, breakdown {v.breakdown}")
