"""Gold replays and the verification benchmark (kit vs tau2's evaluator, same trajectories).

    kit replay --domains mock airline retail telecom   # gold replay table
    kit bench verify --domain airline                  # speed and agreement

Benchmarks time whole evaluations: the kit's numbers include computing each task's gold
state the first time it is needed (later evaluations of the same task reuse it).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Iterable, Optional

from tqdm import tqdm

from kit.envs import load_domain
from kit.mutate import mutants
from kit.replay import gold_trajectory
from kit.trajectory import Trajectory
from kit.verify import same_verdict, tau2_verdict, verify


@dataclass
class ReplayRow:
    domain: str
    tasks: int
    kit_pass: int
    tau2_pass: int
    kit_s: float
    tau2_s: float
    failures: list[str] = field(default_factory=list)


def gold_replay(domain_name: str, with_tau2: bool = True, limit: Optional[int] = None) -> ReplayRow:
    """Replay every default task's gold actions; score with the kit (and tau2)."""
    dom = load_domain(domain_name)
    tasks = dom.tasks()[:limit] if limit else dom.tasks()
    row = ReplayRow(domain_name, len(tasks), 0, 0, 0.0, 0.0)
    for task in tqdm(tasks, desc=f"gold replay {domain_name}", leave=False):
        traj = gold_trajectory(dom, task)
        t0 = time.perf_counter()
        kv = verify(dom, task, traj)
        row.kit_s += time.perf_counter() - t0
        row.kit_pass += kv.reward == 1.0
        ok_tau2 = True
        if with_tau2:
            t0 = time.perf_counter()
            rv = tau2_verdict(domain_name, task, traj)
            row.tau2_s += time.perf_counter() - t0
            ok_tau2 = rv["reward"] == 1.0
            row.tau2_pass += ok_tau2
        if kv.reward != 1.0 or not ok_tau2:
            row.failures.append(f"{task.id} (kit {kv.reward}, breakdown {kv.breakdown}, tau2 {'1.0' if ok_tau2 else 'fail'})")
    return row


def trajectory_set(domain_name: str, limit: Optional[int] = None, min_mutants: int = 5) -> list[tuple]:
    """(task, trajectory) pairs: each task's gold replay and its near-miss mutants."""
    dom = load_domain(domain_name)
    tasks = dom.tasks()[:limit] if limit else dom.tasks()
    pairs = []
    for task in tqdm(tasks, desc=f"trajectories {domain_name}", leave=False):
        pairs.append((task, gold_trajectory(dom, task)))
        pairs.extend((task, m.trajectory) for m in mutants(dom, task, min_count=min_mutants))
    return pairs


@dataclass
class BenchResult:
    domain: str
    n: int
    agree: int
    kit_ms: list[float]
    tau2_ms: list[float]
    disagreements: list[str]

    @property
    def speedup(self) -> float:
        return statistics.mean(self.tau2_ms) / max(statistics.mean(self.kit_ms), 1e-9)

    def line(self) -> str:
        return (
            f"verify speedup {self.domain}: {self.speedup:.0f}x "
            f"(kit {statistics.mean(self.kit_ms):.2f} ms, tau2 {statistics.mean(self.tau2_ms):.1f} ms, "
            f"agreement {100.0 * self.agree / max(self.n, 1):.1f}%)"
        )


def bench_verify(domain_name: str, pairs: Iterable[tuple[object, Trajectory]]) -> BenchResult:
    """Time the kit and tau2 on the same pairs, in one run, and compare every verdict."""
    dom = load_domain(domain_name)
    pairs = list(pairs)
    kit_ms, tau2_ms, disagreements, agree = [], [], [], 0
    for task, traj in tqdm(pairs, desc=f"bench verify {domain_name}", leave=False):
        t0 = time.perf_counter()
        kv = verify(dom, task, traj).summary()
        kit_ms.append(1000 * (time.perf_counter() - t0))
        t0 = time.perf_counter()
        rv = tau2_verdict(domain_name, task, traj)
        tau2_ms.append(1000 * (time.perf_counter() - t0))
        if same_verdict(kv, rv):
            agree += 1
        else:
            disagreements.append(f"{task.id} {traj.meta.get('mutation', 'gold')}: kit {kv} tau2 {rv}")
    return BenchResult(domain_name, len(pairs), agree, kit_ms, tau2_ms, disagreements)
