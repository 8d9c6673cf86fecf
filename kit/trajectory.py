"""Messages and trajectories: the records every stage reads and writes (JSONL).

A `Trajectory` is one episode: messages (system, assistant, user, tool), tool calls with
who requested them, the termination reason, and free-form `meta` (token counts, timings,
parse errors). An episode a server failed (`infra_error`: an HTTP 5xx or a garbled answer for one
of its turns, after retries) is an infrastructure failure, not the agent's: whoever scores episodes
counts it and leaves it out (GRPO's groups, evaluation, the learning curve, the engine). It converts both ways to tau2's `SimulationRun` and message models, so
tau2's evaluator can score anything the kit produces, and the kit can score tau2's runs.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Iterator, Literal, Optional

from pydantic import BaseModel, Field

from kit import _tau2  # noqa: F401
from kit.files import BadLine, iter_jsonl  # noqa: F401  (kit.trajectory.BadLine stays importable)
from kit.llm.types import ToolCall  # the one ToolCall: backends parse it, trajectories store it
from kit.enums import TextEnum

from tau2.data_model import message as tm  # noqa: E402
from tau2.data_model.simulation import SimulationRun, TerminationReason  # noqa: E402

Role = Literal["system", "assistant", "user", "tool"]
Requestor = Literal["assistant", "user"]

# tau2's termination reasons; only AGENT_STOP and USER_STOP are eligible for a reward.
TERMINATION_REASONS = [r.value for r in TerminationReason]
# tau2's termination reasons as a kit TextEnum: members compare equal to their text and format as it
# (a trajectory's `termination_reason`; Termination.MAX_STEPS == "max_steps")
Termination = TextEnum("Termination", {r.name: r.value for r in TerminationReason})


class Message(BaseModel):
    """One message of an episode, as trajectories.jsonl stores it (a backend sees it rendered as a
    kit.llm ChatMessage dict, kit.rollout.views)."""

    role: Role
    content: Optional[str] = None
    tool_calls: Optional[list[ToolCall]] = None
    tool_call_id: Optional[str] = None  # tool messages: the call they answer
    requestor: Requestor = "assistant"  # tool messages: who called the tool
    error: bool = False  # tool messages: the call failed
    turn_idx: Optional[int] = None
    timestamp: Optional[str] = None
    meta: dict = Field(default_factory=dict)  # tokens, timings, parse errors, ...

    def has_text(self) -> bool:
        return self.content is not None and self.content.strip() != ""


class Trajectory(BaseModel):
    id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    task_id: str
    domain: Optional[str] = None
    messages: list[Message] = Field(default_factory=list)
    termination_reason: Termination = Termination.AGENT_STOP
    trial: Optional[int] = None
    seed: Optional[int] = None
    start_time: Optional[str] = None
    end_time: Optional[str] = None
    duration: float = 0.0
    meta: dict = Field(default_factory=dict)
    infra_error: Optional[str] = None  # why a server failed this episode (termination agent_error / user_error)

    @property
    def infra_failed(self) -> bool:
        """A server failed the episode: it says nothing about the agent and is never scored."""
        return self.infra_error is not None

    def tool_calls(self) -> list[ToolCall]:
        return [tc for m in self.messages if m.role in ("assistant", "user") for tc in (m.tool_calls or [])]

    # -- tau2 ---------------------------------------------------------------------------
    def tool_errors(self) -> int:
        """Failed tool calls: tool messages marked as errors."""
        return sum(1 for m in self.messages if m.role == "tool" and m.error)

    def to_tau2(self) -> SimulationRun:
        now = datetime.now().isoformat()
        return SimulationRun(
            id=self.id,
            task_id=self.task_id,
            start_time=self.start_time or now,
            end_time=self.end_time or now,
            duration=self.duration,
            termination_reason=TerminationReason(self.termination_reason),
            messages=messages_to_tau2(self.messages),
            trial=self.trial,
            seed=self.seed,
        )

    @classmethod
    def from_tau2(cls, sim: SimulationRun, domain: Optional[str] = None) -> "Trajectory":
        return cls(
            id=sim.id,
            task_id=sim.task_id,
            domain=domain,
            messages=messages_from_tau2(sim.messages),
            termination_reason=sim.termination_reason.value,
            trial=sim.trial,
            seed=sim.seed,
            start_time=sim.start_time,
            end_time=sim.end_time,
            duration=sim.duration,
        )


def messages_from_tau2(messages: list) -> list[Message]:
    out: list[Message] = []
    for m in messages:
        if isinstance(m, tm.MultiToolMessage):
            out.extend(messages_from_tau2(m.tool_messages))
        elif isinstance(m, tm.ToolMessage):
            out.append(
                Message(role="tool", content=m.content, tool_call_id=m.id, requestor=m.requestor,
                        error=m.error, turn_idx=m.turn_idx, timestamp=m.timestamp)
            )
        elif isinstance(m, (tm.AssistantMessage, tm.UserMessage)):
            calls = None
            if m.tool_calls is not None:
                calls = [ToolCall(id=c.id, name=c.name, arguments=c.arguments, requestor=c.requestor) for c in m.tool_calls]
            out.append(Message(role=m.role, content=m.content, tool_calls=calls, turn_idx=m.turn_idx, timestamp=m.timestamp))
        elif isinstance(m, tm.SystemMessage):
            out.append(Message(role="system", content=m.content, turn_idx=m.turn_idx, timestamp=m.timestamp))
        else:
            raise TypeError(f"unsupported tau2 message type {type(m).__name__}")
    return out


def messages_to_tau2(messages: list[Message]) -> list:
    out = []
    for m in messages:
        if m.role == "tool":
            # a call the kit refused keeps what tau2 answers on replay (kit/envs/episode.py)
            content = m.meta.get("tau2_content", m.content)
            out.append(tm.ToolMessage(id=m.tool_call_id or "", role="tool", content=content,
                                      requestor=m.requestor, error=m.error, turn_idx=m.turn_idx, timestamp=m.timestamp))
        elif m.role in ("assistant", "user"):
            cls = tm.AssistantMessage if m.role == "assistant" else tm.UserMessage
            calls = None
            if m.tool_calls is not None:
                calls = [tm.ToolCall(id=c.id, name=c.name, arguments=c.arguments, requestor=c.requestor) for c in m.tool_calls]
            out.append(cls(role=m.role, content=m.content, tool_calls=calls, turn_idx=m.turn_idx, timestamp=m.timestamp))
        else:
            out.append(tm.SystemMessage(role="system", content=m.content, turn_idx=m.turn_idx, timestamp=m.timestamp))
    return out




def read_simulations(path: str) -> Iterator[SimulationRun | BadLine]:
    """Each line of a JSONL file of tau2 SimulationRuns; a bad line yields a BadLine."""
    for lineno, data in iter_jsonl(path):
        if isinstance(data, BadLine):
            yield data
            continue
        if not isinstance(data, dict) or "task_id" not in data:
            yield BadLine(path, lineno, "not a SimulationRun object (no 'task_id')")
            continue
        try:
            yield SimulationRun.model_validate(data)
        except Exception as e:  # pydantic ValidationError: name the first bad field
            first = getattr(e, "errors", lambda: [{}])()[:1]
            where = ".".join(str(p) for p in first[0].get("loc", ())) if first else ""
            msg = first[0].get("msg", str(e)) if first else str(e)
            yield BadLine(path, lineno, f"invalid SimulationRun field '{where}': {msg}")
