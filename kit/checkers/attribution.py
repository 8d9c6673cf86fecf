"""Failure attribution: who made a failed episode fail — the task, the agent or the user?

Executable rules first, in this order; the first that fires decides:
  task   gold_unreachable      the task's own gold actions do not earn reward 1
         gold_action_error     a gold action errors when executed from the initial state
  user   *before* the agent's first divergent action (the first by turn decides; on one turn,
         in this order):
         ungiven_tool          the user called a tool it was not given (not one of the domain's
                               user tools)
         unsupported_fact, role_flip, unrequested_tool, premature_stop
                               kit/rollout/fidelity.py's deviations: an invented fact, talking
                               like the agent, an unasked tool call, a stop before the goal (not
                               one right after the agent said it was done)
         early_end             the user ended the call (###STOP###, ###TRANSFER###,
                               ###OUT-OF-SCOPE###) before the agent made any tool call, on a
                               task whose gold needs the agent's actions, and the agent had not
                               said it was done
         request_not_stated    a value the gold writes need that the user's scenario gives never
                               came up in the dialogue (fidelity.unsaid_values), though the agent
                               asked (a question after the user's opening, answered), and the user
                               ended it or it ran out of messages; not after the agent's stop nor
                               after the agent said it was done: the agent never had the request.
                               Its turn is the dialogue's last, so a write the agent made without
                               the request (a guess) is the agent's; weighed only when no other
                               user rule fired (the more telling one is named).
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
from kit.rollout.fidelity import Deviation, claims_done, unsaid_values, user_deviations
from kit.rollout.prompts import USER_STOP_SIGNALS
from kit.trajectory import Termination, Trajectory
from kit.verify import Verdict, verify
from kit.verify.actions import action_matches, check_actions

Label = Literal["task", "agent", "user", "undetermined"]

# every rule that puts a failure on the user simulator (GRPO counts each: kit.metrics.user_fault_key)
USER_RULES = ("ungiven_tool", "unsupported_fact", "role_flip", "unrequested_tool", "premature_stop", "early_end",
              "request_not_stated")


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


def _user_ended(traj: Trajectory) -> Optional[int]:
    """The turn of the user message whose stop token ended the episode; None when the user did not end it
    (the agent's stop, the agent's transfer tool, a limit)."""
    if traj.termination_reason != Termination.USER_STOP:
        return None
    last = next((i for i in range(len(traj.messages) - 1, -1, -1) if traj.messages[i].role != "system"), None)
    if last is None or traj.messages[last].role != "user":
        return None
    text = traj.messages[last].content or ""
    return last if any(token in text for token in USER_STOP_SIGNALS) else None


def _agent_claimed_done(traj: Trajectory, before: Optional[int] = None) -> bool:
    return any(m.role == "assistant" and claims_done(m.content) for m in traj.messages[:before])


def user_rule_deviations(domain: Domain, task, traj: Trajectory) -> list[Deviation]:
    """The user rules the deviations of kit/rollout/fidelity.py leave out (module docstring): ungiven_tool,
    early_end, request_not_stated. `attribute` weighs them with the deviations against the agent's first
    divergent action."""
    out: list[Deviation] = []
    given = set(domain.tool_names("user"))
    for i, m in enumerate(traj.messages):
        if m.role == "user":
            out += [Deviation(i, "ungiven_tool", f"{tc.name}: not one of the user's tools "
                                                  f"({', '.join(sorted(given)) or 'it has none'})")
                    for tc in m.tool_calls or [] if tc.name not in given]
    gold = (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []
    ended = _user_ended(traj)
    if ended is not None and any(a.requestor == "assistant" for a in gold):
        acted = any(m.role == "assistant" and m.tool_calls for m in traj.messages[:ended])
        if not acted and not _agent_claimed_done(traj, ended):
            signal = traj.meta.get("stop_signal") or "stop"
            out.append(Deviation(ended, "early_end", f"the user ended the call ({signal}) before the agent made "
                                                     "any tool call"))
    unsaid = unsaid_values(task, traj, domain=domain)
    if unsaid and (ended is not None or traj.termination_reason == Termination.MAX_STEPS) \
            and not _agent_claimed_done(traj):
        users = [i for i, m in enumerate(traj.messages) if m.role == "user"]
        asked = next((i for i, m in enumerate(traj.messages) if users and users[0] < i < users[-1]
                      and m.role == "assistant" and "?" in (m.content or "")), None)
        if asked is not None:
            out.append(Deviation(len(traj.messages) - 1, "request_not_stated",
                                 f"never came up: {', '.join(unsaid)} (the user's scenario gives them, the gold writes "
                                 f"need them; not in its opening, nor after the agent asked at message {asked})"))
    return out


def task_fault(domain: Domain, task) -> Optional[Attribution]:
    """The task rules alone (a function of the task, not of an episode): the gold replay does not earn reward
    1, or a gold action errors from the initial state. None: the task is sound."""
    gold_v = verify(domain, task, gold_trajectory(domain, task))
    if gold_v.reward != 1.0:
        return Attribution(label="task", rule="gold_unreachable",
                           evidence=f"gold replay scores {gold_v.reward} ({gold_v.breakdown}); {gold_v.error or ''}".strip())
    env = domain.fork(task)
    for a in (task.evaluation_criteria.actions if task.evaluation_criteria else None) or []:
        obs = env.execute(a.name, dict(a.arguments), a.requestor)
        if obs.error:
            return Attribution(label="task", rule="gold_action_error", evidence=f"{a.name}: {obs.content[:200]}")
    return None


def attribute(domain: Domain, task, traj: Trajectory,
              llm_attributor: Optional[Callable[[object, Trajectory], Attribution]] = None,
              criteria: Optional[Verdict] = None, task_sound: bool = False) -> Attribution:
    """Attribute a failed episode (call it only when the episode's reward is 0). `criteria`: the
    episode's kit.verify verdict where the caller has it (the episode is not verified again).
    `task_sound`: the caller already found `task_fault(domain, task)` None (GRPO checks a task once, not
    once per episode)."""
    fault = None if task_sound else task_fault(domain, task)
    if fault is not None:
        return fault
    v = criteria if criteria is not None else verify(domain, task, traj)
    agent_div = _first_divergence(domain, task, traj)
    devs = user_deviations(task, traj, goal_reached=v.reward == 1.0)
    # one turn's rules in the module docstring's order: min() keeps the first of equal turns
    extra = user_rule_deviations(domain, task, traj)
    devs = [d for d in extra if d.kind == "ungiven_tool"] + devs + [d for d in extra if d.kind == "early_end"]
    devs = devs or [d for d in extra if d.kind == "request_not_stated"]  # only when no other user rule fired
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
