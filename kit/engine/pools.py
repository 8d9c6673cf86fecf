"""The engine's two disjoint task pools: SFT (gold dialogues to imitate) and RL (tasks + checkers).

    pools = assign_pools(tasks, rl_share=0.33, seed=0, split="pattern")   # {task id: "sft" | "rl"}

An accepted task goes to exactly one pool: its gold dialogue becomes SFT data only in the SFT pool,
and GRPO draws only from the RL pool, so RL trains on tasks whose solutions the policy never saw
(the paper's CLI product: 500 SFT dialogues + 250 RL tasks per domain, a third for RL).

Tasks with the same solution (gold actions) always land in the same pool, so no RL task's solution
sits in the SFT data under another id. Two ways to split:
- `hash`: each solution by itself, by a hash of its gold actions and the seed (`task_pool`); the
  share holds on average, and a tool pattern with few tasks can land wholly in one pool.
- `pattern` (default): per gold tool pattern ("get_users > update_task_status"), its solutions
  ordered by that hash and the first round(share × n) of them to RL (at least one, and at least
  one left for SFT, when the pattern has two or more): every pattern the engine made is in both
  pools. An RL pool that misses a pattern trains the policy away from it (docs/learning_signal.md:
  an RL pool with one update task of 13 traded updates for creates).
Both depend only on the set of tasks, not on their order: a resumed run gives the same pools.

Then, under either split, an RL task whose every gold action is among the SFT pool's gold actions (kit.eval.leak's
rule: a shorter task whose calls a longer SFT task makes, `get_users > create_task(X)` beside
`get_users > create_task(X) > update_task_status(...)`) moves to the SFT pool, until none is left
(`cover_moves`): the policy would have seen its whole solution, and GRPO refuses or drops such a task.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Literal

Pool = Literal["sft", "rl"]
PoolSplit = Literal["hash", "pattern"]
POOLS: tuple[Pool, ...] = ("sft", "rl")
POOL_FILES: dict[str, str] = {"sft": "sft_tasks.jsonl", "rl": "rl_tasks.jsonl"}


def _task_id(task: Any) -> str:
    return task["id"] if isinstance(task, dict) else task.id


def _solution(task: Any) -> list:
    """A task's solution key: its gold actions (sorted keys), or its id when it has none."""
    from kit.eval.leak import gold_action_keys

    return sorted(gold_action_keys(task)) or [("id", _task_id(task))]


def _unit_hash(seed: int, keys: list) -> float:
    digest = hashlib.sha256(json.dumps([seed, keys]).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def task_pool(task: Any, rl_share: float, seed: int = 0) -> Pool:
    """'rl' for a share `rl_share` of tasks (by a hash of their gold actions), else 'sft'."""
    if rl_share <= 0.0:
        return "sft"
    if rl_share >= 1.0:
        return "rl"
    return "rl" if _unit_hash(seed, _solution(task)) < rl_share else "sft"


def rl_quota(n: int, rl_share: float, u: float) -> int:
    """How many of a pattern's n solutions go to RL: round(share × n), kept within [1, n - 1] when
    n ≥ 2 and 0 < share < 1; a lone solution goes to RL when its hash `u` < share."""
    if rl_share <= 0.0 or n == 0:
        return 0
    if rl_share >= 1.0:
        return n
    if n == 1:
        return int(u < rl_share)
    return min(max(int(rl_share * n + 0.5), 1), n - 1)


def assign_pools(tasks: Iterable[Any], rl_share: float, seed: int = 0, split: PoolSplit = "pattern") -> dict[str, Pool]:
    """{task id: pool} for a set of tasks (tau2 Tasks or their dicts); see the module docstring."""
    from kit.train.grpo_curriculum import gold_pattern

    tasks = list(tasks)
    if split == "hash":
        return cover_moves(tasks, {_task_id(t): task_pool(t, rl_share, seed) for t in tasks})
    if split != "pattern":
        raise ValueError(f"assign_pools: split must be 'hash' or 'pattern', got {split!r}")
    # solution -> its tasks; a solution belongs to the pattern of its first task (same actions, same pattern)
    solutions: dict[str, list] = {}
    for t in tasks:
        solutions.setdefault(json.dumps(_solution(t)), []).append(t)
    by_pattern: dict[str, list[str]] = {}
    for key, ts in solutions.items():
        by_pattern.setdefault(gold_pattern(ts[0]), []).append(key)
    pools: dict[str, Pool] = {}
    for keys in by_pattern.values():
        ranked = sorted(keys, key=lambda k: (_unit_hash(seed, json.loads(k)), k))
        n_rl = rl_quota(len(ranked), rl_share, _unit_hash(seed, json.loads(ranked[0])))
        for i, key in enumerate(ranked):
            for t in solutions[key]:
                pools[_task_id(t)] = "rl" if i < n_rl else "sft"
    return cover_moves(tasks, pools)


def cover_moves(tasks: list, pools: dict[str, Pool]) -> dict[str, Pool]:
    """`pools` with every RL task whose gold actions are all among the SFT pool's moved to SFT, repeated
    until none is (a move only adds SFT actions; each round moves at least one task or stops)."""
    from kit.eval.leak import gold_action_keys

    pools = dict(pools)
    keys = {_task_id(t): gold_action_keys(t) for t in tasks}
    while True:
        seen = set().union(*(k for i, k in keys.items() if pools.get(i) == "sft"))
        covered = [i for i, k in keys.items() if pools.get(i) == "rl" and k and k <= seen]
        if not covered:
            return pools
        for i in covered:
            pools[i] = "sft"
