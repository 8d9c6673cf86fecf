"""What a stage notebook calls around its own work: parameters, seeds, W&B, warnings, stage.json.

    st = begin(STAGE, globals())         # STAGE: the notebook's stage name; validate its parameters (st.config), seed, make out_dir
    out = kit.stages.sft.run(st.config, st)   # the stage's work -> its Outputs
    st.warn("...")                       # loud in the notebook, recorded in stage.json, manifest, report
    run = st.wandb()                     # this stage's W&B run (group = run id), or None
    st.finish(out)                       # stage.json: what the runner checks to skip

A notebook opened by hand in JupyterLab runs with its parameters cell's defaults: `begin` then
makes up a run id ("notebook") and writes under runs/notebook/<stage>.

Under `accelerate launch` (a recipe stage's `launch:`, kit/runner/launch.py) every process runs the
same begin / run / finish; only the main process (env RANK 0) starts W&B and writes stage.json
(`st.is_main`), and a stage's run() writes its own files from the main process only.
"""

from __future__ import annotations

from dataclasses import dataclass

import json
import os
import random
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Optional

from kit import metrics
from kit.llm import precision
from kit.runner.lock import FolderLock
from kit.runner.manifest import now, read_json, write_json
from kit.stages import config_class
from kit.stages.base import StageOutputs

BANNER = "!" * 100

# Set by the runner for every stage (where outputs go, the W&B group, ...); a recipe may not set them.
RUNNER_FIELDS = ("stage", "run_id", "stage_id", "arm", "out_dir", "run_dir", "wandb_group", "fingerprint",
                 "resume_tag")


def cell_comment(description: str | None) -> str:
    """A Config field's description as the comment of its line in a notebook's parameters cell.
    papermill gives up on a parameter line holding more than one '=' ("Unable to parse line",
    then "Passed unknown parameter"), so the description's own '=' are written out."""
    text = description or ""
    for a, b in (("<=", "≤"), (">=", "≥"), ("!=", "≠"), (" = ", ": "), ("=", " is ")):
        text = text.replace(a, b)
    return text


class Stage:
    def __init__(self, stage: str, params: dict, runner: dict):
        self.stage = stage
        self.params = params
        self.run_id = runner.get("run_id") or "notebook"
        self.stage_id = runner.get("stage_id") or stage
        self.arm = runner.get("arm")
        self.out_dir = Path(runner.get("out_dir") or Path("runs") / self.run_id / self.stage_id).resolve()
        self.run_dir = Path(runner.get("run_dir") or self.out_dir.parent).resolve()
        self.wandb_group = runner.get("wandb_group") or self.run_id
        self.fingerprint = runner.get("fingerprint")
        self.resume_tag = runner.get("resume_tag")
        self.rank, self.world_size = process_rank()
        self.config: Any = None  # the stage's validated Config (kit/stages), set by begin()
        self.warnings: list[str] = []
        self.started = now()
        self._t0 = time.perf_counter()
        self._wandb: Any = None
        self._wandb_failed = False  # tried once and W&B could not start: not again, not warned twice
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.lock: Optional[FolderLock] = None  # one writer per stage folder (kit/runner/lock.py); released by finish()
        if self.is_main:
            self.lock = FolderLock(self.out_dir, wait=bool(runner.get("lock_wait")),
                                   what_to_do="another --out, or another run id").acquire()

    @property
    def key(self) -> str:
        return f"{self.arm}/{self.stage_id}" if self.arm else self.stage_id

    @property
    def checkpoint_tag(self) -> str:
        """What the stage's in-run checkpoints are tagged with (kit/train/checkpoints.py): the runner's
        resume tag (its parameters, less the run-time-only ones, and which run of each upstream stage
        it reads; not the code: kit/runner/execute.py `resume_tag`), else its fingerprint, or, in a
        notebook run by hand, a hash of its parameters. A rerun resumes only from checkpoints of the
        same tag; the trainer checks the rest (GRPO: kit.train.grpo_config.RESUMABLE_CHANGES)."""
        if self.resume_tag:
            return str(self.resume_tag)
        if self.fingerprint:
            return str(self.fingerprint)
        import hashlib

        text = json.dumps(self.params, sort_keys=True, default=str)
        return "params-" + hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def is_main(self) -> bool:
        """The process that writes stage.json and the stage's files (always, outside accelerate launch)."""
        return self.rank == 0

    # -- loud, recorded warnings ------------------------------------------------------------
    def warn(self, message: str) -> None:
        """Print a banner the reader cannot miss; the text goes to stage.json, the manifest and the report."""
        self.warnings.append(message)
        if not self.is_main:  # the same warning from every process: once, in the launch log
            return
        print(f"\n{BANNER}\nWARNING ({self.key}): {message}\n{BANNER}\n", flush=True)
        try:
            from IPython import get_ipython
            from IPython.display import HTML, display

            if get_ipython() is None:  # a plain process (accelerate launch, a script): the banner is it
                return
            display(HTML(f'<div style="border:3px solid #c00;background:#fee;padding:8px;font-weight:bold">'
                         f'WARNING ({self.key}): {message}</div>'))
        except Exception:  # outside IPython
            pass

    # -- W&B ---------------------------------------------------------------------------------
    def wandb(self, config: Optional[dict] = None):
        """This stage's W&B run in the run's group (offline unless WANDB_MODE says otherwise), or None
        (always None on a process other than the main one of an accelerate launch)."""
        if self._wandb is not None or self._wandb_failed or not self.is_main:
            return self._wandb
        self._wandb, why = metrics.start_wandb("kit", self.wandb_group, self.stage, f"{self.run_id}/{self.key}",
                                               str(self.out_dir), {**self.params, **(config or {})})
        self._wandb_failed = self._wandb is None
        if self._wandb is None and why != "WANDB_MODE=disabled":
            self.warn(f"W&B could not start ({why}); the report still has every figure")
        return self._wandb

    def log(self, section: str, data: dict, step: Optional[int] = None) -> None:
        """Log the numbers of `data` to this stage's W&B run as `<section>/<metric name>` (kit.metrics)."""
        run = self.wandb()
        if run is not None:
            run.log(metrics.wandb_keys(section, data), step=step)

    # -- the end -----------------------------------------------------------------------------
    def finish(self, outputs: Any = None, summary: Optional[dict] = None) -> None:
        """Write stage.json (status complete, outputs, summary, warnings); close the W&B run.
        `outputs`: the stage's Outputs model (kit/stages: its files and its numbers), or a dict
        of output paths with `summary` beside it. Under accelerate launch only the main process
        writes; the others return."""
        if not self.is_main:
            print(f"stage {self.key}: process {self.rank} of {self.world_size} done")
            return
        if isinstance(outputs, StageOutputs):
            outputs, summary = outputs.files, outputs.summary()
        sandbox = sys.modules.get("kit.checkers.sandbox")  # a checker sandbox that ran weak says so here
        for w in sandbox.sandbox_warnings() if sandbox is not None else []:
            if w not in self.warnings:
                self.warn(w)
        outputs = {k: str(v) for k, v in (outputs or {}).items()}
        missing = [k for k, v in outputs.items() if not Path(v).exists()]
        if missing:
            raise FileNotFoundError(f"stage {self.key}: outputs not written: {', '.join(missing)}")
        info = {"status": "complete", "stage": self.stage, "id": self.stage_id, "arm": self.arm,
                "run_id": self.run_id, "fingerprint": self.fingerprint, "params": self.params,
                "outputs": outputs, "summary": summary or {}, "warnings": self.warnings,
                "started": self.started, "finished": now(), "wall_s": round(time.perf_counter() - self._t0, 1),
                "peak_rss_gib": metrics.peak_rss_gib()}
        if self.world_size > 1:
            info["world_size"] = self.world_size  # processes of the accelerate launch (peak RSS: the main one's)
        if self._wandb is not None:
            info["wandb"] = {"id": getattr(self._wandb, "id", None), "dir": str(getattr(self._wandb, "dir", ""))}
            try:
                self._wandb.summary.update({k: v for k, v in (summary or {}).items()
                                            if isinstance(v, (int, float, str))})
                self._wandb.finish()
            except Exception:
                pass
        write_json(self.out_dir / "stage.json", info)
        self.release()
        print(f"stage {self.key}: complete -> {self.out_dir}")

    def interrupted(self) -> None:
        """Ctrl-C (a kernel interrupt) stopped the stage: stage.json says so (a rerun resumes it) and the folder's
        lock is let go; a stage that had completed is left as it is."""
        if not self.is_main:
            return
        old = read_json(self.out_dir / "stage.json") or {}
        if old.get("status") != "complete":
            write_json(self.out_dir / "stage.json", {
                "status": "interrupted", "stage": self.stage, "id": self.stage_id, "arm": self.arm,
                "run_id": self.run_id, "fingerprint": self.fingerprint, "params": self.params,
                "warnings": self.warnings, "started": self.started, "finished": now(),
                "wall_s": round(time.perf_counter() - self._t0, 1), "error": "KeyboardInterrupt (Ctrl-C)"})
        self.release()

    def release(self) -> None:
        """Let go of the stage folder's lock (finish() does; a process that ends lets go anyway)."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def process_rank() -> tuple[int, int]:
    """(rank, world size) of this process under accelerate launch / torchrun (env RANK and
    WORLD_SIZE), (0, 1) in a notebook or any plain process."""
    try:
        return int(os.environ.get("RANK") or 0), int(os.environ.get("WORLD_SIZE") or 1)
    except ValueError:
        return 0, 1


KV_CACHE_ENV = "KIT_KV_CACHE_GIB"  # kit.llm.hf reads the same name


def process_settings(params: dict, say: bool = True) -> None:
    """The stage params that act through this process's environment, read by every HFBackend and trainer it
    builds: kv_cache_gib (kit/llm/hf.py) and cpu_bf16 (kit/llm/precision.py). Called by `begin` (a stage's
    kernel or process) and by the `kit eval` / `kit synthesize` commands."""
    if params.get("kv_cache_gib"):
        os.environ[KV_CACHE_ENV] = str(params["kv_cache_gib"])
    if "cpu_bf16" in params:
        os.environ[precision.ENV] = "1" if params["cpu_bf16"] else "0"
        if params["cpu_bf16"] and say:
            print(precision.describe())


def begin(stage: str, namespace: dict) -> Stage:
    """Validate the notebook's parameters (from `namespace`, its globals()) against the stage's
    schema, set seeds and torch threads, and make the stage's folder. `stage` is the notebook's
    own stage; the `stage` parameter `kit run` injects overrides it within the same module
    (notebooks/sft.py runs sft_user or sft_agent)."""
    from kit.stages import MODULES, contract

    given = namespace.get("stage")
    if given and given != stage:
        if MODULES.get(given) != MODULES.get(stage):
            raise ValueError(f"stage {given!r} cannot run in the notebook of {stage!r} "
                             f"(kit/stages/{MODULES.get(stage, stage)}.py)")
        stage = given
    schema = config_class(stage)
    params = schema.model_validate({k: namespace[k] for k in schema.model_fields if k in namespace}).model_dump()
    runner = {k: namespace.get(k) for k in RUNNER_FIELDS}
    st = Stage(stage, params, runner)
    st.config = schema.model_validate(params)
    seed = params.get("seed", 0)
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:  # pragma: no cover
        pass
    if params.get("threads") or contract(stage).uses_torch:
        import torch

        torch.manual_seed(seed)
        if params.get("threads"):
            torch.set_num_threads(int(params["threads"]))
    os.environ.setdefault("WANDB_MODE", "offline")
    process_settings(params, say=st.is_main)
    warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm.auto in a kernel without ipywidgets
    _record_interrupts(st)
    if st.is_main:
        print(f"stage {st.key} ({stage}) of run {st.run_id} -> {st.out_dir}")
        print(json.dumps(params, indent=1, default=str))
    else:
        print(f"stage {st.key} ({stage}): process {st.rank} of {st.world_size}")
    return st


def _record_interrupts(st: Stage) -> None:
    """In a notebook kernel: an interrupt (Ctrl-C, JupyterLab's stop button) while the stage runs is recorded
    (`Stage.interrupted`) before IPython shows it as usual. Elsewhere a KeyboardInterrupt ends the process,
    which lets go of the lock; `kit run` records the stage as interrupted (kit/runner/execute.py)."""
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "set_custom_exc"):
        return

    def on_interrupt(shell, etype, value, tb, tb_offset=None):
        st.interrupted()
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)

    shell.set_custom_exc((KeyboardInterrupt,), on_interrupt)


@dataclass(frozen=True)
class SplitUse:
    """Which split a stage's tasks came from: `used` is the split whose tasks it got ("default": the
    domain's default set, when the one `asked` for does not exist); printed for people."""

    asked: Optional[str]
    used: str

    def __str__(self) -> str:
        return f"split '{self.used}'" if self.used == self.asked else f"default set, no split {self.asked!r}"


def split_tasks(domain: Any, split: Optional[str], st: Optional[Stage] = None, purpose: str = "") -> tuple[list, SplitUse]:
    """(tasks, which split they are) of a split; a domain without that split (mock has only its default
    set) gives its default set, flagged through `st.warn`: those are also the evaluation tasks."""
    try:
        tasks = domain.tasks(split)
        if tasks:
            return tasks, SplitUse(split, split)
    except Exception:
        pass
    tasks = domain.tasks("default")
    if st is not None:
        st.warn(f"domain '{domain.name}' has no split '{split}': {purpose} uses its default task set "
                f"({len(tasks)} tasks), which is also what `evaluate` scores by default (train/test overlap)")
    return tasks, SplitUse(split, "default")
