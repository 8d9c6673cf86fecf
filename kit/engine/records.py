"""The typed records a round passes along: what one unit (one plan in one round) produced, and the
same unit read back from the run folder.

    result = UnitResult(unit="r0-p1", round=0, plan_id="plan1", proposals=[...], accepted=[...], ...)
    store.commit(result)                 # its lines of every data file, then its units.jsonl line
    units = store.units(round=0)         # list[CommittedUnit], in commit order

A `UnitResult` is built by the engine's unit function (kit/engine/run.py) and committed whole by the
store (kit/engine/store.py); a `CommittedUnit` is what round statistics (kit/engine/rounds.py) and
reflection read, the same for units run now and units a resumed run finds already committed.

Why a proposal was rejected is a `Rejection`: the `Check` that failed, for Check.SYNTHESIS the
`SynthesisFailure` that stopped the synthesizer, and the detail text for people. proposals.jsonl
stores it as {"check", "cause", "detail"}; `Rejection.from_json` reads that and the older form,
whose synthesis detail led with its cause ("write_failed: ..."), parsed there once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Union

from kit.enums import TextEnum

if TYPE_CHECKING:  # the store reads records without loading tau2
    from kit.checkers.checker import CheckedTask
    from kit.trajectory import Trajectory
    from kit.verify import Verdict

# The data files of a run, in the order a unit's lines are written (units.jsonl comes last: the commit).
# checked_tasks.jsonl holds every accepted task with its checker, samples_<role>.jsonl the SFT samples
# of every accepted task; the pools (rl_tasks.jsonl, sft_tasks.jsonl) and the SFT data of the SFT pool
# (sft_agent.jsonl, sft_user.jsonl) are views of these, written after each round (kit/engine/pools.py).
DATA_FILES = ("tasks.jsonl", "checked_tasks.jsonl", "trajectories.jsonl", "samples_agent.jsonl", "samples_user.jsonl",
              "failures.jsonl", "proposals.jsonl")
POOL_VIEWS = ("rl_tasks.jsonl", "sft_tasks.jsonl", "sft_agent.jsonl", "sft_user.jsonl")


class Check(TextEnum):
    """The validation step that rejected a proposal, in the order they run (kit/engine/validate.py).
    SYNTHESIS: the synthesizer built no task at all (its cause is a SynthesisFailure)."""

    SYNTHESIS = "synthesis"
    GOLD_RUNS = "gold_runs"
    CHANGES_STATE = "changes_state"
    GROUNDED_ARGS = "grounded_args"
    HELD_OUT = "held_out"
    POLICY = "policy"
    DUPLICATE = "duplicate"
    GOLD_REWARD = "gold_reward"
    CHECKER_STRENGTH = "checker_strength"
    LLM_JUDGE = "llm_judge"


class SynthesisFailure(TextEnum):
    """Why the synthesizer built no task (kit/engine/synthesize.py)."""

    FREE_VALUE = "free_value"                  # no usable model-written value for a required argument
    GOLD_ACTION_ERROR = "gold_action_error"    # a gold call fails from the initial state
    NO_ARGUMENTS = "no_arguments"              # no values seen for a tool's arguments
    NOTHING_TO_TELL = "nothing_to_tell"        # a lookup returned no scalar value
    WRITE_FAILED = "write_failed"              # the write kept failing after its repairs
    NO_LOOKUP = "no_lookup"                    # the write has no id argument the read returns
    NOTHING_TO_LOOK_UP = "nothing_to_look_up"  # the read returned nothing usable to look up
    UNASKABLE = "unaskable"                    # a lookup whose read takes no arguments (a listing): the
                                               # customer cannot say which of its values they want
    EMPTY_VALUE = "empty_value"                # (runs of older kits)
    OTHER = "other"                            # an older record whose text names no known cause


@dataclass(frozen=True)
class Rejection:
    """One reason a proposal was rejected (proposals.jsonl `reasons`; the first one decided it)."""

    check: Check
    detail: str = ""                               # for people: which call, which value, which task
    cause: Optional[SynthesisFailure] = None       # Check.SYNTHESIS only
    mutation_report: Optional[dict] = None         # Check.CHECKER_STRENGTH: the checker's mutation test

    @property
    def category(self) -> Union[Check, SynthesisFailure]:
        """What the reflector counts: a synthesis failure's cause, else the check."""
        return self.cause if self.check is Check.SYNTHESIS and self.cause is not None else self.check

    def message(self) -> str:
        """The detail, led by the cause when there is one ("write_failed: create_task failed ...")."""
        return f"{self.cause}: {self.detail}" if self.cause not in (None, SynthesisFailure.OTHER) else self.detail

    def text(self) -> str:
        return f"{self.check}: {self.message()}"

    def to_json(self) -> dict:
        out: dict[str, Any] = {"check": self.check.value}
        if self.cause is not None:
            out["cause"] = self.cause.value
        out["detail"] = self.detail
        if self.mutation_report is not None:
            out["mutation_report"] = self.mutation_report
        return out

    @classmethod
    def from_json(cls, d: dict) -> "Rejection":
        """A proposals.jsonl reason, written by this kit or an older one (the boundary: an older
        synthesis reason's "<cause>: <detail>" text is parsed here, and nowhere else)."""
        check, detail, cause = Check(d["check"]), str(d.get("detail") or ""), d.get("cause")
        if cause is not None:
            cause = SynthesisFailure(cause)
        elif check is Check.SYNTHESIS:
            cause, detail = _old_synthesis_detail(detail)
        return cls(check=check, detail=detail, cause=cause, mutation_report=d.get("mutation_report"))


def _old_synthesis_detail(text: str) -> tuple[SynthesisFailure, str]:
    """(cause, detail) of an older kit's synthesis reason, "write_failed: create_task failed ..."."""
    head, sep, rest = text.partition(":")
    try:
        return SynthesisFailure(head.strip()), rest.strip()
    except ValueError:
        return SynthesisFailure.OTHER, text


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
                                       # (Rejection.to_json() each)
    accepted: list[CheckedTask]        # the tasks the validator accepted, with their checkers
    episodes: list[Episode]            # group_size rollouts per accepted task
    samples_agent: list[dict]          # SFT samples of every accepted task (the pools choose later which
    samples_user: list[dict]           # are SFT data: kit/engine/pools.py)
    sft_ungrounded: int                # SFT samples the grounding check dropped
    choice_fallbacks: int              # constrained choices that fell back (kit/engine/choice.py)
    wall_s: float = 0.0

    def lines(self) -> dict[str, list[Any]]:
        """Rows of each data file (DATA_FILES order): dicts, pydantic models or JSON strings."""
        return {
            "tasks.jsonl": [rec.task.model_dump_json(exclude_none=True) for rec in self.accepted],
            "checked_tasks.jsonl": self.accepted,
            "trajectories.jsonl": [e.trajectory for e in self.episodes],
            "samples_agent.jsonl": self.samples_agent,
            "samples_user.jsonl": self.samples_user,
            "failures.jsonl": [e.failure for e in self.episodes if e.failure is not None],
            "proposals.jsonl": self.proposals,
        }

    def summary(self) -> dict:
        """The unit's units.jsonl fields (besides its id and line counts)."""
        return {"round": self.round, "plan": self.plan_id, "proposals": len(self.proposals),
                "accepted": len(self.accepted), "episodes": len(self.episodes),
                "samples_agent": len(self.samples_agent), "samples_user": len(self.samples_user),
                "sft_ungrounded": self.sft_ungrounded,
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

    def rejections(self) -> list[tuple[dict, Rejection]]:
        """Each rejected proposal with the reason that decided it (its first), typed."""
        return [(p, Rejection.from_json(p["reasons"][0])) for p in self.proposals
                if not p["accepted"] and p["reasons"]]

    def unvalidated(self) -> list[tuple[dict, list[Rejection]]]:
        """Each proposal accepted with validation off that a check would have rejected, with every such
        check's reason (proposals.jsonl `unvalidated`; absent in runs of older kits)."""
        return [(p, [Rejection.from_json(w) for w in p["unvalidated"]]) for p in self.proposals
                if p["accepted"] and p.get("unvalidated")]

    @property
    def tasks(self) -> list[dict]:
        """The unit's accepted tasks (tau2 Task dicts, tasks.jsonl)."""
        return self.rows.get("tasks.jsonl", [])

    @property
    def trajectories(self) -> list[dict]:
        return self.rows.get("trajectories.jsonl", [])

    @property
    def failures(self) -> list[dict]:
        return self.rows.get("failures.jsonl", [])

    def samples(self, role: str) -> list[dict]:
        """The unit's SFT samples of `role` ("agent" or "user"), every accepted task's."""
        return self.rows.get(f"samples_{role}.jsonl", [])
