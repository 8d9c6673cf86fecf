"""The typed records a round passes along: what one unit (one plan in one round) produced, and the
same unit read back from the run folder.

    result = UnitResult(unit="r0-p1", round=0, plan_id="plan1", proposals=[...], accepted=[...], ...)
    store.commit(result)                 # its lines of every data file, then its units.jsonl line
    units = store.units(round=0)         # list[CommittedUnit], in commit order

A `UnitResult` is built by the engine's unit function (kit/engine/run.py) and committed whole by the
store (kit/engine/store.py); a `CommittedUnit` is what round statistics (kit/engine/rounds.py) and
reflection read, the same for units run now and units a resumed run finds already committed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # the store reads records without loading tau2
    from kit.checkers.checker import CheckedTask
    from kit.trajectory import Trajectory
    from kit.verify import Verdict

# The data files of a run, in the order a unit's lines are written (units.jsonl comes last: the commit).
DATA_FILES = ("tasks.jsonl", "rl_tasks.jsonl", "sft_tasks.jsonl", "trajectories.jsonl", "sft_agent.jsonl", "sft_user.jsonl",
              "failures.jsonl", "proposals.jsonl")


@dataclass
class Episode:
    """One rollout of an accepted task: the trajectory (its meta holds reward, breakdown and user
    deviations), the checker's verdict on it (the episode is verified once), and the failure
    attribution row when the reward is below 1."""

    trajectory: Trajectory
    verdict: Verdict
    failure: Optional[dict] = None


@dataclass
class UnitResult:
    """Everything one plan produced in one round, ready for the store to commit in one call."""

    unit: str                          # "r<round>-p<plan index>"
    round: int
    plan_id: str
    proposals: list[dict]              # proposals.jsonl rows: every attempt, its decisions and reasons
    accepted: list[CheckedTask]        # the tasks the validator accepted, with their checkers
    pools: dict[str, str]              # accepted task id -> "sft" or "rl" (kit/engine/pools.py)
    episodes: list[Episode]            # group_size rollouts per accepted task
    sft_agent: list[dict]
    sft_user: list[dict]
    sft_ungrounded: int                # SFT samples the grounding check dropped
    choice_fallbacks: int              # constrained choices that fell back (kit/engine/choice.py)
    wall_s: float = 0.0

    def lines(self) -> dict[str, list[Any]]:
        """Rows of each data file (DATA_FILES order): dicts, pydantic models or JSON strings."""
        return {
            "tasks.jsonl": [rec.task.model_dump_json(exclude_none=True) for rec in self.accepted],
            "rl_tasks.jsonl": [rec for rec in self.accepted if self.pools[rec.task.id] == "rl"],
            "sft_tasks.jsonl": [rec for rec in self.accepted if self.pools[rec.task.id] == "sft"],
            "trajectories.jsonl": [e.trajectory for e in self.episodes],
            "sft_agent.jsonl": self.sft_agent,
            "sft_user.jsonl": self.sft_user,
            "failures.jsonl": [e.failure for e in self.episodes if e.failure is not None],
            "proposals.jsonl": self.proposals,
        }

    def summary(self) -> dict:
        """The unit's units.jsonl fields (besides its id and line counts)."""
        return {"round": self.round, "plan": self.plan_id, "proposals": len(self.proposals),
                "accepted": len(self.accepted),
                "rl_pool": sum(p == "rl" for p in self.pools.values()),
                "sft_pool": sum(p == "sft" for p in self.pools.values()), "episodes": len(self.episodes), "sft_agent": len(self.sft_agent),
                "sft_user": len(self.sft_user), "sft_ungrounded": self.sft_ungrounded,
                "choice_fallbacks": self.choice_fallbacks, "wall_s": self.wall_s}


@dataclass
class CommittedUnit:
    """A committed unit read back from the run folder: its units.jsonl line and its lines of each
    data file (JSON dicts)."""

    summary: dict
    rows: dict[str, list[dict]] = field(default_factory=dict)

    @property
    def unit(self) -> str:
        return self.summary["unit"]

    @property
    def round(self) -> int:
        return self.summary["round"]

    @property
    def proposals(self) -> list[dict]:
        return self.rows.get("proposals.jsonl", [])

    @property
    def trajectories(self) -> list[dict]:
        return self.rows.get("trajectories.jsonl", [])

    @property
    def failures(self) -> list[dict]:
        return self.rows.get("failures.jsonl", [])
