"""A stage's contract: what the rest of the kit needs to know about a stage, declared once, in the
stage's own module (its `CONTRACT`), and collected by the registry (kit/stages/__init__.py).

    CONTRACT = Contract(
        names=("grpo",), produces=Produces.MODEL, launchable=True, training_data=True,
        references={"model": Reference(Produces.MODEL, wire_from=("sft_agent",), fallback=BASE_MODEL), ...},
        check=check, memory=memory, leak_sources=leak_sources,
        report=ReportPart(bucket="grpo_runs", read=report_entry, sections=report_sections, rank=3))

Who reads what:
  - recipe validation (kit/runner/recipe.py): `names`, `references` (an `@id` must name a stage that
    produces the field's kind; an unset field is auto-wired to the latest earlier stage named in
    `wire_from`, else `fallback`), `launchable` (a `launch:` is refused elsewhere), `summarizes_run`
    (at most one such stage, last, run once after every arm) and `check` (the stage's own recipe-level
    problems: inputs that do not exist, episode budgets that cannot score);
  - the runner (kit/runner/execute.py): `produces` (a model stage's reference is its model/ folder,
    whose weights the manifest hashes), `references` (the models it records), `summarizes_run`;
  - the stage's process (kit/runner/stage.py): `uses_torch` (seed torch or not);
  - the memory estimate (kit/runner/memory.py): `memory`, for the stages that train on a GPU;
  - the leak check (kit/eval/leak.py): `training_data` and `leak_sources`;
  - the report (kit/report/run_data.py, kit/report/build.py): `report`, and `provenance` (what an
    evaluated model folder the stage wrote is: "SFT: 48 steps", "GRPO skipped: ...").

This module imports nothing heavy (a recipe's validation reads every contract): a hook imports what
it needs when it is called.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Optional

# `Reference.fallback`: the recipe's `base_model`
BASE_MODEL = "base_model"


class Produces(str, Enum):
    """What a stage leaves for later stages' `@<stage id>` references."""

    MODEL = "model"      # a model folder: <stage folder>/model
    DATA = "data"        # a data folder: the stage folder
    EVAL = "eval"        # an evaluation (eval.json): nothing a parameter takes
    NOTHING = "nothing"


@dataclass(frozen=True)
class Reference:
    """A parameter that takes another stage's output (`@<stage id>`), and how it is wired when unset:
    to the latest earlier stage named in `wire_from`, else to `fallback` (BASE_MODEL: the recipe's
    base_model; another string: that value; None: left unset, the stage decides)."""

    kind: Produces
    wire_from: tuple[str, ...] = ()
    fallback: Optional[str] = None


@dataclass(frozen=True)
class MemoryUse:
    """How a training stage's parameters size its activations (kit/runner/memory.py): `rows` per
    forward pass of `length` tokens, at most `max_tokens` of them where set; `field` is the parameter to
    change when it does not fit;
    `samples`: it samples episodes while it trains (a rollout engine may share the card)."""

    rows: int
    length: int
    checkpointing: bool
    field: str
    samples: bool = False
    max_tokens: Optional[int] = None  # most padded tokens per forward pass, whatever rows x length says


@dataclass(frozen=True)
class SectionContext:
    """What a report section needs beside the collected data: where figures go (`out`, appended to
    `figures`), the bootstrap's settings, how paths are shortened (`root`), and whether the data
    merges several runs (`kit compare`)."""

    out: Path
    figures: list
    bootstrap: int
    ci: float
    root: Path
    across_runs: bool = False


@dataclass(frozen=True)
class ReportPart:
    """A stage's part of the report. `read(common, outputs, stage)`: the entry of one finished stage
    in collect()'s list `bucket` (None: nothing to show), from the fields every entry has (`common`:
    key, id, arm, dir, summary, params) and the stage's Outputs read back from its stage.json;
    `per_arm`: an entry shared between arms is kept once per arm (else once); `sections(data, ctx)`:
    its sections of the report (None entries are left out), placed by `rank` (lower first)."""

    bucket: str
    read: Callable[[dict, Any, str], Optional[dict]]
    sections: Callable[[dict, SectionContext], list]
    rank: int
    per_arm: bool = False


# (parameter, message) of a recipe-level problem of one stage
Problem = tuple[str, str]


@dataclass(frozen=True, eq=False)  # one per module, compared (and hashed) by identity
class Contract:
    """One stage module's declaration (see the module docstring for who reads which field).

    `check(ps, plan, budgets)`: the stage's recipe-level problems, given its kit.runner.recipe.PlannedStage
    (`ps.params` validated, or raw when they failed validation), the whole plan, and whether its episode
    budgets are to be checked (the recipe's check_budgets, a known domain, valid params).
    `memory(params, context)`: its activations' shape for the GPU memory estimate (None: not a GPU
    training stage); `context` is the model's context length. `leak_sources(summary)`: training data
    its stage.json summary names beside its folder ('split:<name>'). `provenance(info, folder)`: what a
    model folder it wrote is, from its stage.json `info` (a kit.report.run_data.AgentProvenance; None:
    '<stage> output')."""

    names: tuple[str, ...]
    produces: Produces
    # the model folders a MODEL stage writes, the first its default ('@id' reads it; '@id/<folder>' another)
    models: tuple[str, ...] = ("model",)
    references: Mapping[str, Reference] = field(default_factory=dict)
    launchable: bool = False
    training_data: bool = False
    summarizes_run: bool = False
    uses_torch: bool = True
    # parameters a rerun may change and still resume the stage's in-stage checkpoints (beyond the
    # run-time-only ones every stage has, kit.runner.execute.RUN_TIME_ONLY); its trainer checks them
    resumable: tuple[str, ...] = ()
    check: Optional[Callable[[Any, list, bool], list[Problem]]] = None
    memory: Optional[Callable[[dict, int], MemoryUse]] = None
    leak_sources: Optional[Callable[[dict], list[str]]] = None
    report: Optional[ReportPart] = None
    provenance: Optional[Callable[[dict, Path], Any]] = None

    @property
    def name(self) -> str:
        """The stage's name (a module that declares several: its first)."""
        return self.names[0]
