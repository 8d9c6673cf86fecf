"""Trajectories -> SFT samples for the agent and for the user simulator (PAPER.md, recipe steps 1-2).

    agent, user = build_sft_samples(trajectories, domain, tokenizer)   # or gold_sft_samples(domain, tasks, tok)
    write_sft_jsonl(out_dir, agent, user)      # out_dir/sft_agent.jsonl, out_dir/sft_user.jsonl
    ds = load_sft_dataset(out_dir / "sft_agent.jsonl")                 # datasets.Dataset for TRL

One sample per generated turn of a role. The agent's sample for turn i is
    prompt      = render_prompt(tokenizer, agent_view(messages[:i], agent_system), agent_tools)
    completion  = that turn written the way the model emits it (text and/or <tool_call> blocks in
                  "prompt" tool mode, the template's own format in "native" mode) + end-of-turn token
so `prompt` is exactly the text the hf backend samples from and GRPO's row for the same turn
starts with (kit/train/sequences.py): SFT, GRPO and inference see one format. The user's samples
are the same thing seen from the other side: `user_view`, `user_system_prompt(task, has_tools)`,
the user's own tools, targets = the user's turns (text and user-tool calls).

The completion is the difference between the conversation rendered with the turn
(add_generation_prompt=False) and the prompt, cut after the end-of-turn token; a chat template
that does not render a conversation as a prefix of its continuation is refused loudly.

Skipped turns: the fixed opening greeting (tau2's "Hi! How can I help you today?", never
generated), empty turns, turns whose output did not parse (meta.parse_errors) and turns whose tool
calls were answered with an error (both switchable).

Each sample also carries `messages` (the role's OpenAI chat list ending with the target turn) and
`tools`, for trainers that use TRL's conversational format with a tool-aware chat template.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from kit.llm.prompting import render_prompt, resolve_tool_mode
from kit.rollout.prompts import (
    FIRST_AGENT_MESSAGE,
    agent_system_prompt,
    user_system_prompt,
)
from kit.rollout.views import agent_view, user_view
from kit.files import BadLine, iter_jsonl
from kit.trajectory import Message, Trajectory

AGENT_FILE, USER_FILE = "sft_agent.jsonl", "sft_user.jsonl"
SFTRole = Literal["agent", "user"]


class SFTSample(BaseModel):
    """One training example: a prompt, the turn to learn, and where it came from."""

    role: SFTRole
    prompt: str  # the exact text the role's model was (or would be) sampled from
    completion: str  # the turn as the model emits it, ending with the end-of-turn token
    messages: list[dict]  # OpenAI chat list: the role's view, ending with the target turn
    tools: list[dict] | None = None  # the role's tool schemas (OpenAI format)
    domain: str | None = None
    task_id: str
    trajectory_id: str
    turn: int  # 0-based index of this turn among the role's trained turns in the trajectory
    message_index: int  # index of the target message in trajectory.messages
    reward: float | None = None
    meta: dict = Field(default_factory=dict)


# ----- reading trajectories ----------------------------------------------------------------------


def read_trajectories(path: str | Path) -> list[Trajectory]:
    """Every Trajectory in a JSONL file; a bad line raises `BadLine` naming the file and line."""
    out = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(Trajectory.model_validate_json(line))
            except ValueError as e:  # pydantic ValidationError (bad JSON too): say where, briefly
                raise BadLine(str(path), lineno, f"not a kit Trajectory: {str(e).splitlines()[0]}") from None
    return out


def _trajectories(source: str | Path | Iterable[Trajectory]) -> list[Trajectory]:
    if isinstance(source, (str, Path)):
        return read_trajectories(source)
    return [t if isinstance(t, Trajectory) else Trajectory.model_validate(t) for t in source]


# ----- rendering ---------------------------------------------------------------------------------


class _Renderer:
    """The prompt text and the completion text of a turn, for one tokenizer and tool mode."""

    def __init__(self, tokenizer: Any, tool_mode: str = "auto"):
        if isinstance(tokenizer, (str, Path)):
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer), local_files_only=True)
        self.tokenizer = tokenizer
        self.tool_mode = resolve_tool_mode(tokenizer, tool_mode)  # what HFBackend resolves too
        self.eot = tokenizer.eos_token
        if not self.eot:
            raise ValueError("the tokenizer has no eos_token: cannot mark where a turn ends")

    def prompt(self, view: list[dict], tools: list[dict] | None) -> str:
        return render_prompt(self.tokenizer, view, tools, self.tool_mode)

    def completion(self, view: list[dict], target: dict, tools: list[dict] | None, prompt: str) -> str:
        full = render_prompt(self.tokenizer, view + [target], tools, self.tool_mode, add_generation_prompt=False)
        if not full.startswith(prompt):
            raise ValueError(
                "the chat template does not render the conversation as a prefix of the conversation with the "
                "next turn, so the prompt and completion cannot be split; use tool_mode='prompt' or another template"
            )
        rest = full[len(prompt):]
        cut = rest.find(self.eot)
        # generation stops at the end-of-turn token: what follows it (a newline) is never sampled
        return rest[: cut + len(self.eot)] if cut >= 0 else rest.rstrip() + self.eot


# ----- building samples --------------------------------------------------------------------------


def _errored_calls(traj: Trajectory) -> set[str]:
    return {m.tool_call_id for m in traj.messages if m.role == "tool" and m.error and m.tool_call_id}


def _target(m: Message, role: SFTRole) -> dict | None:
    """The message as the role's own view shows it (assistant side), or None if it shows nothing."""
    view = agent_view([m], "") if role == "agent" else user_view([m], "")
    return view[1] if len(view) == 2 and view[1]["role"] == "assistant" else None


def trajectory_samples(
    traj: Trajectory,
    role: SFTRole,
    renderer: _Renderer,
    system: str,
    tools: list[dict] | None,
    reward: float | None = None,
    skip_parse_errors: bool = True,
    skip_tool_errors: bool = True,
) -> list[SFTSample]:
    """The samples of one role in one trajectory (see the module docstring for what is skipped)."""
    speaker = "assistant" if role == "agent" else "user"
    view_fn = agent_view if role == "agent" else user_view
    errored = _errored_calls(traj) if skip_tool_errors else set()
    if reward is None:
        reward = traj.meta.get("reward")
    out: list[SFTSample] = []
    first_agent_turn = True
    for i, m in enumerate(traj.messages):
        if m.role != speaker:
            continue
        own_calls = [c for c in m.tool_calls or [] if c.requestor == speaker]
        greeting = (role == "agent" and first_agent_turn and not own_calls
                    and (m.content or "").strip() == FIRST_AGENT_MESSAGE)
        if speaker == "assistant":
            first_agent_turn = False
        if greeting or (not m.has_text() and not own_calls):
            continue
        if skip_parse_errors and m.meta.get("parse_errors"):
            continue
        if any(c.id in errored for c in own_calls):
            continue
        target = _target(m, role)
        if target is None:
            continue
        view = view_fn(traj.messages[:i], system)
        prompt = renderer.prompt(view, tools)
        out.append(SFTSample(
            role=role, prompt=prompt, completion=renderer.completion(view, target, tools, prompt),
            messages=view + [target], tools=tools or None, domain=traj.domain, task_id=traj.task_id,
            trajectory_id=traj.id, turn=len(out), message_index=i, reward=reward,
            meta={"source": traj.meta.get("source"), "tool_mode": renderer.tool_mode},
        ))
    return out


def build_sft_samples(
    trajectories: str | Path | Iterable[Trajectory],
    domain: Any,
    tokenizer: Any,
    tasks: Iterable[Any] | None = None,
    rewards: dict[str, float] | None = None,
    tool_mode: str = "auto",
    templates_dir: Path | None = None,
    skip_parse_errors: bool = True,
    skip_tool_errors: bool = True,
) -> tuple[list[SFTSample], list[SFTSample]]:
    """(agent samples, user samples) of every trajectory.

    Args:
        trajectories: a JSONL path of kit Trajectories, or Trajectory objects (or their dicts).
        domain: a kit Domain or its name; gives the policy and both roles' tool schemas.
        tokenizer: the model's tokenizer (or its HF folder): prompts are rendered with its template.
        tasks: Task objects for the user's system prompt (synthesized tasks); default `domain.task(id)`.
        rewards: trajectory id -> reward, recorded on the samples (else `traj.meta["reward"]`).
        tool_mode: as HFBackend's: "auto" | "native" | "prompt".
        templates_dir: another set of system-prompt templates (kit/rollout/templates by default).
    """
    if isinstance(domain, str):
        from kit.envs import load_domain

        domain = load_domain(domain)
    renderer = tokenizer if isinstance(tokenizer, _Renderer) else _Renderer(tokenizer, tool_mode)
    task_by_id = {t.id: t for t in tasks or []}
    agent_system = agent_system_prompt(domain.policy, templates_dir)
    agent_tools = domain.tool_schemas("assistant") or None
    user_tools = domain.tool_schemas("user") or None  # run_episodes passes the same
    has_user_tools = bool(domain.tool_names("user"))
    agent: list[SFTSample] = []
    user: list[SFTSample] = []
    for traj in _trajectories(trajectories):
        reward = (rewards or {}).get(traj.id)
        kw = {"reward": reward, "skip_parse_errors": skip_parse_errors, "skip_tool_errors": skip_tool_errors}
        agent += trajectory_samples(traj, "agent", renderer, agent_system, agent_tools, **kw)
        task = task_by_id.get(traj.task_id) or domain.task(traj.task_id)
        user_system = user_system_prompt(task, has_user_tools, templates_dir)
        user += trajectory_samples(traj, "user", renderer, user_system, user_tools, **kw)
    return agent, user


def gold_sft_samples(domain: Any, tasks: Iterable[Any], tokenizer: Any, **kw: Any) -> tuple[list[SFTSample], list[SFTSample]]:
    """SFT samples from the tasks' gold dialogues (kit.replay.gold_trajectory), reward 1 each."""
    from kit.replay import gold_trajectory

    if isinstance(domain, str):
        from kit.envs import load_domain

        domain = load_domain(domain)
    tasks = list(tasks)
    trajs = [gold_trajectory(domain, t) for t in tasks]
    rewards = {t.id: 1.0 for t in trajs}
    return build_sft_samples(trajs, domain, tokenizer, tasks=tasks, rewards=rewards, **kw)


# ----- files and datasets ------------------------------------------------------------------------


def write_samples(samples: Iterable[SFTSample], path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(s.model_dump_json() + "\n" for s in samples)
    return path


def write_sft_jsonl(out_dir: str | Path, agent: Iterable[SFTSample], user: Iterable[SFTSample]) -> dict[str, Path]:
    """out_dir/sft_agent.jsonl and out_dir/sft_user.jsonl, one SFTSample per line."""
    out_dir = Path(out_dir)
    return {"agent": write_samples(agent, out_dir / AGENT_FILE), "user": write_samples(user, out_dir / USER_FILE)}


def read_samples(path: str | Path) -> list[SFTSample]:
    """Every SFTSample of a JSONL file; a bad line raises `BadLine` naming the file and line."""
    out = []
    for lineno, data in iter_jsonl(path):
        if isinstance(data, BadLine):
            raise data
        try:
            out.append(SFTSample.model_validate(data))
        except ValueError as e:  # pydantic ValidationError: name the first bad field
            first = getattr(e, "errors", lambda: [{}])()[:1] or [{}]
            where = ".".join(str(p) for p in first[0].get("loc", ()))
            raise BadLine(str(path), lineno, f"not an SFT sample: field '{where}': {first[0].get('msg', e)}") from None
    return out


def as_samples(source: Any) -> list[SFTSample]:
    """SFT samples from a JSONL path, SFTSample objects, or dicts (a `datasets.Dataset` too)."""
    if isinstance(source, (str, Path)):
        samples = read_samples(source)
        where = f" in {source}"
    else:
        samples = [s if isinstance(s, SFTSample) else SFTSample.model_validate(dict(s)) for s in source]
        where = ""
    if not samples:
        raise ValueError(f"no SFT samples{where}: build them with build_sft_samples / gold_sft_samples first")
    return samples


def load_sft_dataset(source: Any, form: Literal["prompt_completion", "messages"] = "prompt_completion"):
    """A `datasets.Dataset` of SFT samples in one of TRL's two formats.

    "prompt_completion": columns prompt, completion (+ metadata); what `kit.train.sft.run_sft`
        trains on, identical to inference text.
    "messages": columns messages, tools (a JSON string, as TRL accepts it) (+ metadata), for
        TRL's conversational format; the model's chat template must render tools itself then.
    """
    from datasets import Dataset

    samples = as_samples(source)
    meta = ("role", "domain", "task_id", "trajectory_id", "turn", "reward")
    rows = []
    for s in samples:
        row = {k: getattr(s, k) for k in meta}
        if form == "prompt_completion":
            row.update(prompt=s.prompt, completion=s.completion)
        elif form == "messages":
            # arguments stay JSON strings (OpenAI form) so Arrow sees one type per field
            row.update(messages=[{k: v for k, v in m.items() if v is not None} for m in s.messages],
                       tools=json.dumps(s.tools) if s.tools else None)
        else:
            raise ValueError(f"form must be 'prompt_completion' or 'messages', got {form!r}")
        rows.append(row)
    return Dataset.from_list(rows)
