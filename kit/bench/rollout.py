"""`kit bench rollout`: one group of G episodes, batched vs one episode at a time.

Both runs use the same backend, task, sampling and limits, in one process, after one short untimed
warm-up episode group, and each starts with an empty prefix cache (the second run does not inherit
the first one's system prompts); the number is
aggregate generated tokens per second (agent + user completions / wall time). Backends that
account for their generation time (HFBackend's `stats`, kit.llm.fast.generate.GenStats) also
report where it went in each run: prefill, decode, other.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass

from kit.envs import load_domain
from kit.llm.types import SamplingParams
from kit.rollout.loop import RolloutConfig, run_episodes


@dataclass
class RolloutBench:
    batched_tok_s: float
    sequential_tok_s: float
    batched_s: float
    sequential_s: float
    tokens: tuple[int, int]
    batched_profile: str = ""
    sequential_profile: str = ""

    @property
    def speedup(self) -> float:
        return self.batched_tok_s / max(self.sequential_tok_s, 1e-9)

    def line(self) -> str:
        return f"rollout speedup: {self.speedup:.1f}x ({self.batched_tok_s:.1f} tok/s vs {self.sequential_tok_s:.1f} tok/s)"


def _tokens(trajs) -> int:
    return sum(m.meta.get("completion_tokens") or 0 for t in trajs for m in t.messages)


def _profile(backend, before) -> str:
    """What the backend's generation stats gained since `before` (a copy), as one line."""
    if before is None:
        return ""
    stats = backend.stats
    delta = copy.copy(stats)
    for name, value in vars(stats).items():
        if isinstance(value, (int, float)):
            setattr(delta, name, value - getattr(before, name))
    return delta.summary()


def _cold(backend) -> None:
    """Start cold: the backend forgets its cached prompt states (Backend.clear_cache)."""
    backend.clear_cache()


def bench_rollout(backend, domain: str = "mock", task_index: int = 0, group: int = 8, max_messages: int = 8,
                  max_new_tokens: int = 64, seed: int = 0, log: Callable[[str], None] | None = print,
                  continuous: bool = False, repeat: int = 1) -> RolloutBench:
    """Run the group batched, then one episode at a time, `repeat` times (the same seeds, so the
    same work each time); `log` gets each repeat's times and the backend's profile lines.
    `continuous`: the batched run lets each episode's next turn join the running batch
    (RolloutConfig.continuous) instead of advancing the episodes turn by turn.

    With repeats, each side's number is its fastest repeat (as `timeit` reports the minimum: slower
    repeats measure whatever else the machine was doing; a shared 2-core VM varies by 10-30% from
    minute to minute), and the two runs alternate so that both see the same machine conditions."""
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    dom = load_domain(domain)
    task = dom.tasks()[task_index]
    params = SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens)
    cfg = RolloutConfig(max_messages=max_messages, seed=seed, agent_params=params, user_params=params, continuous=continuous)
    snapshot = (lambda: copy.copy(backend.stats)) if backend.caps.stats else (lambda: None)
    # warm-up, not timed: what either run would otherwise pay once (weights packed, kernels for each
    # batch shape chosen, templates compiled), here before both instead of inside the first one
    short = SamplingParams(temperature=1.0, max_new_tokens=8)
    run_episodes(dom, [task] * group, backend, backend,
                 RolloutConfig(max_messages=2, seed=seed, agent_params=short, user_params=short), progress=False)
    runs: list[RolloutBench] = []
    for r in range(repeat):
        _cold(backend)
        before = snapshot()
        t0 = time.perf_counter()
        batched = run_episodes(dom, [task] * group, backend, backend, cfg, progress=True)
        tb = time.perf_counter() - t0
        batched_profile = _profile(backend, before)
        _cold(backend)
        before = snapshot()
        t0 = time.perf_counter()
        seq = []
        for i in range(group):
            cfg_i = RolloutConfig(max_messages=max_messages, seed=seed + 1000 * i, agent_params=params, user_params=params)
            seq += run_episodes(dom, [task], backend, backend, cfg_i, progress=False)
        ts = time.perf_counter() - t0
        nb, ns = _tokens(batched), _tokens(seq)
        res = RolloutBench(nb / tb, ns / ts, tb, ts, (nb, ns), batched_profile, _profile(backend, before))
        runs.append(res)
        if log is not None:
            if repeat > 1:
                log(f"repeat {r + 1}/{repeat}: batched {nb} tokens in {tb:.1f} s, one at a time {ns} tokens in "
                    f"{ts:.1f} s: {res.speedup:.1f}x")
            if res.batched_profile:
                log(f"batched profile: {res.batched_profile}")
                log(f"one at a time profile: {res.sequential_profile}")
    b = min(runs, key=lambda x: x.batched_s)  # each side's fastest repeat
    s = min(runs, key=lambda x: x.sequential_s)
    return RolloutBench(b.batched_tok_s, s.sequential_tok_s, b.batched_s, s.sequential_s, (b.tokens[0], s.tokens[1]),
                        b.batched_profile, s.sequential_profile)
