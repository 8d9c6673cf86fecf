"""A round's numbers, as pure functions of its plans and its committed units.

    row = round_stats(r, plans, units, pools)        # RoundRow: one line of rounds.csv
    stats, examples, patterns = plan_feedback(plans, units)   # what the reflector reads

`RoundRow`'s fields are rounds.csv's columns, in order (ROUND_COLUMNS); nothing else decides them.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Optional

from kit.engine.plans import diversity
from kit.engine.records import Check, CommittedUnit
from kit.engine.store import atomic_write

REJECT_CHECKS = tuple(c.value for c in Check)  # rounds.csv's reject_<check> columns, in order
FAILURE_LABELS = ("task", "agent", "user", "undetermined")


@dataclass(frozen=True)
class RoundRow:
    """One round of the engine: yield, rejection reasons (first reason of each rejected proposal),
    rollout outcomes, failure attribution, SFT samples, cost."""

    round: int
    plans: int
    proposals: int
    built: int                      # proposals that became a task (before validation)
    accepted: int
    acceptance_rate: float
    sft_pool: int                   # accepted tasks in the SFT pool (gold dialogues -> SFT data)
    rl_pool: int                    # accepted tasks in the RL pool (rl_tasks.jsonl, for grpo)
    repaired: int                   # proposals with an executable repair or a fidelity template
    reject_synthesis: int
    reject_gold_runs: int
    reject_changes_state: int
    reject_grounded_args: int
    reject_held_out: int
    reject_policy: int
    reject_gold_reward: int
    reject_checker_strength: int
    reject_llm_judge: int
    fidelity_templated: int
    episodes: int
    pass_rate: Optional[float]      # kit.metrics.PASS_RATE
    failures_task: int
    failures_agent: int
    failures_user: int
    failures_undetermined: int
    user_deviation_rate: Optional[float]  # kit.metrics.USER_DEVIATION_RATE
    diversity: float
    sft_agent: int
    sft_user: int
    sft_ungrounded: int
    choice_fallbacks: int
    wall_s: float

    def as_dict(self) -> dict:
        return asdict(self)


ROUND_COLUMNS = [f.name for f in fields(RoundRow)]


def round_stats(r: int, plans: list, units: list[CommittedUnit], pools: dict[str, str]) -> RoundRow:
    """Round `r`'s row of rounds.csv from its plans, its committed units (read with their samples
    files for the SFT counts) and the run's pools ({task id: "sft" | "rl"}, kit/engine/pools.py)."""
    props = [p for u in units for p in u.proposals]
    ids = [p["task_id"] for p in props if p["accepted"]]

    def sft_samples(role: str) -> int:
        return sum(pools.get(s.get("task_id")) == "sft" for u in units for s in u.samples(role))

    trajs = [t for u in units for t in u.trajectories]
    rej = Counter(why.check for u in units for _, why in u.rejections())
    labels = Counter(f["label"] for u in units for f in u.failures)
    rewards = [t["meta"].get("reward", 0.0) for t in trajs]
    accepted = sum(p["accepted"] for p in props)
    return RoundRow(
        round=r, plans=len(plans), proposals=len(props), built=sum(p["task_id"] is not None for p in props),
        accepted=accepted, acceptance_rate=round(accepted / max(len(props), 1), 4),
        sft_pool=sum(pools.get(i) == "sft" for i in ids), rl_pool=sum(pools.get(i) == "rl" for i in ids),
        repaired=sum(bool(p["repairs"]) for p in props),
        **{f"reject_{c.value}": rej.get(c, 0) for c in Check},
        fidelity_templated=sum(any(str(x).startswith("fidelity:") for x in p["repairs"]) for p in props),
        episodes=len(trajs), pass_rate=round(sum(rewards) / len(rewards), 4) if rewards else None,
        **{f"failures_{k}": labels.get(k, 0) for k in FAILURE_LABELS},
        user_deviation_rate=(round(sum(bool(t["meta"].get("user_deviations")) for t in trajs) / len(trajs), 4)
                             if trajs else None),
        diversity=round(diversity(plans), 4),
        sft_agent=sft_samples("agent"), sft_user=sft_samples("user"),
        sft_ungrounded=sum(u.summary.get("sft_ungrounded", 0) for u in units),
        choice_fallbacks=sum(u.summary["choice_fallbacks"] for u in units),
        wall_s=round(sum(u.summary["wall_s"] for u in units), 1),
    )


def plan_feedback(plans: list, units: list[CommittedUnit]) -> tuple[dict, dict, dict]:
    """What the reflector reads about a round: per plan its counts (stats) and its rejection and
    failure lines (examples); per tool pattern its (accepted, proposals)."""
    props = [p for u in units for p in u.proposals]
    rejected = [(p, why) for u in units for p, why in u.rejections()]
    fails = [f for u in units for f in u.failures]
    trajs = [t for u in units for t in u.trajectories]
    stats, examples = {}, {}
    for plan in plans:
        mine = [p for p in props if p["plan_id"] == plan.id]
        ids = {p["task_id"] for p in mine}
        pf = [f for f in fails if f["task_id"] in ids]
        whys = [why for p, why in rejected if p["plan_id"] == plan.id]
        rj = Counter(why.category for why in whys)  # Check or SynthesisFailure
        stats[plan.id] = {"proposals": len(mine), "accepted": sum(p["accepted"] for p in mine),
                          "rejections": rj, "failures": Counter(f["label"] for f in pf),
                          "episodes": sum(1 for t in trajs if (t.get("task_id") or "") in ids)}
        examples[plan.id] = ([f"{why.check}: {why.message()[:120]}" for why in whys]
                             + [f"{f['label']}/{f['rule']}: {f['evidence'][:100]}" for f in pf])
    patterns: dict[str, tuple[int, int]] = {}
    for plan in plans:
        key = ">".join(plan.slice.tools)
        a, n = patterns.get(key, (0, 0))
        patterns[key] = (a + stats[plan.id]["accepted"], n + stats[plan.id]["proposals"])
    return stats, examples, patterns


def write_rounds_csv(path: Path, rows: list[RoundRow]) -> None:
    """rounds.csv: one line per round, ROUND_COLUMNS; None as an empty cell."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=ROUND_COLUMNS)
    w.writeheader()
    for row in rows:
        w.writerow({k: ("" if v is None else v) for k, v in row.as_dict().items()})
    atomic_write(path, buf.getvalue())
