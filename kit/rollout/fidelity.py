"""User-simulator fidelity: did the simulated user stay inside its scenario?

Per episode, each user turn is checked by code (no LLM):
  unsupported_fact   the user states an id, number, email or code that is neither in its
                     scenario nor said earlier in the dialogue (invented facts)
  unrequested_tool   the user calls a tool its task never needs and the agent did not
                     ask for (domains with user tools, e.g. telecom)
  premature_stop     the user ends the dialogue (###STOP###) before the task's goal state
                     is reached
  role_flip          the user talks like the agent ("how can I help you", "as an AI")
The deviation rate (episodes with at least one flag) is what the paper's "fine-tune the
user model first" argument is about: a deviating user zeroes rewards the agent earned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kit.trajectory import Trajectory

# ids with digits (4WQ150, #W2378156, user_1), emails, long numbers, dollar amounts
_FACT = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+|#?\b(?=[A-Za-z_]*\d)[A-Za-z0-9_]{4,}\b|\$?\d+(?:\.\d+)?")
_ROLE_FLIP = re.compile(r"how (can|may) i (help|assist) you|as an ai|i am an ai|i'm an ai assistant", re.I)
_SMALL_NUMBERS = {str(i) for i in range(0, 11)}


@dataclass
class Deviation:
    turn: int
    kind: str
    evidence: str


def _norm(s: str) -> str:
    return s.lower().replace(",", "")


def user_deviations(task, traj: Trajectory, goal_reached: bool | None = None) -> list[Deviation]:
    scenario = _norm(str(task.user_scenario) if task.user_scenario is not None else "")
    crit = task.evaluation_criteria
    needed_user_tools = {a.name for a in ((crit.actions if crit else None) or []) if a.requestor == "user"}
    said = scenario
    out: list[Deviation] = []
    last_agent_text = ""
    for i, m in enumerate(traj.messages):
        if m.role == "assistant" and m.content:
            last_agent_text = m.content.lower()
            said += " " + _norm(m.content)
        elif m.role == "tool":
            said += " " + _norm(m.content or "")
        elif m.role == "user":
            text = m.content or ""
            for fact in _FACT.findall(text):
                f = _norm(fact).lstrip("#$")
                if f in _SMALL_NUMBERS or f in said:
                    continue
                out.append(Deviation(i, "unsupported_fact", fact))
            if _ROLE_FLIP.search(text):
                out.append(Deviation(i, "role_flip", text[:120]))
            for tc in m.tool_calls or []:
                asked = tc.name.replace("_", " ") in last_agent_text or tc.name in last_agent_text
                if tc.name not in needed_user_tools and not asked:
                    out.append(Deviation(i, "unrequested_tool", tc.name))
            said += " " + _norm(text)
    if (traj.termination_reason == "user_stop" and traj.meta.get("stop_signal") in (None, "stop")
            and goal_reached is False):
        last_user = max((i for i, m in enumerate(traj.messages) if m.role == "user"), default=0)
        out.append(Deviation(last_user, "premature_stop", "user ended the dialogue before the goal state"))
    return out
