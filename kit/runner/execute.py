"""`kit run RECIPE`: execute a validated recipe's stage notebooks with papermill, resumably.

    result = run_recipe("recipes/quickstart-cpu.yaml")          # runs/<run-id>/, reports/<run-id>/

For each planned stage, in order:
  1. resolve `@id` references to the producing stage's folder (absolute paths);
  2. fingerprint the stage: its stage name, notebook, the kit code the notebook reaches
     (kit/runner/codehash.py), resolved parameters, and the fingerprints of the stages it reads
     (so a changed upstream stage reruns everything below it);
  3. skip it when its folder holds a `stage.json` with status "complete", the same fingerprint,
     and every output it lists still exists ("resume after a crash");
     in an ablation, a stage identical to one another arm already ran is shared, not rerun, and so is a
     complete stage of another run named by `share_from` (`kit run --share-from RUN_DIR`; `kit ablations`
     passes the batch's other runs: the five ablations' common engine and SFT stages run once);
  4. else execute notebooks/<module>.py (jupytext; an .ipynb where no .py) with papermill into <stage folder>/<id>.ipynb, cell
     output streamed to the terminal. A failing cell stops the chain: the executed notebook keeps
     the traceback, manifest.json says which stage failed and why, and `kit run` exits 1. Run the
     same command again and it resumes at that stage. A stage that had completed with other
     inputs (a parameter, its notebook, its kit code or an upstream stage changed) is first moved aside to
     <stage>.replaced-<old fingerprint>: a rerun never overwrites finished results in place.
     A training stage with `launch:` in the recipe runs instead under `accelerate launch` (N processes
     of kit/runner/launch.py calling the same kit.stages.<module>.run), its output in <stage>/<id>.log
     (not streamed: the console gets the one-line messages, and the log's tail on a failure);
     stage.json, outputs and resume are the same as for a notebook.

Servers: the OpenAI-compatible servers a recipe declares (`servers:`) are started before the first stage
that executes and uses them (a server of a stage's model as soon as that stage completes) and stopped after
the last one, and on any exit (kit/runner/servers.py; logs in runs/<run-id>/servers/).

How it is kept: `Runner.run` walks the plan and `Runner._stage` takes one stage top to bottom; the
stage's line of the manifest is a typed kit.runner.manifest.StageEntry held in a `RunBook` (written as
manifest.json's plain mapping after every change), and the stage's code runs through an `Executor`:
`NotebookExecutor` (papermill) or `LaunchExecutor` (accelerate launch), which differ only in how they
execute, what the manifest and stage.json record of it, and how they fail (`ExecutionFailed`).

The kernel is this interpreter: a `python3` kernelspec pointing at sys.executable is written
under runs/<run-id>/.jupyter and put first on JUPYTER_PATH, so papermill never picks up
another Python's kernel from ~/.local/share/jupyter or /usr/share/jupyter.

W&B: every stage logs to the run's group (project "kit", group = run id). WANDB_MODE defaults to
"offline" (nothing leaves the machine; `wandb sync runs/<run-id>/**/wandb/offline-run-*` later);
a WANDB_MODE set by the user is respected.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Protocol

from kit.errors import DiskError, disk_error, disk_error_in
from kit.runner import manifest as mf
from kit.runner.attempts import Attempts
from kit.runner.codehash import KIT_DIR, code_fingerprint, notebook_imports
from kit.runner.lock import FolderBusy, FolderLock
from kit.runner.recipe import PlannedStage, Recipe, load_recipe
from kit.runner.servers import ServerFailed, Servers, name_models, name_servers
from kit.sources import parse_source
from kit.stages import contract, summarizes_run
from kit.stages.contract import Produces

NOTEBOOKS_DIR = Path(__file__).resolve().parents[2] / "notebooks"
WANDB_PROJECT = "kit"


class StageFailed(RuntimeError):
    """A stage's notebook (or launched processes) failed. `user_error`: its exception was a
    kit.errors.UserError (a missing folder, an unreachable endpoint, ...): `kit run` exits 2, as for
    any other user error. `notebook`: the executed notebook, or a launched stage's log."""

    def __init__(self, key: str, notebook: Path, message: str, user_error: bool = False, tail: str = ""):
        self.key, self.notebook, self.user_error = key, notebook, user_error
        what = "log" if Path(notebook).suffix == ".log" else "executed notebook"
        tail = "".join(f"\n  | {line}" for line in tail.splitlines()) if tail else ""
        super().__init__(f"stage '{key}' failed: {message}{tail}\n  {what} with the traceback: {notebook}\n"
                         f"  fix the cause and run the same command again: it resumes at this stage")


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    report_dir: Optional[Path]
    manifest: dict
    executed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    shared: list[str] = field(default_factory=list)
    failed: Optional[str] = None
    wall_s: float = 0.0

    @property
    def report_html(self) -> Optional[Path]:
        return self.report_dir / "index.html" if self.report_dir else None


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def notebook_path(stage: str, notebooks_dir: Optional[Path] = None) -> Path:
    """notebooks/<module>.py (jupytext percent format, the source of truth), else <module>.ipynb: one
    notebook per stage module (sft_user and sft_agent share notebooks/sft.py; `stage` tells it which)."""
    from kit.stages import MODULES

    where = Path(notebooks_dir or NOTEBOOKS_DIR)
    name = MODULES.get(stage, stage)
    script = where / f"{name}.py"
    return script if script.exists() else where / f"{name}.ipynb"


def load_notebook(path: Path) -> Any:
    """What papermill executes: a jupytext .py read as a notebook, or an .ipynb's path."""
    if path.suffix == ".py":
        import jupytext

        return jupytext.read(path)
    return str(path)


def install_kernelspec(where: Path) -> Path:
    """A `python3` kernelspec running this interpreter, first on JUPYTER_PATH (see module doc)."""
    kdir = where / "kernels" / "python3"
    kdir.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": f"Python 3 (kit: {sys.prefix})", "language": "python",
            "metadata": {"debugger": False}}
    (kdir / "kernel.json").write_text(json.dumps(spec, indent=1))
    paths = [str(where)] + [p for p in os.environ.get("JUPYTER_PATH", "").split(os.pathsep) if p and p != str(where)]
    os.environ["JUPYTER_PATH"] = os.pathsep.join(paths)
    return kdir


def _resolve(ps: PlannedStage, dirs: dict[str, Path], kinds: dict[str, str]) -> dict[str, Any]:
    """Parameters with references replaced by absolute paths: a model stage's `model/` folder,
    a data stage's folder."""
    params = dict(ps.params)
    for name, key in ps.refs.items():
        d = dirs[key]
        params[name] = str(d / _ref_folder(ps, name, kinds[key])) \
            if contract(kinds[key]).produces == Produces.MODEL else str(d)
    return params


def _ref_folder(ps: PlannedStage, name: str, kind: str) -> str:
    """The model folder reference `name` reads: '@id/<folder>' names it, '@id' the stage's default."""
    value = ps.params.get(name)
    src = parse_source(value) if isinstance(value, str) else None
    return (getattr(src, "output", None) or contract(kind).models[0])


def _ref_token(ps: PlannedStage, name: str, upstream: str) -> tuple:
    """A reference in a fingerprint or resume tag: the upstream run, and the folder when not the default."""
    value = ps.params.get(name)
    src = parse_source(value) if isinstance(value, str) else None
    output = getattr(src, "output", None)
    return ("@", upstream) if output is None else ("@", upstream, output)


# parameters a stage's in-stage checkpoints do not depend on (kit run may change them and still resume;
# kit.train.grpo_config.RESUMABLE_CHANGES is the trainer's own list, checked when it resumes)
RUN_TIME_ONLY = frozenset({"threads", "kv_cache_gib", "save_every", "keep_checkpoints", "print_metrics"})


def stage_complete(stage_dir: Path, fingerprint: str) -> bool:
    info = mf.read_json(stage_dir / "stage.json")
    if not info or info.get("status") != "complete" or info.get("fingerprint") != fingerprint:
        return False
    return _outputs_exist(info)


def _outputs_exist(info: dict) -> bool:
    """Every output file a stage.json names is still there."""
    return all(Path(p).exists() for p in (info.get("outputs") or {}).values() if isinstance(p, str))


def _keep(sdir: Path, fingerprint: str) -> bool:
    """`kit run --keep KEY`: a complete stage whose fingerprint changed (code it reaches, parameters
    or upstream) is restamped with the new one, its old fingerprints listed in stage.json's
    `kept_from`, so the run (and later reruns) reuse it. False when it is not complete."""
    info = mf.read_json(sdir / "stage.json")
    if not info or info.get("status") != "complete" or not _outputs_exist(info):
        return False
    info["kept_from"] = [*(info.get("kept_from") or []), info.get("fingerprint")]
    info["fingerprint"] = fingerprint
    mf.write_json(sdir / "stage.json", info)
    return True


def _set_aside(sdir: Path, fingerprint: str) -> Path:
    """Move a complete stage folder out of the way of its rerun (nothing is overwritten in place):
    <stage>.replaced-<old fingerprint>[-N] beside it."""
    kept = sdir.with_name(f"{sdir.name}.replaced-{fingerprint[:12]}")
    i = 1
    while kept.exists():
        i += 1
        kept = sdir.with_name(f"{sdir.name}.replaced-{fingerprint[:12]}-{i}")
    sdir.rename(kept)
    return kept


class Runner:
    def __init__(self, recipe: Recipe, run_id: Optional[str] = None, runs_dir: str | Path = "runs",
                 reports_dir: str | Path = "reports", notebooks_dir: Optional[Path] = None,
                 stream: Any = None, progress: bool = False, force: tuple[str, ...] = (),
                 code_root: Optional[Path] = None, keep: tuple[str, ...] = (),
                 share_from: tuple[str | Path, ...] = (), wait: bool = False):
        self.recipe = recipe
        self.wait = wait  # another process holds the run folder: wait for it (else FolderBusy at once)
        self.code_root = Path(code_root).resolve() if code_root else KIT_DIR
        self.run_id = run_id or recipe.name
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$", self.run_id):
            raise ValueError(f"run id '{self.run_id}' may hold only letters, digits, '.', '_' and '-'")
        self.run_dir = Path(runs_dir).resolve() / self.run_id
        self.reports_dir = Path(reports_dir).resolve()
        self.notebooks_dir = Path(notebooks_dir).resolve() if notebooks_dir else NOTEBOOKS_DIR
        self.stream = stream if stream is not None else sys.stdout
        self.progress = progress
        self.force = set(force)
        self.keep = set(keep)  # complete stages reused although their fingerprint changed (kept_from)
        both = self.force & self.keep
        if both:
            raise ValueError(f"stage(s) {sorted(both)} both forced and kept: choose one")
        self.manifest_path = self.run_dir / "manifest.json"
        self._servers: Optional[Servers] = None
        # other runs' complete stages by fingerprint (`share_from`): an identical stage here shares their folder
        self.share_from = [Path(d).resolve() for d in share_from if Path(d).resolve() != self.run_dir]
        self._foreign: Optional[dict[str, Path]] = None

    # -- helpers ------------------------------------------------------------------------------
    def say(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def stage_dir(self, ps: PlannedStage) -> Path:
        return self.run_dir / ps.key

    def _resume_tag(self, ps: PlannedStage, params: dict, ran: "_Upstream") -> str:
        """What the stage's in-stage checkpoints are tagged with: its key, its parameters less the
        run-time-only ones (RUN_TIME_ONLY: threads, memory caps, checkpoint cadence), and for each reference
        which run of the upstream stage it reads (that stage.json's `started`); the parameters its
        contract lists as `resumable` left out too. Unlike the
        fingerprint, not the code: a stage killed by a bug or by memory resumes after the fix
        (same parameters), while a rerun of an upstream stage starts it afresh. The trainer checks
        the rest when it resumes (GRPO: its config against RESUMABLE_CHANGES)."""
        def run_of(key: str) -> str:
            info = mf.read_json(ran.dirs[key] / "stage.json") or {}
            return f"{key}@{info.get('started') or ran.fps[key]}"

        body = {"key": ps.key, "stage": ps.stage,
                "params": {k: (_ref_token(ps, k, run_of(ps.refs[k])) if k in ps.refs else v) for k, v in params.items()
                           if k not in RUN_TIME_ONLY and k not in contract(ps.stage).resumable}}
        if ps.servers:
            body["servers"] = self._server_tokens(ps, ran.fps)
        return "resume-" + _sha(json.dumps(body, sort_keys=True, default=str))[:16]

    def foreign_stages(self) -> dict[str, Path]:
        """{fingerprint: folder} of every complete stage (stage.json complete, outputs present) in the
        `share_from` runs; a stage set aside there (<stage>.replaced-*) is not offered."""
        if self._foreign is None:
            self._foreign = {}
            for run in self.share_from:
                for sj in sorted(run.rglob("stage.json")):
                    sdir = sj.parent
                    if ".replaced-" in str(sdir.relative_to(run)):
                        continue
                    fp = (mf.read_json(sj) or {}).get("fingerprint")
                    if fp and fp not in self._foreign and stage_complete(sdir, fp):
                        self._foreign[fp] = sdir
        return self._foreign

    def _where(self, sdir: Path) -> str:
        """A stage folder as the console names it: relative to this run, or to the runs folder when another run's."""
        for root in (self.run_dir, self.run_dir.parent):
            if sdir.is_relative_to(root):
                return str(sdir.relative_to(root))
        return str(sdir)

    def fingerprints(self) -> dict[str, str]:
        """Each planned stage's fingerprint, computed without running anything (what resume and `share_from`
        compare; a server's model names are not resolved here)."""
        dirs: dict[str, Path] = {}
        fps: dict[str, str] = {}
        kinds = {ps.key: ps.stage for ps in self.recipe.plan}
        for ps in self.recipe.plan:
            dirs[ps.key] = self.stage_dir(ps)
            fps[ps.key] = self._fingerprint(ps, _resolve(ps, dirs, kinds), fps)
        return fps

    def _fingerprint(self, ps: PlannedStage, params: dict, fps: dict[str, str]) -> str:
        nb = notebook_path(ps.stage, self.notebooks_dir)
        text = nb.read_text(encoding="utf-8") if nb.exists() else None
        code = notebook_imports(text) if text is not None else None
        if ps.launch and code is not None:  # run by kit/runner/launch.py: its code too
            code = set(code) | {"kit.runner.launch"}
        body = {"stage": ps.stage, "notebook": _sha(text) if text is not None else None,
                # the kit code the notebook reaches (kit/runner/codehash.py): changed code reruns the stage
                "code": code_fingerprint(code, self.code_root) if code is not None else None,
                "params": {k: (_ref_token(ps, k, fps[ps.refs[k]]) if k in ps.refs else v) for k, v in params.items()}}
        if summarizes_run(ps.stage):
            body["upstream"] = sorted(fps.values())
        if ps.servers:  # the models behind the servers it samples (a retrained @sft_user reruns its users)
            body["servers"] = self._server_tokens(ps, fps)
        if ps.launch:  # how it is launched (processes, accelerate config file's content) reruns it too
            cf = ps.launch.get("config_file")
            body["launch"] = {**ps.launch, "config_file": _sha(Path(cf).read_text(encoding="utf-8"))
                              if cf and Path(cf).is_file() else cf}
        return _sha(json.dumps(body, sort_keys=True, default=str))[:16]

    def _base_manifest(self) -> dict:
        old = mf.read_json(self.manifest_path) or {}
        r = self.recipe
        env = mf.environment()
        return {
            "run_id": self.run_id,
            "created": old.get("created") or mf.now(),
            "updated": mf.now(),
            "status": "running",
            "recipe": {"path": str(r.path), "name": r.name, "sha256": _sha(r.text), "overrides": r.overrides,
                       "text": r.text, "parsed": r.spec.model_dump(),
                       "hardware": r.spec.model_dump()["hardware"], "budget_minutes": r.spec.budget_minutes},
            **env,
            "wandb": {"mode": os.environ.get("WANDB_MODE"), "project": WANDB_PROJECT, "group": self.run_id,
                      "sync": f"wandb sync {self.run_dir}/**/wandb/offline-run-*"},
            "run_dir": str(self.run_dir),
            "report_dir": str(self.reports_dir / self.run_id),
            "seeds": {ps.key: ps.params.get("seed") for ps in r.plan},
            "models": old.get("models", {}),
            "stages": [],
            "history": old.get("history", []),
        }

    def _executor(self, ps: PlannedStage) -> "Executor":
        return LaunchExecutor(self.say) if ps.launch else NotebookExecutor(self.say, self.stream, self.progress)

    def _server_keeper(self, book: "RunBook", ran: "_Upstream") -> Optional[Servers]:
        """The run's servers (kit/runner/servers.py), their state kept in manifest.json's `servers`."""
        if not any(sp.users for sp in self.recipe.servers):
            return None
        book.fields["servers"] = {}

        def folder(key: str, output: Optional[str]) -> Path:
            return ran.dirs[key] / (output or contract(ran.kinds[key]).models[0])

        def record(sid: str, fields: dict) -> None:
            book.fields["servers"].setdefault(sid, {}).update(fields)
            book.save()

        return Servers(self.recipe.servers, self.run_dir, self.say, folder, record)

    def _server_tokens(self, ps: PlannedStage, fps: dict[str, str]) -> dict:
        """For a fingerprint: what each server the stage uses serves (a stage's model: that stage's run)."""
        by_id = {sp.id: sp for sp in self.recipe.servers}
        out = {}
        for name, sid in sorted(ps.servers.items()):
            sp = by_id[sid]
            src = sp.spec.source
            out[name] = ("@", fps.get(sp.source, sp.source), src.output) if src is not None else sp.spec.model
        return out

    def _entry(self, ps: PlannedStage, fp: str, params: dict) -> mf.StageEntry:
        return mf.StageEntry(key=ps.key, stage=ps.stage, id=ps.id, arm=ps.arm, fingerprint=fp,
                             notebook=str(notebook_path(ps.stage, self.notebooks_dir)), params=params,
                             references=dict(ps.refs))

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> RunResult:
        """Every stage of the plan, holding the run folder's lock throughout (one writer: kit/runner/lock.py)."""
        with FolderLock(self.run_dir, wait=self.wait, say=self.say,
                        what_to_do="another run id: --run-id NAME, or --new"):
            return self._run()

    def _run(self) -> RunResult:
        t0 = time.perf_counter()
        for k, v in RUN_ENVIRONMENT.items():
            os.environ.setdefault(k, v)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        install_kernelspec(self.run_dir / ".jupyter")
        book = RunBook(self.manifest_path, self._base_manifest())
        book.fields["history"].append({"started": mf.now(), "argv": sys.argv[1:], "git": book.fields["git"].get("commit")})
        book.save()
        res = RunResult(self.run_id, self.run_dir, None, book.as_dict())
        ran = _Upstream(kinds={ps.key: ps.stage for ps in self.recipe.plan})
        plan = self.recipe.plan
        self.say(f"[kit run] {self.recipe.name} -> {self.run_dir}  ({len(plan)} stages; W&B "
                 f"{os.environ['WANDB_MODE']}, group {self.run_id})")
        try:
            self._servers = self._server_keeper(book, ran)
            with _servers_stopped_on_exit(self._servers):
                for n, ps in enumerate(plan, 1):
                    outcome = self._stage(ps, f"{n}/{len(plan)}", book, ran, res)
                    getattr(res, outcome).append(ps.key)
                    if self._servers is not None:
                        self._servers.after(ps.key, executed=outcome == "executed")
        except BaseException as e:  # outside a stage (a server's key, Ctrl-C between stages): say so, not "running"
            if book.fields.get("status") == "running":
                book.fields["status"] = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
                book.fields["error"] = f"{type(e).__name__}: {e}"[:2000]
                with contextlib.suppress(Exception):
                    book.save()
            raise
        book.fields["status"] = "complete"
        book.fields.pop("failed_stage", None)
        book.fields["history"][-1]["finished"] = mf.now()
        book.fields["wall_s_last_invocation"] = round(time.perf_counter() - t0, 1)
        book.save()
        res.manifest, res.wall_s = book.as_dict(), time.perf_counter() - t0
        if res.report_dir:
            mf.write_json(res.report_dir / "manifest.json", res.manifest)
        return res

    def _stage(self, ps: PlannedStage, where: str, book: "RunBook", ran: "_Upstream", res: RunResult) -> str:
        """One planned stage, top to bottom: shared with another arm, skipped as complete, or executed
        (StageFailed when it fails). Returns which: "shared", "skipped" or "executed"."""
        params = _resolve(ps, ran.dirs, ran.kinds)
        if ps.servers and self._servers is not None:  # the model it asks an unpinned server for, by name
            params = name_models(params, ps.servers, {sp.id: sp.spec for sp in self.recipe.servers},
                                 lambda spec: self._servers.model(spec.id))
        fp = self._fingerprint(ps, params, ran.fps)
        sdir = self.stage_dir(ps)
        other = None
        if ps.key not in self.force:
            # an identical stage in another arm already ran, or (share_from) complete in another run while
            # this run's own folder does not hold it complete
            other = ran.by_fp.get(fp) or (self.foreign_stages().get(fp) if self.share_from and not
                                          stage_complete(sdir, fp) and not summarizes_run(ps.stage) else None)
        if other is not None:
            sdir = other
            ran.dirs[ps.key], ran.fps[ps.key] = sdir, fp
            info = mf.read_json(sdir / "stage.json") or {}
            entry = book.add(self._entry(ps, fp, params).set(status="shared", shared_with=str(sdir),
                                                             executed_notebook=info.get("executed_notebook")))
            entry.results(info)
            if info.get("log"):  # launched (accelerate): its log
                entry.log = info["log"]
            self.say(f"[kit run] {where} {ps.key}: identical to {self._where(sdir)}, shared")
            return "shared"
        ran.dirs[ps.key], ran.fps[ps.key], ran.by_fp[fp] = sdir, fp, sdir
        if summarizes_run(ps.stage):
            params["report_dir"] = params.get("report_dir") or str(self.reports_dir / self.run_id)
            res.report_dir = Path(params["report_dir"])
        executor = self._executor(ps)
        job = StageJob(ps, where, sdir, fp, params={**params, "stage": ps.stage, "run_id": self.run_id,
                                                     "stage_id": ps.id, "arm": ps.arm, "out_dir": str(sdir),
                                                     "run_dir": str(self.run_dir), "wandb_group": self.run_id,
                                                     "fingerprint": fp, "resume_tag": self._resume_tag(ps, params, ran)},
                       notebook=notebook_path(ps.stage, self.notebooks_dir))
        entry = self._entry(ps, fp, params).set(**executor.entry_fields(job))
        book.record_models(params, ps)
        if ps.key in self.keep and not stage_complete(sdir, fp) and _keep(sdir, fp):
            self.say(f"[kit run] {where} {ps.key}: kept (--keep) although its fingerprint changed to {fp}")
        if ps.key not in self.force and stage_complete(sdir, fp):
            info = mf.read_json(sdir / "stage.json") or {}
            if info.get("kept_from"):
                entry.kept_from = list(info["kept_from"])
            book.add(entry.set(status="complete", skipped=True))
            entry.results(info, "started", "finished", "wall_s", "peak_rss_gib")
            book.save()
            self.say(f"[kit run] {where} {ps.key}: complete (fingerprint {fp}), skipped")
            return "skipped"
        if ps.servers and self._servers is not None:
            try:
                self._servers.ready(ps)
            except ServerFailed as e:
                book.fail(book.add(entry.set(status="failed", finished=mf.now(), error=str(e)[:2000])))
                raise
        try:  # a notebook run by hand, or a kernel a killed `kit run` left behind, still writing there
            FolderLock(sdir, say=self.say, what_to_do=f"stop it; then rerun to resume {ps.key}").acquire().release()
        except FolderBusy as e:
            book.fail(book.add(entry.set(status="failed", finished=mf.now(), error=str(e)[:2000])))
            raise
        old = mf.read_json(sdir / "stage.json")
        if old and old.get("status") == "complete":  # parameters, notebook or upstream changed
            entry.replaced = str(_set_aside(sdir, str(old.get("fingerprint") or "unknown")))
            self.say(f"[kit run] {where} {ps.key}: inputs changed since it completed; its outputs "
                     f"are kept in {Path(entry.replaced).relative_to(self.run_dir)}")
        sdir.mkdir(parents=True, exist_ok=True)
        attempts = Attempts(sdir)  # a stage resumed in place: the earlier attempts' time is counted too
        attempts.begin()
        book.add(entry.set(status="running", started=mf.now()))
        book.save()
        t1 = time.perf_counter()
        try:
            executor.execute(job)
        except BaseException as e:  # ExecutionFailed, PapermillExecutionError, KeyboardInterrupt, a dead kernel
            failure = e if isinstance(e, ExecutionFailed) else ExecutionFailed.of(e, job)
            how = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"  # Ctrl-C / SIGTERM: not the stage's fault
            entry.set(status=how, finished=mf.now(), wall_s=round(time.perf_counter() - t1, 1),
                      error=failure.message[:2000])
            # on a full or read-only disk these records may not be written: the failure is told all the same
            with contextlib.suppress(DiskError):
                attempts.end(entry.wall_s, how)
            with contextlib.suppress(DiskError):
                mf.write_json(sdir / "stage.json", {"status": how, "stage": ps.stage, "id": ps.id, "fingerprint": fp,
                                                     "error": failure.message[:2000], executor.output_key: str(job.out),
                                                     **failure.record, "finished": mf.now()})
            with contextlib.suppress(DiskError):
                book.fail(entry)
            if isinstance(e, KeyboardInterrupt):
                self.say(f"[kit run] {where} {ps.key}: interrupted after {entry.wall_s:.0f}s; rerun the same command "
                         "to resume")
                raise
            headline = name_servers(failure.headline, ps.servers, self.recipe.servers, self.run_dir / "servers")
            raise StageFailed(ps.key, failure.log or job.out, headline, failure.user_error, failure.tail) from None
        info = mf.read_json(sdir / "stage.json") or {}
        wall = round(time.perf_counter() - t1, 1)
        if info.get("status") != "complete" or info.get("fingerprint") != fp:
            attempts.end(wall, "failed")
            book.fail(entry.set(status="failed", error=executor.no_stage_json, wall_s=wall))
            raise StageFailed(ps.key, job.out, executor.no_stage_json)
        info["wall_s"] = wall
        attempts.end(wall, "complete")
        info.update(attempts.fields())
        executor.complete(job, info)
        mf.write_json(sdir / "stage.json", info)
        entry.set(status="complete", finished=mf.now(), wall_s=wall, peak_rss_gib=info.get("peak_rss_gib"))
        entry.results(info)
        for w in info.get("warnings") or []:
            self.say(f"[kit run] WARNING {ps.key}: {w}")
        if contract(ps.stage).produces == Produces.MODEL and (sdir / "model").is_dir():
            book.record_model(str(sdir / "model"))
        book.save()
        self.say(f"[kit run] {where} {ps.key}: complete in {wall:.0f}s")
        return "executed"


@contextlib.contextmanager
def _servers_stopped_on_exit(servers: Optional[Servers]):
    """Every server the run started is stopped however the run ends: completion, a failing stage,
    Ctrl-C, or SIGTERM (a scheduler's stop: turned into KeyboardInterrupt while the run goes, so the stage
    is recorded as interrupted)."""
    try:
        with sigterm_interrupts():
            yield
    finally:
        if servers is not None:
            servers.close()


@contextlib.contextmanager
def sigterm_interrupts():
    """SIGTERM raises KeyboardInterrupt inside the block (main thread only), as Ctrl-C does; restored after."""
    previous = None
    if threading.current_thread() is threading.main_thread():
        def on_term(signum, frame):
            raise KeyboardInterrupt(f"signal {signum}")

        previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


# what every stage process inherits unless the user set it
RUN_ENVIRONMENT = {"WANDB_MODE": "offline", "WANDB_SILENT": "true", "PYDEVD_DISABLE_FILE_VALIDATION": "1",
                   "TOKENIZERS_PARALLELISM": "false"}


@dataclass
class _Upstream:
    """What the stages run so far left for the next: each key's folder and fingerprint, the folder of
    each fingerprint (an identical stage in another arm is shared), and each key's stage name."""

    kinds: dict[str, str]
    dirs: dict[str, Path] = field(default_factory=dict)
    fps: dict[str, str] = field(default_factory=dict)
    by_fp: dict[str, Path] = field(default_factory=dict)


class RunBook:
    """manifest.json as the runner keeps it: the run's fields (`fields`, kit/runner/manifest.py) and
    one typed StageEntry per stage met so far; `save` writes them as the file's plain mapping."""

    def __init__(self, path: Path, fields: dict):
        self.path, self.fields = path, fields
        self.stages: list[mf.StageEntry] = []

    def add(self, entry: mf.StageEntry) -> mf.StageEntry:
        self.stages.append(entry)
        return entry

    def as_dict(self) -> dict:
        out = dict(self.fields)
        out["stages"] = [e.to_json() for e in self.stages]
        return out

    def save(self) -> None:
        self.fields["updated"] = mf.now()
        mf.write_json(self.path, self.as_dict())

    def fail(self, entry: mf.StageEntry) -> None:
        """The run stops at `entry`'s stage (its fields already say how: failed, or interrupted)."""
        self.fields["status"] = "interrupted" if entry.status == "interrupted" else "failed"
        self.fields["failed_stage"] = entry.key
        self.save()

    def record_model(self, spec: str) -> None:
        try:
            self.fields["models"][spec] = mf.describe_model(spec)
        except Exception as e:  # a manifest detail must never stop a run
            self.fields["models"][spec] = {"error": f"{type(e).__name__}: {e}"}

    def record_models(self, params: dict, ps: PlannedStage) -> None:
        """Every model a stage's parameters name (its contract's model references)."""
        for name, ref in contract(ps.stage).references.items():
            v = params.get(name)
            if ref.kind == Produces.MODEL and isinstance(v, str):
                self.record_model(v)


# ----- executors: how a stage's code runs ----------------------------------------------------------


@dataclass
class StageJob:
    """One stage execution as an executor sees it: `params` is what the stage's code gets (the resolved
    parameters and the runner's fields), `where` its place in the plan ("3/7") for messages."""

    ps: PlannedStage
    where: str
    folder: Path
    fingerprint: str
    params: dict
    notebook: Path

    @property
    def out(self) -> Path:
        """The executed notebook, or a launched stage's log."""
        return self.folder / f"{self.ps.id}.{'log' if self.ps.launch else 'ipynb'}"


class ExecutionFailed(Exception):
    """How an execution failed: `message` (manifest and stage.json), `headline` (StageFailed's), whether
    the cause is a user error, the log's `tail`, what else stage.json records (`record`), and the log
    that tells why when it is not the job's own (`log`: another machine rank's)."""

    def __init__(self, message: str, headline: str, user_error: bool = False, tail: str = "",
                 record: Optional[dict] = None, log: Optional[Path] = None):
        super().__init__(message)
        self.message, self.headline, self.user_error, self.tail = message, headline, user_error, tail
        self.record, self.log = record or {}, log

    @classmethod
    def of(cls, e: BaseException, job: StageJob) -> "ExecutionFailed":
        """An exception the execution raised (a failing notebook cell's: papermill's)."""
        msg = (f"{getattr(e, 'ename', type(e).__name__)}: {getattr(e, 'evalue', e)}"
               if e.__class__.__name__ == "PapermillExecutionError" else f"{type(e).__name__}: {e}")
        # a write the disk refused, in the stage (an OSError's text: torch, safetensors, open) or here
        # (papermill writing the executed notebook): a user error naming the file, else the stage folder
        disk = (disk_error_in(str(getattr(e, "evalue", "")), job.folder, writing=False)
                if e.__class__.__name__ == "PapermillExecutionError" and getattr(e, "ename", None) != "DiskError"
                else disk_error(e, writing=False, where=job.out))
        if disk is not None and not isinstance(e, DiskError):
            msg = f"DiskError: {disk}"
            if disk.filename == str(job.out):  # the stage's own error, if it had one, is lost with the notebook
                msg += " (the executed notebook is cut short: the stage's output is in the console above)"
        if not job.out.exists():
            msg += " (no notebook was written: " + "".join(traceback.format_exception_only(e)).strip() + ")"
        return cls(msg, msg.splitlines()[0] if msg else "error",
                   user_error=disk is not None or getattr(e, "ename", None) in stage_user_error_names())


class Executor(Protocol):
    """How a stage's code runs in its folder: `execute(job)` returns when the stage ran (it wrote
    stage.json) or raises (ExecutionFailed, or what the execution raised)."""

    output_key: str      # stage.json's key of the job's `out`
    no_stage_json: str   # the error when it ran without writing stage.json

    def entry_fields(self, job: StageJob) -> dict: ...

    def execute(self, job: StageJob) -> None: ...

    def complete(self, job: StageJob, info: dict) -> None:
        """Add to the stage.json the stage wrote (`info`) what the runner knows of its execution."""


class NotebookExecutor:
    """The stage's notebook (notebooks/<module>.py) under papermill, cell output streamed."""

    output_key = "executed_notebook"
    no_stage_json = "the notebook ran to its end but did not write stage.json (its last cell calls st.finish())"

    def __init__(self, say: Callable[[str], None], stream: Any, progress: bool):
        self.say, self.stream, self.progress = say, stream, progress

    def entry_fields(self, job: StageJob) -> dict:
        return {"executed_notebook": str(job.out)}

    def execute(self, job: StageJob) -> None:
        import papermill as pm

        self.say(f"[kit run] {job.where} {job.ps.key}: executing {job.notebook} -> {job.out}")
        pm.execute_notebook(
            load_notebook(job.notebook), str(job.out), parameters=job.params,
            kernel_name="python3", language="python", progress_bar=self.progress, log_output=False,
            stdout_file=self.stream, stderr_file=self.stream, cwd=str(job.folder), start_timeout=120,
        )

    def complete(self, job: StageJob, info: dict) -> None:
        info["executed_notebook"] = str(job.out)


class LaunchExecutor:
    """The stage's `run` in `accelerate launch` processes (kit/runner/launch.py), output into its log."""

    output_key = "log"
    no_stage_json = "the launched processes exited without error but did not write stage.json"
    # machine ranks started here (loopback) that are still running this long after another failed are
    # stopped: a rank whose peer died before the rendezvous waits for it until torch's timeout (minutes)
    rank_grace_s = 20.0

    def __init__(self, say: Callable[[str], None]):
        self.say = say

    def entry_fields(self, job: StageJob) -> dict:
        return {"executed_notebook": None, "log": str(job.out), "launch": job.ps.launch}

    def execute(self, job: StageJob) -> None:
        """ExecutionFailed (the first failing process's error, the log's tail) when a process fails."""
        import subprocess

        from kit.runner.launch import LaunchFailure, command, failure_file

        ps, log = job.ps, job.out
        spec_file = job.folder / f"{ps.id}.launch.json"
        failure_file(spec_file).unlink(missing_ok=True)  # an earlier attempt's
        launch, here = self._machines(job, spec_file)
        cmd, env = command(launch, spec_file, 0)
        mf.write_json(spec_file, {"params": job.params, "launch": launch, "command": cmd,
                                  "env": {k: v for k, v in env.items() if k != "PYTHONPATH"}})
        n = ps.launch["num_processes"]
        machines = f" on {launch['num_machines']} machines" if launch.get("num_machines", 1) > 1 else ""
        self.say(f"[kit run] {job.where} {ps.key}: launching {n} process{'es' if n > 1 else ''}{machines} "
                 f"({'CPU' if ps.launch.get('cpu') else 'accelerate'}"
                 f"{', ' + Path(ps.launch['config_file']).name if ps.launch.get('config_file') else ''}) -> {log}")
        logs = [log] + [job.folder / f"{ps.id}.machine{r}.log" for r in here[1:]]
        procs, outs = [], []
        try:
            for r, path in zip(here, logs):  # machine rank 0 into the stage's log, the others beside it
                c, e = command(launch, spec_file, r)
                out = open(path, "w", encoding="utf-8")
                outs.append(out)
                out.write("$ " + " ".join(c) + "\n")
                out.flush()
                procs.append(subprocess.Popen(c, cwd=str(job.folder), env={**os.environ, **e}, stdout=out,
                                              stderr=subprocess.STDOUT, start_new_session=True))
            rcs, first = _wait_for_ranks(procs, self.rank_grace_s)
        except BaseException:  # KeyboardInterrupt: stop every process of the launch
            for p in procs:
                _stop_group(p)
            raise
        finally:
            for out in outs:
                out.close()
        if first is None:
            return
        rc, where = rcs[first], logs[first]
        failure = LaunchFailure.read(failure_file(spec_file))  # what the first failing process wrote
        msg = failure.text() if failure else f"accelerate launch exited with status {rc}"
        if len(procs) > 1:  # several machine ranks here: which failed first, and where it said why
            msg = f"machine rank {here[first]}: {msg} (its log: {where.name})"
        text = where.read_text(encoding="utf-8", errors="replace")
        raise ExecutionFailed(msg, msg, user_error=bool(failure and failure.user_error),
                              tail="\n".join(text.rstrip().splitlines()[-25:]), record={"launch": ps.launch},
                              log=where)

    def _machines(self, job: StageJob, spec_file: Path) -> tuple[dict, list[int]]:
        """(the launch with its rendezvous filled in, the machine ranks to start here). One machine: rank
        0. Several: <id>.nodes.sh (every rank's command) and <id>.sbatch (Slurm) are written; on
        loopback every rank starts here (a rehearsal of a multi-machine launch on one host), else
        rank 0 starts here and the others' commands are printed."""
        from kit.runner.launch import LOOPBACK, node_commands, sbatch_script

        launch = dict(job.ps.launch)
        machines = int(launch.get("num_machines") or 1)
        if machines == 1:
            return launch, [0]
        ip = launch.get("main_process_ip") or LOOPBACK[0]
        local = ip in LOOPBACK
        launch.update(main_process_ip=ip, main_process_port=launch.get("main_process_port")
                      or (_free_port() if local else 29500))
        lines = node_commands(launch, spec_file)
        nodes = job.folder / f"{job.ps.id}.nodes.sh"
        nodes.write_text("#!/bin/bash\n# one line per machine rank; run line r on machine r (rank 0 at "
                         f"{ip})\n" + "\n".join(lines) + "\n", encoding="utf-8")
        sbatch = job.folder / f"{job.ps.id}.sbatch"
        sbatch.write_text(sbatch_script(launch, spec_file, f"kit-{job.ps.id}"), encoding="utf-8")
        self.say(f"[kit run] {job.where} {job.ps.key}: {machines} machines: commands in {nodes.name}, "
                 f"Slurm script in {sbatch.name}")
        if local:
            return launch, list(range(machines))
        for r, line in enumerate(lines[1:], start=1):
            self.say(f"[kit run] run on machine {r}: {line}")
        return launch, [0]

    def complete(self, job: StageJob, info: dict) -> None:
        ps = job.ps
        info.update(log=str(job.out), launch=ps.launch)
        got = info.get("world_size", 1)
        if got != ps.launch["num_processes"]:
            info.setdefault("warnings", []).append(
                f"launch asked for {ps.launch['num_processes']} processes but accelerate launch started "
                f"{got} (see {job.out.name}; accelerate's --cpu or a config file's distributed_type: NO "
                "starts one)")


def _wait_for_ranks(procs: list, grace_s: float) -> tuple[list[int], Optional[int]]:
    """Wait for the launchers of the machine ranks started here: (their exit statuses, the index of
    the first to fail or None). Once one failed, the others get `grace_s` to end on their own (a peer
    lost mid-training makes gloo fail within seconds) and are then stopped."""
    failed_at, first = None, None
    while True:
        codes = [p.poll() for p in procs]
        for i, c in enumerate(codes):
            if c and first is None:
                first, failed_at = i, time.monotonic()
        if all(c is not None for c in codes):
            return codes, first
        if failed_at is not None and time.monotonic() - failed_at > grace_s:
            for p in procs:
                _stop_group(p)
            return [p.wait() for p in procs], first
        time.sleep(0.2)


def _stop_group(proc: Any) -> None:
    """SIGTERM to the process group of a launcher (it and the training processes it started), SIGKILL after 30 s."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass
    except Exception:  # noqa: BLE001  (a TimeoutExpired: it did not stop)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def run_recipe(path: str | Path, run_id: Optional[str] = None, overrides: Optional[dict] = None,
               runs_dir: str | Path = "runs", reports_dir: str | Path = "reports",
               notebooks_dir: Optional[Path] = None, stream: Any = None, force: tuple[str, ...] = ()) -> RunResult:
    """Validate the whole recipe (RecipeError before anything runs), then run it (StageFailed on a
    failing stage)."""
    recipe = load_recipe(path, overrides)
    return Runner(recipe, run_id, runs_dir, reports_dir, notebooks_dir, stream, force=force).run()


def stage_user_error_names() -> set[str]:
    """kit.errors.user_error_names() with every module loaded whose user errors a stage can raise."""
    import kit.files  # noqa: F401  (BadLine)
    import kit.llm.openai_backend  # noqa: F401  (EndpointError)
    import kit.runner.recipe  # noqa: F401  (RecipeError)
    from kit.errors import user_error_names

    return user_error_names()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
