"""The engine's two disjoint task pools: SFT (gold dialogues to imitate) and RL (tasks + checkers).

    pool = task_pool(task, rl_share=0.33, seed=0)   # "sft" or "rl"

An accepted task goes to exactly one pool: its gold dialogue becomes SFT data only in the SFT pool,
and GRPO draws only from the RL pool, so RL trains on tasks whose solutions the policy never saw
(the paper's CLI product: 500 SFT dialogues + 250 RL tasks per domain, a third for RL).

The pool is a hash of the task's gold actions (and the seed), not of its id: two tasks with the same
solution land in the same pool, so no RL task's solution sits in the SFT data under another id. A
task without gold actions hashes its id. Independent of order, so parallel units and a resumed run
give the same pools.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

Pool = Literal["sft", "rl"]
POOLS: tuple[Pool, ...] = ("sft", "rl")
POOL_FILES: dict[str, str] = {"sft": "sft_tasks.jsonl", "rl": "rl_tasks.jsonl"}


def task_pool(task: Any, rl_share: float, seed: int = 0) -> Pool:
    """'rl' for a share `rl_share` of tasks (by a hash of their gold actions), else 'sft'."""
    from kit.eval.leak import gold_action_keys

    if rl_share <= 0.0:
        return "sft"
    if rl_share >= 1.0:
        return "rl"
    keys = sorted(gold_action_keys(task)) or [("id", task["id"] if isinstance(task, dict) else task.id)]
    digest = hashlib.sha256(json.dumps([seed, keys]).encode()).digest()
    return "rl" if int.from_bytes(digest[:8], "big") / 2**64 < rl_share else "sft"
