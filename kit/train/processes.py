"""The processes of one `accelerate launch` run, seen from inside one of them.

    procs = Processes(accelerator)
    procs.sum(x)       # x summed over all processes (no communication with one process)
    procs.any(flag)    # set on some process;  procs.all(flag): set on every process
    procs.merge(m, summed=(...), episode_means=(...))   # whole-batch metrics, each process's own under proc/
    procs.gather(obj)  # [every process's obj], in process order (picklable objects; [obj] with one process)

GRPO needs these where processes must agree: the token count a loss is normalised by, whether a
step is skipped (every process must take part in the same backward passes), and the metrics logged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch


class Processes:
    def __init__(self, accelerator: Any):
        self.acc = accelerator
        self.count, self.index = accelerator.num_processes, accelerator.process_index

    def sum(self, x: float) -> float:
        """`x` summed over all processes."""
        if self.count == 1:
            return x
        t = torch.tensor([float(x)], dtype=torch.float64, device=self.acc.device)
        return float(self.acc.reduce(t, reduction="sum").item())

    def gather(self, obj: Any) -> list:
        """Every process's `obj` (picklable), in process order; every process gets the whole list."""
        if self.count == 1:
            return [obj]
        from accelerate.utils import gather_object

        return list(gather_object([obj]))

    def any(self, flag: bool) -> bool:
        """True if `flag` is set on any process."""
        return self.sum(float(flag)) > 0

    def all(self, flag: bool) -> bool:
        """True if `flag` is set on every process."""
        return self.sum(float(flag)) >= self.count

    def merge(self, m: dict, summed: Iterable[str], episode_means: Iterable[str],
              weight_key: str = "proc/episodes") -> dict:
        """Metrics over all processes together: `summed` keys are summed, `episode_means` are
        averaged weighted by each process's `weight_key`; each process's own values stay under
        proc/<key>. Empty with one process (its metrics are already the whole batch's)."""
        if self.count == 1:
            return {}
        summed, episode_means = tuple(summed), tuple(episode_means)
        out = {f"proc/{k}": m[k] for k in summed + episode_means if k in m}
        for k in summed:
            out[k] = self.sum(m.get(k, 0.0))
        weight = m.get(weight_key, 0.0)
        total = self.sum(weight)
        for k in episode_means:
            out[k] = self.sum(m.get(k, 0.0) * weight) / max(total, 1.0)
        return {**out, "proc/count": self.count}
