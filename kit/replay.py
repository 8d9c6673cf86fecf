"""Gold trajectories: a task's gold actions played through a fork, as a dialogue.

`trajectory_from_actions` is the one place that turns a list of tool calls into a
well-formed trajectory (tool results produced by really executing the calls), so gold
replays and the near-miss mutants of kit/mutate.py are consistent by construction.
"""

from __future__ import annotations

from typing import Optional

from kit.envs.domain import Domain
from kit.trajectory import Message, ToolCall, Trajectory, messages_from_tau2


def trajectory_from_actions(
    domain: Domain,
    task,
    actions: list[ToolCall],
    final_text: Optional[str] = None,
    termination_reason: str = "agent_stop",
    opening: Optional[str] = None,
    closing: Optional[str] = None,
) -> Trajectory:
    """Opening user turn, one message per call with its real result, an optional final text and
    an optional closing user turn. Without a message history the dialogue starts as a rollout does:
    the agent's greeting, then the user's `opening` (default: a request with no facts in it)."""
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
    for i, call in enumerate(actions):
        call = call.model_copy(update={"id": call.id or f"call_{i}"})
        obs = env.execute(call.name, dict(call.arguments), call.requestor)
        msgs.append(Message(role=call.requestor, tool_calls=[call]))
        msgs.append(Message(role="tool", content=obs.content, tool_call_id=call.id,
                            requestor=call.requestor, error=obs.error))
    if final_text is not None:
        msgs.append(Message(role="assistant", content=final_text))
    if closing is not None:
        msgs.append(Message(role="user", content=closing))
    return Trajectory(task_id=task.id, domain=domain.name, messages=msgs,
                      termination_reason=termination_reason, meta={"source": "replay"})


def gold_actions(task) -> list[ToolCall]:
    crit = task.evaluation_criteria
    return [
        ToolCall(id=a.action_id or f"gold_{i}", name=a.name, arguments=dict(a.arguments), requestor=a.requestor)
        for i, a in enumerate((crit.actions if crit else None) or [])
    ]


def gold_final_text(task) -> str:
    infos = (task.evaluation_criteria.communicate_info if task.evaluation_criteria else None) or []
    if not infos:
        return "Your request has been handled. Is there anything else?"
    return "Here is what you asked for: " + "; ".join(infos) + "."


def gold_trajectory(domain: Domain, task) -> Trajectory:
    """A grounded gold dialogue: the user states the request, in its scenario's words (kit/rollout/request.py), the agent runs
    the gold actions, says what it did and every fact to communicate, and the user ends it."""
    from kit.rollout.request import CLOSING, scenario_opening

    opening = scenario_opening(domain, task, seed="gold")
    traj = trajectory_from_actions(domain, task, gold_actions(task), gold_final_text(task),
                                   termination_reason="user_stop", opening=opening, closing=CLOSING)
    traj.meta.update({"source": "gold", "stop_signal": "stop"})
    return traj
