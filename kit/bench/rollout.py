"""`kit bench rollout`: one group of G episodes, batched vs one episode at a time.

Both runs use the same backend, task, sampling and limits, in one process; the number is
aggregate generated tokens per second (agent + user completions / wall time).
"""

from __future__ import annotations

import time
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

    @property
    def speedup(self) -> float:
        return self.batched_tok_s / max(self.sequential_tok_s, 1e-9)

    def line(self) -> str:
        return f"rollout speedup: {self.speedup:.1f}x ({self.batched_tok_s:.1f} tok/s vs {self.sequential_tok_s:.1f} tok/s)"


def _tokens(trajs) -> int:
    return sum(m.meta.get("completion_tokens") or 0 for t in trajs for m in t.messages)


def bench_rollout(backend, domain: str = "mock", task_index: int = 0, group: int = 8, max_steps: int = 8,
                  max_new_tokens: int = 64, seed: int = 0) -> RolloutBench:
    dom = load_domain(domain)
    task = dom.tasks()[task_index]
    params = SamplingParams(temperature=1.0, max_new_tokens=max_new_tokens)
    cfg = RolloutConfig(max_steps=max_steps, seed=seed, agent_params=params, user_params=params)
    t0 = time.perf_counter()
    batched = run_episodes(dom, [task] * group, backend, backend, cfg, progress=True)
    tb = time.perf_counter() - t0
    t0 = time.perf_counter()
    seq = []
    for i in range(group):
        cfg_i = RolloutConfig(max_steps=max_steps, seed=seed + 1000 * i, agent_params=params, user_params=params)
        seq += run_episodes(dom, [task], backend, backend, cfg_i, progress=False)
    ts = time.perf_counter() - t0
    nb, ns = _tokens(batched), _tokens(seq)
    return RolloutBench(nb / tb, ns / ts, tb, ts, (nb, ns))
