"""User-simulator fidelity: did the simulated user stay inside its scenario?

Per episode, each user turn is checked by code (no LLM):
  unsupported_fact   the user states an id, number, email or code that is neither in its
                     scenario nor said earlier in the dialogue (invented facts)
  unrequested_tool   the user calls a tool its task never needs and the agent did not
                     ask for (domains with user tools, e.g. telecom)
  premature_stop     the user ends the dialogue (###STOP###) before the task's goal state
                     is reached, although the agent had not said the request was done (a
                     user who stops after "Your request has been handled" believed the
                     agent: that failure is the agent's, see `claims_done`)
  role_flip          the user talks like the agent ("how can I help you", "as an AI")
The deviation rate (episodes with at least one flag) is what the paper's "fine-tune the
user model first" argument is about: a deviating user zeroes rewards the agent earned.

Two more per-episode measures (kit.eval reports their rates):
  request_stated     the first user message with text names every value the gold write actions
                     need that the user's scenario gives it (None: no such value)
                     (`unsaid_values`: those of them the whole dialogue never brought up, what
                     failure attribution's request_not_stated rule reads)
  proper_end         the episode ended by the user's or the agent's stop, not by a step or
                     error limit
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kit.trajectory import Termination, Trajectory

# ids with digits (4WQ150, #W2378156, user_1), emails, long numbers, dollar amounts
_FACT = re.compile(r"[\w.+-]+@[\w-]+\.[\w.]+|#?\b(?=[A-Za-z_]*\d)[A-Za-z0-9_]{4,}\b|\$?\d+(?:\.\d+)?")
_ROLE_FLIP = re.compile(r"how (can|may) i (help|assist) you|as an ai|i am an ai|i'm an ai assistant", re.I)
_SMALL_NUMBERS = {str(i) for i in range(0, 11)}


# the agent reports the request as carried out ("Your request has been handled", "I've created the
# task", "Task t_1 is now marked as completed", "You're all set"); a question about what to do is not
_DONE = re.compile(
    r"\b(has|have) been (handled|done|completed|created|updated|processed|changed|cancell?ed|booked|"
    r"marked|set|taken care of)\b|\bi(?:'ve| have) (handled|done|completed|created|updated|processed|changed|"
    r"cancell?ed|booked|marked|set|added|made)\b|\b(is|are) now (marked|set|updated|created|cancell?ed|booked)\b|"
    r"\ball set\b|\b(done|completed|created|updated|processed|changed|cancell?ed|booked|marked|added|handled) "
    r"successfully\b|\bsuccessfully (handled|created|updated|completed|"
    r"processed|changed|cancell?ed|booked|marked|added)\b", re.I)


def claims_done(text: str | None) -> bool:
    """Does this agent message tell the user their request has been carried out?"""
    return bool(text) and _DONE.search(text) is not None


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
    if (traj.termination_reason == Termination.USER_STOP and traj.meta.get("stop_signal") in (None, "stop")
            and goal_reached is False):
        last_user = max((i for i, m in enumerate(traj.messages) if m.role == "user"), default=0)
        told = next((m.content for m in reversed(traj.messages[:last_user]) if m.role == "assistant" and m.has_text()),
                    None)
        if not claims_done(told):  # stopping after the agent said it was done is what a user does
            out.append(Deviation(last_user, "premature_stop", "user ended the dialogue before the goal state"))
    return out


# ----- per-episode protocol measures (pure functions; kit.eval.runner adds them as columns) -------

_STOP_TERMINATIONS = (Termination.USER_STOP, Termination.AGENT_STOP)


def _norm_value(s: str) -> str:
    """Lower case, quotes and commas dropped, whitespace collapsed (how a value is matched in text)."""
    s = str(s).lower()
    for ch in "\"'`‘’“”,":
        s = s.replace(ch, "")
    return " ".join(s.split())


def _leaf_values(value) -> list:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaf_values(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _leaf_values(v)]
    return [value]


def required_user_values(task, domain=None, is_write=None) -> list[str]:
    """The argument values of the task's gold write actions that its user scenario states.

    Write tools: `is_write(name, requestor)` if given, else `domain.is_write_tool`, else every
    gold action. Booleans and values shorter than 2 characters are skipped; a value the user
    cannot know (not in str(task.user_scenario), e.g. an id the agent's own call returns) is
    not required. Values are normalized (`_norm_value`), deduplicated, in gold order."""
    if is_write is None and domain is not None:
        is_write = domain.is_write_tool
    crit = task.evaluation_criteria
    scenario = _norm_value(str(task.user_scenario) if task.user_scenario is not None else "")
    out: list[str] = []
    for a in ((crit.actions if crit else None) or []):
        if is_write is not None and not is_write(a.name, a.requestor or "assistant"):
            continue
        for v in _leaf_values(a.arguments or {}):
            if isinstance(v, bool) or v is None or not isinstance(v, (str, int, float)):
                continue
            nv = _norm_value(v)
            if len(nv) < 2 or nv not in scenario or nv in out:
                continue
            out.append(nv)
    return out


def request_stated(task, traj: Trajectory, domain=None, is_write=None) -> bool | None:
    """Did the first user message with text name every value the gold write actions need that
    the user is supposed to know (`required_user_values`)? None when there is no such value
    (e.g. a task whose gold is a transfer, or whose gold actions are all reads)."""
    needed = required_user_values(task, domain=domain, is_write=is_write)
    if not needed:
        return None
    first = next((m for m in traj.messages if m.role == "user" and m.has_text()), None)
    if first is None:
        return False
    text = _norm_value(first.content)
    return all(v in text for v in needed)


def unsaid_values(task, traj: Trajectory, domain=None, is_write=None) -> list[str]:
    """The `required_user_values` that never came up in the dialogue: in no user message, no tool
    result, no agent message and no tool call's arguments (a value the agent wrote or looked up it
    had, whoever said it). Empty when every one came up, or there is none."""
    needed = required_user_values(task, domain=domain, is_write=is_write)
    if not needed:
        return []
    parts = []
    for m in traj.messages:
        if m.role == "system":
            continue
        parts.append(m.content or "")
        parts += [str(v) for tc in m.tool_calls or [] for v in _leaf_values(tc.arguments or {})]
    text = _norm_value(" ".join(parts))
    return [v for v in needed if v not in text]


def proper_end(traj: Trajectory) -> bool:
    """The episode ended by the user's or the agent's stop, not by max_steps, too many errors
    or an error."""
    return traj.termination_reason in _STOP_TERMINATIONS
