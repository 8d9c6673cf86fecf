"""Gold trajectories: a task's gold actions played through a fork, as a dialogue.

`trajectory_from_actions` is the one place that turns a list of tool calls into a
well-formed trajectory (tool results produced by really executing the calls), so gold
replays and the near-miss mutants of kit/mutate.py are consistent by construction.
"""

from __future__ import annotations

from typing import Optional

from kit.envs.domain import Domain
from kit.trajectory import Message, Termination, ToolCall, Trajectory, messages_from_tau2


def trajectory_from_actions(
    domain: Domain,
    task,
    actions: list[ToolCall],
    final_text: Optional[str] = None,
    termination_reason: str = "agent_stop",
    opening: Optional[str] = None,
    closing: Optional[str] = None,
    exchange: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
) -> Trajectory:
    """Opening user turn, (agent question, user answer) turns of `exchange`, one message per call
    with its real result (a user's device call between the agent's request for it and the user's
    report of what the phone showed, kit/rollout/domain_phrases.py), an optional final text and an
    optional closing user turn. Without a
    message history the dialogue starts as a rollout does: the agent's greeting, then the user's
    `opening` (default: a request with no facts in it)."""
    from kit.rollout.domain_phrases import device_ask, device_report
    from kit.rollout.phrasing import _Pick
    from kit.rollout.prompts import FIRST_AGENT_MESSAGE  # kit.rollout imports this module

    env = domain.fork(task)
    history = []
    if task.initial_state is not None and task.initial_state.message_history:
        history = messages_from_tau2(task.initial_state.message_history)
    msgs: list[Message] = list(history)
    if not history:
        msgs.append(Message(role="assistant", content=FIRST_AGENT_MESSAGE))
        msgs.append(Message(role="user", content=opening or "Hi, I need some help."))
    elif opening and history[-1].role != "user":
        msgs.append(Message(role="user", content=opening))
    for question, answer in exchange:
        msgs += [Message(role="assistant", content=question), Message(role="user", content=answer)]
    pick = _Pick(task.id, "device")
    for i, call in enumerate(actions):
        call = call.model_copy(update={"id": call.id or f"call_{i}"})
        if call.requestor == "user":  # a device step (telecom): the agent asks for it in words
            msgs.append(Message(role="assistant", content=device_ask(call.name, dict(call.arguments), pick)))
        obs = env.execute(call.name, dict(call.arguments), call.requestor)
        msgs.append(Message(role=call.requestor, tool_calls=[call]))
        msgs.append(Message(role="tool", content=obs.content, tool_call_id=call.id,
                            requestor=call.requestor, error=obs.error))
        if call.requestor == "user":  # ... and the customer says what the phone showed
            msgs.append(Message(role="user", content=device_report(obs.content, not domain.is_write_tool(call.name, "user"))))
    if final_text is not None:
        msgs.append(Message(role="assistant", content=final_text))
    if closing is not None:
        msgs.append(Message(role="user", content=closing))
    return Trajectory(task_id=task.id, domain=domain.name, messages=msgs,
                      termination_reason=termination_reason, meta={"source": "replay"})


DEVICE_DONE_LINES = ("All set: your phone should work normally again. Is there anything else?",
                     "That has been taken care of: your phone is working normally again. Anything else?",
                     "You're all set, the problem on your phone is fixed. Anything else today?")


def gold_actions(task) -> list[ToolCall]:
    crit = task.evaluation_criteria
    return [
        ToolCall(id=a.action_id or f"gold_{i}", name=a.name, arguments=dict(a.arguments), requestor=a.requestor)
        for i, a in enumerate((crit.actions if crit else None) or [])
    ]


def gold_final_text(task, domain: Optional[Domain] = None) -> str:
    """The agent's last message: every fact to communicate; for a request the policy forbids, the refusal
    with its reason (description.notes `refusal`); for a fix the user made on their phone, that it works
    again (DEVICE_DONE_LINES); else, given the domain, what the gold
    writes did in one of a few lines drawn from the task id (kit/rollout/phrasing.py: done_line);
    else "Your request has been handled. Is there anything else?"."""
    from kit.rollout.phrasing import DONE_LINES, _Pick, done_line

    from kit.tags import task_notes

    crit = task.evaluation_criteria
    infos = (crit.communicate_info if crit else None) or []
    if infos:
        return "Here is what you asked for: " + "; ".join(infos) + "."
    refusal = task_notes(task).get("refusal")
    if refusal:  # a request the policy forbids (the engine's `refuse` tasks): decline, with the rule's reason
        return f"I'm sorry, but I cannot do that: {refusal}."
    actions = (crit.actions if crit else None) or []
    if any(a.requestor == "user" for a in actions):  # a fix on the customer's phone (telecom's device tasks)
        return _Pick(task.id, "done")(DEVICE_DONE_LINES)
    writes = [(a.name, dict(a.arguments)) for a in actions
              if domain is not None and domain.is_write_tool(a.name, a.requestor)]
    return done_line(task.id, writes) if writes else DONE_LINES[0]


def gold_trajectory(domain: Domain, task) -> Trajectory:
    """A grounded gold dialogue: the user states the request, in its scenario's words (kit/rollout/request.py),
    answers the agent's question for a fact it gives only when asked, the agent runs the gold actions, says
    what it did and every fact to communicate, and the user ends it."""
    from kit.rollout.request import CLOSING, asked_exchange, scenario_opening

    opening = scenario_opening(domain, task, seed="gold")
    traj = trajectory_from_actions(domain, task, gold_actions(task), gold_final_text(task, domain),
                                   termination_reason=Termination.USER_STOP, opening=opening, closing=CLOSING,
                                   exchange=asked_exchange(domain, task, seed="gold"))
    traj.meta.update({"source": "gold", "stop_signal": "stop"})
    return traj
