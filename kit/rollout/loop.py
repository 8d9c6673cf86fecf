"""Episodes: assistant ⇄ user simulator ⇄ environment, many at once.

    trajs = run_episodes(domain, [task] * 8, agent=make_backend("embedded"),
                         user=make_backend("embedded"), config=RolloutConfig(seed=0))

All live episodes advance together: every episode waiting for the agent goes into one
batched `generate_batch` call, then every episode waiting for the user into another, so
the G rollouts of a group share the model's forward passes (and an HTTP backend has them
all in flight). The environment answers tool calls at once.

Termination, as tau2 records it:
  agent_stop       the agent's text contains ###STOP###
  user_stop        the user writes ###STOP###, ###TRANSFER### or ###OUT-OF-SCOPE###
                   (meta.stop_signal says which), or the agent transferred the user with
                   transfer_to_human_agents (stop_signal "transfer": what tau2's user
                   simulator is told to answer, decided here by code)
  max_steps        `max_messages` messages were exchanged
  too_many_errors  `max_errors` failed or unparseable tool calls
  agent_error      the agent's server failed this episode's turn (HTTP 5xx or a garbled answer, after
  user_error       the backend's retries) / the user simulator's: an infrastructure failure, recorded
                   as `infra_error` on the trajectory; scorers leave it out. The other episodes go on.
A server that does not answer at all (connection refused, timeout: kit.llm.openai_backend's
`unreachable`) stops the whole call with an EndpointError naming that server: every episode waits on it.
An unparseable tool call is an error the agent is shown (a feedback message it sees next
turn), counted, and the episode goes on.

Each generated message's meta holds prompt_tokens, completion_tokens, latency_s, finish_reason
and, where the backend reports them (caps.token_ids, caps.logprobs), the sampled `token_ids` and
their `logprobs`: GRPO builds its training rows from those ids (kit.train.sequences).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Callable, Optional

from tqdm import tqdm

from kit.envs.domain import Domain
from kit.envs.episode import EpisodeEnv
from kit.llm.openai_backend import BatchEndpointError, EndpointError
from kit.llm.types import Backend, Completion, SamplingParams
from kit.rollout.prompts import FIRST_AGENT_MESSAGE, STOP, USER_STOP_SIGNALS, agent_system_prompt, user_system_prompt
from kit.rollout.views import agent_view, user_view
from kit.trajectory import Message, Termination, ToolCall, Trajectory, messages_from_tau2

TRANSFER_TOOL = "transfer_to_human_agents"
# who failed, when a server fails an episode's turn: tau2's termination reason and the server's name in words
SERVER_FAILED = {"assistant": (Termination.AGENT_ERROR, "the agent's server"),
                 "user": (Termination.USER_ERROR, "the user simulator's server")}


STEP_SLACK = 4
"""Spare messages a step budget should leave beyond a perfect dialogue (see step_budget_warning)."""


def min_episode_steps(task) -> int:
    """Steps (messages after the agent's greeting) a perfect dialogue takes to end with a stop, the
    only endings that can score: the user's request, the agent's question and the user's answer
    for facts the user gives only when asked (kit/rollout/request.py: asked_exchange), a call and its
    result per gold action of the agent, four per device step of the user (the agent's request, the user's
    call, its result, the user's report), the agent's answer and the user's stop. (A task without gold
    actions: 3.)"""
    from kit.tags import task_notes

    criteria = getattr(task, "evaluation_criteria", None)
    every = getattr(criteria, "actions", None) or []
    actions = [a for a in every if getattr(a, "requestor", "assistant") == "assistant"]
    return 3 + 2 * len(actions) + 4 * (len(every) - len(actions)) + 2 * bool(task_notes(task).get("ask_for"))


def step_budget_warning(tasks: list, max_messages: int, what: str = "max_messages") -> Optional[str]:
    """A loud sentence when `max_messages` leaves fewer than STEP_SLACK spare messages beyond a perfect
    dialogue for some tasks: their episodes end at max_steps, which scores 0 (tau2's rule), so a
    reward of 0 would say nothing about the agent. None when the budget is fine."""
    need = [min_episode_steps(t) for t in tasks]
    short = [n for n in need if max_messages < n + STEP_SLACK]
    if not short:
        return None
    impossible = sum(n > max_messages for n in need)
    span = f"{min(short)}" if min(short) == max(short) else f"{min(short)}-{max(short)}"
    return (f"{what}={max_messages} is too tight for {len(short)} of {len(need)} tasks: a perfect dialogue needs "
            f"{span} messages and {STEP_SLACK} spare ones are advised"
            + (f"; {impossible} cannot end before max_steps at all" if impossible else "")
            + ". Episodes cut by max_steps score 0: raise it (tau2 uses 100).")


def token_caps_cut(domain, tasks: list, max_new_tokens: int, user_max_new_tokens: int, agent_tokenizer,
                   user_tokenizer=None) -> dict:
    """What per-turn token caps cut in `tasks` before any model speaks: the agent's gold tool calls longer than
    `max_new_tokens` tokens as the agent must write them (kit.llm.toolcalls.render_tool_call, in
    `agent_tokenizer`), and the customer's opening (the gold dialogue's first user turn,
    kit.rollout.request.scenario_opening, in `user_tokenizer`, default the agent's) longer than
    `user_max_new_tokens`. A cut gold call cannot be made at all: such a task scores 0 whatever the agent
    knows. Returns the counts ("calls", "calls_cut", "longest_call", "tasks_cut", "openings", "openings_cut",
    "longest_opening") and "warning" (a sentence, or None)."""
    from kit.llm.toolcalls import render_tool_call
    from kit.rollout.request import scenario_opening

    def n_tokens(tok, text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    user_tokenizer = user_tokenizer or agent_tokenizer
    call_lens, tasks_cut, opening_lens = [], 0, []
    for t in tasks:
        acts = [a for a in (t.evaluation_criteria.actions if t.evaluation_criteria else None) or []
                if a.requestor == "assistant"]
        lens = [n_tokens(agent_tokenizer, render_tool_call(a.name, dict(a.arguments))) for a in acts]
        call_lens += lens
        tasks_cut += any(n > max_new_tokens for n in lens)
        opening_lens.append(n_tokens(user_tokenizer, scenario_opening(domain, t, seed=t.id)))
    out = {"calls": len(call_lens), "calls_cut": sum(n > max_new_tokens for n in call_lens),
           "longest_call": max(call_lens, default=0), "tasks_cut": tasks_cut, "openings": len(opening_lens),
           "openings_cut": sum(n > user_max_new_tokens for n in opening_lens),
           "longest_opening": max(opening_lens, default=0)}
    parts = []
    if out["calls_cut"]:
        parts.append(f"max_new_tokens={max_new_tokens} cuts {out['calls_cut']} of {out['calls']} gold tool calls "
                     f"({tasks_cut} of {len(tasks)} tasks; the longest needs {out['longest_call']} tokens): those "
                     "tasks score 0 whatever the agent knows")
    if out["openings_cut"]:
        parts.append(f"user_max_new_tokens={user_max_new_tokens} cuts the customer's opening request in "
                     f"{out['openings_cut']} of {out['openings']} tasks (the longest needs {out['longest_opening']} "
                     "tokens)")
    out["warning"] = "; ".join(parts) + ". Raise the caps." if parts else None
    return out


@dataclass
class RolloutConfig:
    """How episodes run. Field defaults suit the embedded CPU model."""

    max_messages: int = 30
    """Messages (agent, user and tool) before the episode ends with termination max_steps (tau2's
    max_steps: 100)."""
    max_errors: int = 10
    """Failed or unparseable tool calls before too_many_errors (tau2: 10)."""
    agent_params: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=1.0, max_new_tokens=192))
    """Sampling for the assistant (n is always 1 per episode)."""
    user_params: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=1.0, max_new_tokens=96))
    """Sampling for the user simulator."""
    seed: Optional[int] = None
    """Base seed; each batched call uses seed + call index."""
    templates_dir: Optional[str] = None
    """Another set of prompt templates (kit/rollout/templates by default)."""


@dataclass
class _Episode:
    idx: int
    task: object
    env: EpisodeEnv
    messages: list[Message]
    agent_system: str
    user_system: str
    next: Optional[str] = "user"  # "assistant" | "user" | None (done)
    steps: int = 0
    errors: int = 0
    termination: Optional[Termination] = None
    stop_signal: Optional[str] = None
    infra_error: Optional[str] = None
    start: float = field(default_factory=time.perf_counter)
    started_at: str = field(default_factory=lambda: datetime.now().isoformat())


def _start(domain: Domain, idx: int, task, cfg: RolloutConfig) -> _Episode:
    from pathlib import Path

    tdir = Path(cfg.templates_dir) if cfg.templates_dir else None
    env = domain.fork(task)
    history = []
    if task.initial_state is not None and task.initial_state.message_history:
        history = messages_from_tau2(task.initial_state.message_history)
    ep = _Episode(idx, task, env, list(history),
                  agent_system_prompt(domain.policy, tdir),
                  user_system_prompt(task, bool(domain.tool_names("user")), tdir))
    if not history:
        ep.messages.append(Message(role="assistant", content=FIRST_AGENT_MESSAGE, turn_idx=0))
        ep.next = "user"
    else:
        last = history[-1]
        ep.next = "assistant" if last.role == "user" or (last.role == "tool" and last.requestor == "assistant") else "user"
    return ep


def _tool_messages(ep: _Episode, domain: Domain, calls: list, requestor: str, turn: int) -> list[Message]:
    out = []
    for k, c in enumerate(calls):
        call_id = c.id or f"call_{ep.idx}_{turn}_{k}"
        obs = ep.env.call_tool(c.name, c.arguments, requestor,
                               scratch=lambda: domain.fork(ep.task, history=ep.messages))
        tc = ToolCall(id=call_id, name=c.name, arguments=obs.recorded_arguments or {}, requestor=requestor)
        meta = {"error_kind": obs.error_kind} if obs.error else {}
        if obs.tau2_content is not None:
            meta["tau2_content"] = obs.tau2_content
        if obs.refused_by_kit is not None:
            meta["refused_by_kit"] = obs.refused_by_kit
        out.append((tc, Message(role="tool", content=obs.content, tool_call_id=call_id, requestor=requestor,
                                error=obs.error, turn_idx=turn, meta=meta)))
        if obs.error:
            ep.errors += 1
    return out


def _apply(ep: _Episode, domain: Domain, role: str, c: Completion, latency: float, turn: int) -> None:
    meta = {"prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens,
            "latency_s": round(latency, 4), "finish_reason": c.finish_reason}
    if c.token_ids is not None:  # what the model sampled: training rows are built from these
        meta["token_ids"] = c.token_ids
    elif c.raw and c.completion_tokens is not None:  # a server without ids: GRPO may re-tokenize this
        meta["raw"] = c.raw
    if c.logprobs is not None:
        meta["logprobs"] = c.logprobs
    if c.parse_errors:
        meta["parse_errors"] = c.parse_errors
    if c.tool_calls:
        pairs = []
        msg = Message(role=role, content=c.text or None, turn_idx=turn, meta=meta)
        ep.messages.append(msg)
        pairs = _tool_messages(ep, domain, c.tool_calls, role, turn)
        msg.tool_calls = [tc for tc, _ in pairs]
        ep.messages.extend(m for _, m in pairs)
        ep.steps += 1 + len(pairs)
        ep.errors += len(c.parse_errors)
        ep.next = role  # the caller speaks again after its tool results
        if role == "assistant" and any(tc.name == TRANSFER_TOOL and not m.error for tc, m in pairs):
            ep.termination, ep.stop_signal = Termination.USER_STOP, "transfer"
        return
    if c.parse_errors:  # text that tried to be a tool call and failed: show the error, go on
        ep.messages.append(Message(role=role, content=c.raw, turn_idx=turn, meta=meta))
        ep.messages.append(Message(role="system", turn_idx=turn, meta={"to": role, "kind": "parse_error"},
                                   content="Error: your tool call could not be parsed: " + "; ".join(c.parse_errors)
                                   + ". Write <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call> with valid JSON."))
        ep.errors += len(c.parse_errors)
        ep.steps += 1
        ep.next = role
        return
    ep.messages.append(Message(role=role, content=c.text, turn_idx=turn, meta=meta))
    ep.steps += 1
    if role == "assistant":
        if STOP in (c.text or ""):
            ep.termination = Termination.AGENT_STOP
        ep.next = "user"
    else:
        for token, signal in USER_STOP_SIGNALS.items():
            if token in (c.text or ""):
                ep.termination, ep.stop_signal = Termination.USER_STOP, signal
                break
        ep.next = "assistant"


def run_episodes(
    domain: Domain,
    tasks: list,
    agent: Backend,
    user: Backend,
    config: Optional[RolloutConfig] = None,
    on_done: Optional[Callable[[Trajectory], None]] = None,
    progress: bool = True,
) -> list[Trajectory]:
    """Run one episode per entry of `tasks` (repeat a task G times for a group)."""
    cfg = config or RolloutConfig()
    eps = [_start(domain, i, t, cfg) for i, t in enumerate(tasks)]
    results: list[Optional[Trajectory]] = [None] * len(eps)
    agent_tools = domain.tool_schemas("assistant")
    user_tools = domain.tool_schemas("user") or None
    calls = 0
    bar = tqdm(total=len(eps), desc=f"episodes {domain.name}", disable=not progress, leave=False)

    def finish(ep: _Episode, reason: Optional[Termination] = None) -> None:
        ep.termination = ep.termination or reason
        ep.next = None
        traj = Trajectory(
            task_id=ep.task.id, domain=domain.name, messages=ep.messages, termination_reason=ep.termination,
            start_time=ep.started_at, end_time=datetime.now().isoformat(),
            duration=round(time.perf_counter() - ep.start, 4), infra_error=ep.infra_error,
            meta={"steps": ep.steps, "errors": ep.errors, "stop_signal": ep.stop_signal,
                  "agent_tokens": sum(m.meta.get("completion_tokens") or 0 for m in ep.messages if m.role == "assistant"),
                  "user_tokens": sum(m.meta.get("completion_tokens") or 0 for m in ep.messages if m.role == "user")},
        )
        results[ep.idx] = traj
        bar.update(1)
        if on_done is not None:
            on_done(traj)

    def after_turn(ep: _Episode, role: str, completion: Completion, latency: float) -> None:
        """Record one generated turn, then end the episode if it is over."""
        _apply(ep, domain, role, completion, latency, ep.steps)
        if ep.termination:
            finish(ep)
        elif ep.errors >= cfg.max_errors:
            finish(ep, Termination.TOO_MANY_ERRORS)
        elif ep.steps >= cfg.max_messages:
            finish(ep, Termination.MAX_STEPS)

    for ep in eps:  # a history that already ends the episode
        if ep.messages and ep.messages[-1].role == "assistant" and STOP in (ep.messages[-1].content or ""):
            finish(ep, "agent_stop")
    while any(ep.next for ep in eps):
        for role, backend, params, view, tools in (
            ("assistant", agent, cfg.agent_params, agent_view, agent_tools),
            ("user", user, cfg.user_params, user_view, user_tools),
        ):
            waiting = [ep for ep in eps if ep.next == role]
            if not waiting:
                continue
            p = params.model_copy(update={"n": 1, "seed": None if cfg.seed is None else cfg.seed + calls})
            calls += 1
            t0 = time.perf_counter()
            convs = [view(ep.messages, ep.agent_system if role == "assistant" else ep.user_system) for ep in waiting]
            reason, server = SERVER_FAILED[role]
            try:
                outs = backend.generate_batch(convs, tools, p)
            except EndpointError as e:
                if e.unreachable or not isinstance(e, BatchEndpointError):  # the server itself is gone
                    first = e.errors[min(e.errors)] if isinstance(e, BatchEndpointError) else e
                    raise EndpointError(f"{e.url + ', ' if e.url else ''}{server}, failed: {first}", e.hint,
                                        url=e.url, unreachable=e.unreachable) from None
                outs = e.results  # some requests failed: those episodes end, the others go on
                for i, err in e.errors.items():
                    waiting[i].infra_error = f"{server}: {err}"
                    finish(waiting[i], reason)
            latency = (time.perf_counter() - t0) / len(waiting)
            for ep, comps in zip(waiting, outs):
                if comps is not None:
                    after_turn(ep, role, comps[0], latency)
    bar.close()
    return [r for r in results if r is not None]
