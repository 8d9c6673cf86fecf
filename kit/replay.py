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
) -> Trajectory:
    """Opening user turn, one message per call with its real result, an optional final text."""
    env = domain.fork(task)
    history = []
    if task.initial_state is not None and task.initial_state.message_history:
        history = messages_from_tau2(task.initial_state.message_history)
    msgs: list[Message] = list(history)
    if not history:
        msgs.append(Message(role="user", content="Hi, I need some help."))
    for i, call in enumerate(actions):
        call = call.model_copy(update={"id": call.id or f"call_{i}"})
        obs = env.execute(call.name, dict(call.arguments), call.requestor)
        msgs.append(Message(role=call.requestor, tool_calls=[call]))
        msgs.append(Message(role="tool", content=obs.content, tool_call_id=call.id,
                            requestor=call.requestor, error=obs.error))
    if final_text is not None:
        msgs.append(Message(role="assistant", content=final_text))
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
    """The task's gold actions, then a final message stating every fact to communicate."""
    traj = trajectory_from_actions(domain, task, gold_actions(task), gold_final_text(task))
    traj.meta["source"] = "gold"
    return traj
