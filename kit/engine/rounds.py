"""A round's numbers, as pure functions of its plans and its committed units.

    row = round_stats(r, plans, units, pools)        # RoundRow: one line of rounds.csv
    stats, examples, patterns = plan_feedback(plans, units)   # what the reflector reads

`RoundRow`'s fields are rounds.csv's columns, in order (ROUND_COLUMNS); nothing else decides them.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Optional

from kit.engine.plans import diversity
from kit.engine.records import Check, CommittedUnit
from kit.engine.store import atomic_write
from kit.tags import task_notes

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
    reject_duplicate: int
    reject_gold_reward: int
    reject_checker_strength: int
    reject_llm_judge: int
    # validation off: accepted tasks that a check would have rejected, and per check how many it flagged
    unvalidated: int
    unvalidated_checks: str         # "gold_runs:2 grounded_args:1" (a task flagged by two checks counts in both)
    # agent SFT samples (SFT pool) from rollouts that failed their checker: what trajectory validation drops
    # (kit/engine/run.py `_sft`), so 0 with validation on
    unvalidated_samples: int
    fidelity_templated: int
    episodes: int
    pass_rate: Optional[float]      # kit.metrics.PASS_RATE
    failures_task: int
    failures_agent: int
    failures_user: int
    failures_undetermined: int
    user_deviation_rate: Optional[float]  # kit.metrics.USER_DEVIATION_RATE
    diversity: float                # of the plans' text and slices (kit/engine/plans.py)
    # the realized task mix of the round's accepted tasks (task_mix): what the plans actually made
    kinds: str                      # tasks per kind, "one_write:5 lookup_write:2 device_fix:1" (TASK_KINDS)
    tools: str                      # tasks per tool their gold actions call, "cancel_reservation:3 ..."
    write_share: Optional[float]    # accepted tasks with at least one write
    write_coverage: Optional[float]  # the domain's write tools some accepted task calls, of all of them
    pattern_entropy: Optional[float]  # bits, over the gold tool patterns ("get_users>create_task")
    kind_entropy: Optional[float]   # bits, over TASK_KINDS
    sft_agent: int
    sft_user: int
    sft_ungrounded: int
    choice_fallbacks: int
    wall_s: float

    def as_dict(self) -> dict:
        return asdict(self)


ROUND_COLUMNS = [f.name for f in fields(RoundRow)]


# what a task asks of the agent, from its gold actions (task_kind)
TASK_KINDS = ("lookup", "one_write", "lookup_write", "two_writes", "chained", "device_fix")


def task_kind(actions: list, writes: frozenset[str]) -> str:
    """A task's kind from its gold actions (tau2 Action dicts or objects, in order) and the names of the
    domain's write tools: `device_fix` (the user acts on their own device: a gold action whose requestor is
    "user", telecom), `lookup` (no write), `one_write`, `lookup_write` (a read, then one write: the
    agent finds what the write needs), `two_writes` (two or more writes)."""
    if any((a.get("requestor") if isinstance(a, dict) else getattr(a, "requestor", None)) == "user" for a in actions):
        return "device_fix"
    names = [a["name"] if isinstance(a, dict) else a.name for a in actions]
    w = [i for i, n in enumerate(names) if n in writes]
    if not w:
        return "lookup"
    if len(w) > 1:
        return "two_writes"
    return "lookup_write" if w[0] > 0 else "one_write"


def _entropy(counts: Counter) -> Optional[float]:
    n = sum(counts.values())
    if not n:
        return None
    return round(max(0.0, -sum(c / n * math.log2(c / n) for c in counts.values() if c)), 4)


def _counts_text(counts: Counter) -> str:
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


@dataclass(frozen=True)
class TaskMix:
    """The realized mix of a set of tasks (rounds.csv's task-mix columns, the report's engine table)."""

    kinds: Counter
    tools: Counter
    patterns: Counter
    n: int
    write_tools: frozenset[str]

    @property
    def write_share(self) -> Optional[float]:
        """The share of tasks with a write (a refusal has none: the agent must decline it; a device fix has the
    user's)."""
        return round(1 - (self.kinds.get("lookup", 0) + self.kinds.get("refusal", 0)) / self.n, 4) if self.n else None

    @property
    def write_coverage(self) -> Optional[float]:
        if not self.write_tools:
            return None
        return round(len(self.write_tools & set(self.tools)) / len(self.write_tools), 4)


def task_mix(tasks: list, write_tools: frozenset[str]) -> TaskMix:
    """Kinds (task_kind; `refusal` for a request the policy forbids; `chained` for two writes the second of
    which changes the record the first one made, the engine's `chain` plans: description.notes), tools (tasks calling each) and gold
    tool patterns of `tasks` (tau2 Task dicts or objects)."""
    kinds, tools, patterns = Counter(), Counter(), Counter()
    for t in tasks:
        crit = t.get("evaluation_criteria") if isinstance(t, dict) else t.evaluation_criteria
        acts = ((crit or {}).get("actions") if isinstance(crit, dict) else getattr(crit, "actions", None)) or []
        names = [a["name"] if isinstance(a, dict) else a.name for a in acts]
        notes = task_notes(t)
        kinds["refusal" if notes.get("refusal") else "chained" if notes.get("chained")
              else task_kind(acts, write_tools)] += 1
        tools.update(set(names))
        patterns[">".join(names)] += 1
    return TaskMix(kinds, tools, patterns, len(tasks), frozenset(write_tools))


def from_failed_rollout(sample: dict) -> bool:
    """An SFT sample (a samples_*.jsonl row) taken from an engine rollout that failed its checker: what
    trajectory validation keeps out of the SFT data."""
    return sample.get("meta", {}).get("source") == "engine" and (sample.get("reward") or 0.0) < 1.0


def round_stats(r: int, plans: list, units: list[CommittedUnit], pools: dict[str, str],
                write_tools: frozenset[str] = frozenset()) -> RoundRow:
    """Round `r`'s row of rounds.csv from its plans, its committed units (read with their samples
    files for the SFT counts, tasks.jsonl for the task mix), the run's pools ({task id: "sft" | "rl"},
    kit/engine/pools.py) and the names of the domain's write tools."""
    props = [p for u in units for p in u.proposals]
    mix = task_mix([t for u in units for t in u.tasks], write_tools)
    ids = [p["task_id"] for p in props if p["accepted"]]

    def sft_samples(role: str) -> int:
        return sum(pools.get(s.get("task_id")) == "sft" for u in units for s in u.samples(role))

    trajs = [t for u in units for t in u.trajectories]
    rej = Counter(why.check for u in units for _, why in u.rejections())
    flagged = [whys for u in units for _, whys in u.unvalidated()]
    labels = Counter(f["label"] for u in units for f in u.failures)
    rewards = [t["meta"].get("reward", 0.0) for t in trajs]
    accepted = sum(p["accepted"] for p in props)
    return RoundRow(
        round=r, plans=len(plans), proposals=len(props), built=sum(p["task_id"] is not None for p in props),
        accepted=accepted, acceptance_rate=round(accepted / max(len(props), 1), 4),
        sft_pool=sum(pools.get(i) == "sft" for i in ids), rl_pool=sum(pools.get(i) == "rl" for i in ids),
        repaired=sum(bool(p["repairs"]) for p in props),
        **{f"reject_{c.value}": rej.get(c, 0) for c in Check},
        unvalidated=len(flagged),
        unvalidated_checks=_counts_text(Counter(c.value for whys in flagged for c in {w.check for w in whys})),
        unvalidated_samples=sum(pools.get(s.get("task_id")) == "sft" and from_failed_rollout(s)
                                for u in units for s in u.samples("agent")),
        fidelity_templated=sum(any(str(x).startswith("fidelity:") for x in p["repairs"]) for p in props),
        episodes=len(trajs), pass_rate=round(sum(rewards) / len(rewards), 4) if rewards else None,
        **{f"failures_{k}": labels.get(k, 0) for k in FAILURE_LABELS},
        user_deviation_rate=(round(sum(bool(t["meta"].get("user_deviations")) for t in trajs) / len(trajs), 4)
                             if trajs else None),
        diversity=round(diversity(plans), 4),
        kinds=_counts_text(mix.kinds), tools=_counts_text(mix.tools), write_share=mix.write_share,
        write_coverage=mix.write_coverage, pattern_entropy=_entropy(mix.patterns), kind_entropy=_entropy(mix.kinds),
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
