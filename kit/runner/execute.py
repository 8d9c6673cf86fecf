"""`kit run RECIPE`: execute a validated recipe's stage notebooks with papermill, resumably.

    result = run_recipe("recipes/quickstart-cpu.yaml")          # runs/<run-id>/, reports/<run-id>/

For each planned stage, in order:
  1. resolve `@id` references to the producing stage's folder (absolute paths);
  2. fingerprint the stage: its stage name, notebook, the kit code the notebook reaches
     (kit/runner/codehash.py), resolved parameters, and the fingerprints of the stages it reads
     (so a changed upstream stage reruns everything below it);
  3. skip it when its folder holds a `stage.json` with status "complete", the same fingerprint,
     and every output it lists still exists ("resume after a crash");
     in an ablation, a stage identical to one another arm already ran is shared, not rerun;
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

The kernel is this interpreter: a `python3` kernelspec pointing at sys.executable is written
under runs/<run-id>/.jupyter and put first on JUPYTER_PATH, so papermill never picks up
another Python's kernel from ~/.local/share/jupyter or /usr/share/jupyter.

W&B: every stage logs to the run's group (project "kit", group = run id). WANDB_MODE defaults to
"offline" (nothing leaves the machine; `wandb sync runs/<run-id>/**/wandb/offline-run-*` later);
a WANDB_MODE set by the user is respected.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from kit.runner import manifest as mf
from kit.runner.codehash import KIT_DIR, code_fingerprint, notebook_imports
from kit.runner.recipe import PlannedStage, Recipe, load_recipe
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
        params[name] = str(d / "model") if contract(kinds[key]).produces == Produces.MODEL else str(d)
    return params


def stage_complete(stage_dir: Path, fingerprint: str) -> bool:
    info = mf.read_json(stage_dir / "stage.json")
    if not info or info.get("status") != "complete" or info.get("fingerprint") != fingerprint:
        return False
    return all(Path(p).exists() for p in (info.get("outputs") or {}).values() if isinstance(p, str))


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
                 code_root: Optional[Path] = None):
        self.recipe = recipe
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
        self.manifest_path = self.run_dir / "manifest.json"

    # -- helpers ------------------------------------------------------------------------------
    def say(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def stage_dir(self, ps: PlannedStage) -> Path:
        return self.run_dir / ps.key

    def _fingerprint(self, ps: PlannedStage, params: dict, fps: dict[str, str]) -> str:
        nb = notebook_path(ps.stage, self.notebooks_dir)
        text = nb.read_text(encoding="utf-8") if nb.exists() else None
        code = notebook_imports(text) if text is not None else None
        if ps.launch and code is not None:  # run by kit/runner/launch.py: its code too
            code = set(code) | {"kit.runner.launch"}
        body = {"stage": ps.stage, "notebook": _sha(text) if text is not None else None,
                # the kit code the notebook reaches (kit/runner/codehash.py): changed code reruns the stage
                "code": code_fingerprint(code, self.code_root) if code is not None else None,
                "params": {k: (("@", fps[ps.refs[k]]) if k in ps.refs else v) for k, v in params.items()}}
        if summarizes_run(ps.stage):
            body["upstream"] = sorted(fps.values())
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

    def _write_manifest(self, m: dict) -> None:
        m["updated"] = mf.now()
        mf.write_json(self.manifest_path, m)

    def _record_models(self, m: dict, params: dict, ps: PlannedStage) -> None:
        for name, ref in contract(ps.stage).references.items():
            v = params.get(name)
            if ref.kind != Produces.MODEL or not isinstance(v, str):
                continue
            try:
                m["models"][v] = mf.describe_model(v)
            except Exception as e:  # a manifest detail must never stop a run
                m["models"][v] = {"error": f"{type(e).__name__}: {e}"}

    def _launch(self, ps: PlannedStage, where: str, injected: dict, sdir: Path, log: Path, fp: str, entry: dict,
                m: dict, res: RunResult, t0: float) -> None:
        """Run a stage under `accelerate launch` (kit/runner/launch.py), its output into `log`;
        StageFailed (with the log's tail) when any process fails."""
        import subprocess

        from kit.runner.launch import LaunchFailure, command, failure_file

        spec_file = sdir / f"{ps.id}.launch.json"
        failure_file(spec_file).unlink(missing_ok=True)  # an earlier attempt's
        cmd, env = command(ps.launch, spec_file)
        mf.write_json(spec_file, {"params": injected, "launch": ps.launch, "command": cmd,
                                  "env": {k: v for k, v in env.items() if k != "PYTHONPATH"}})
        n = ps.launch["num_processes"]
        self.say(f"[kit run] {where} {ps.key}: launching {n} process{'es' if n > 1 else ''} "
                 f"({'CPU' if ps.launch.get('cpu') else 'accelerate'}"
                 f"{', ' + Path(ps.launch['config_file']).name if ps.launch.get('config_file') else ''}) -> {log}")
        t1 = time.perf_counter()
        with open(log, "w", encoding="utf-8") as out:
            out.write("$ " + " ".join(cmd) + "\n")
            out.flush()
            proc = subprocess.Popen(cmd, cwd=str(sdir), env={**os.environ, **env}, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                rc = proc.wait()
            except BaseException:  # KeyboardInterrupt: stop every process of the launch
                import signal

                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=30)
                except Exception:
                    os.killpg(proc.pid, signal.SIGKILL)
                raise
        if rc == 0:
            return
        failure = LaunchFailure.read(failure_file(spec_file))  # what the first failing process wrote
        msg = failure.text() if failure else f"accelerate launch exited with status {rc}"
        text = log.read_text(encoding="utf-8", errors="replace")
        tail = "\n".join(text.rstrip().splitlines()[-25:])
        wall = round(time.perf_counter() - t1, 1)
        entry.update(status="failed", finished=mf.now(), wall_s=wall, error=msg[:2000])
        mf.write_json(sdir / "stage.json", {"status": "failed", "stage": ps.stage, "id": ps.id, "fingerprint": fp,
                                             "error": msg[:2000], "log": str(log), "launch": ps.launch,
                                             "finished": mf.now()})
        m["status"], m["failed_stage"] = "failed", ps.key
        self._write_manifest(m)
        res.failed, res.manifest, res.wall_s = ps.key, m, time.perf_counter() - t0
        raise StageFailed(ps.key, log, msg, user_error=bool(failure and failure.user_error), tail=tail)

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> RunResult:
        import papermill as pm

        t0 = time.perf_counter()
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_SILENT", "true")
        os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        install_kernelspec(self.run_dir / ".jupyter")
        m = self._base_manifest()
        m["history"].append({"started": mf.now(), "argv": sys.argv[1:], "git": m["git"].get("commit")})
        self._write_manifest(m)
        res = RunResult(self.run_id, self.run_dir, None, m)
        dirs: dict[str, Path] = {}
        fps: dict[str, str] = {}
        by_fp: dict[str, Path] = {}
        plan = self.recipe.plan
        kinds = {ps.key: ps.stage for ps in plan}
        self.say(f"[kit run] {self.recipe.name} -> {self.run_dir}  ({len(plan)} stages; W&B "
                 f"{os.environ['WANDB_MODE']}, group {self.run_id})")
        for n, ps in enumerate(plan, 1):
            params = _resolve(ps, dirs, kinds)
            fp = self._fingerprint(ps, params, fps)
            sdir = self.stage_dir(ps)
            entry = {"key": ps.key, "stage": ps.stage, "id": ps.id, "arm": ps.arm, "fingerprint": fp,
                     "notebook": str(notebook_path(ps.stage, self.notebooks_dir)), "params": params,
                     "references": {k: v for k, v in ps.refs.items()}}
            # an identical stage in another arm already ran: share it
            if fp in by_fp and ps.key not in self.force:
                sdir = by_fp[fp]
                dirs[ps.key], fps[ps.key] = sdir, fp
                info = mf.read_json(sdir / "stage.json") or {}
                entry.update(status="shared", shared_with=str(sdir), executed_notebook=info.get("executed_notebook"),
                             outputs=info.get("outputs"), summary=info.get("summary"), warnings=info.get("warnings"))
                if info.get("log"):  # launched (accelerate): its log
                    entry["log"] = info["log"]
                m["stages"].append(entry)
                res.shared.append(ps.key)
                self.say(f"[kit run] {n}/{len(plan)} {ps.key}: identical to {sdir.relative_to(self.run_dir)}, shared")
                continue
            dirs[ps.key], fps[ps.key] = sdir, fp
            by_fp[fp] = sdir
            if summarizes_run(ps.stage):
                params["report_dir"] = params.get("report_dir") or str(self.reports_dir / self.run_id)
                res.report_dir = Path(params["report_dir"])
            injected = {**params, "stage": ps.stage, "run_id": self.run_id, "stage_id": ps.id, "arm": ps.arm, "out_dir": str(sdir),
                        "run_dir": str(self.run_dir), "wandb_group": self.run_id, "fingerprint": fp}
            out_nb = sdir / f"{ps.id}.ipynb"
            entry["executed_notebook"] = str(out_nb)
            if ps.launch:  # no notebook: its processes' log
                out_nb = sdir / f"{ps.id}.log"
                entry.update(executed_notebook=None, log=str(out_nb), launch=ps.launch)
            self._record_models(m, params, ps)
            if ps.key not in self.force and stage_complete(sdir, fp):
                info = mf.read_json(sdir / "stage.json") or {}
                entry.update(status="complete", skipped=True, outputs=info.get("outputs"), summary=info.get("summary"),
                             warnings=info.get("warnings"), started=info.get("started"),
                             finished=info.get("finished"), wall_s=info.get("wall_s"),
                             peak_rss_gib=info.get("peak_rss_gib"))
                m["stages"].append(entry)
                self._write_manifest(m)
                res.skipped.append(ps.key)
                self.say(f"[kit run] {n}/{len(plan)} {ps.key}: complete (fingerprint {fp}), skipped")
                continue
            old = mf.read_json(sdir / "stage.json")
            if old and old.get("status") == "complete":  # parameters, notebook or upstream changed
                kept = _set_aside(sdir, str(old.get("fingerprint") or "unknown"))
                entry["replaced"] = str(kept)
                self.say(f"[kit run] {n}/{len(plan)} {ps.key}: inputs changed since it completed; its outputs "
                         f"are kept in {kept.relative_to(self.run_dir)}")
            sdir.mkdir(parents=True, exist_ok=True)
            entry.update(status="running", started=mf.now())
            m["stages"].append(entry)
            self._write_manifest(m)
            t1 = time.perf_counter()
            try:
                if ps.launch:  # accelerate launch (kit/runner/launch.py); StageFailed when a process fails
                    self._launch(ps, f"{n}/{len(plan)}", injected, sdir, out_nb, fp, entry, m, res, t0)
                else:
                    self.say(f"[kit run] {n}/{len(plan)} {ps.key}: executing {entry['notebook']} -> {out_nb}")
                    pm.execute_notebook(
                        load_notebook(notebook_path(ps.stage, self.notebooks_dir)), str(out_nb), parameters=injected,
                        kernel_name="python3", language="python", progress_bar=self.progress, log_output=False,
                        stdout_file=self.stream, stderr_file=self.stream, cwd=str(sdir), start_timeout=120,
                    )
            except StageFailed:
                raise
            except BaseException as e:  # PapermillExecutionError, KeyboardInterrupt, a dead kernel
                wall = round(time.perf_counter() - t1, 1)
                msg = (f"{getattr(e, 'ename', type(e).__name__)}: {getattr(e, 'evalue', e)}"
                       if e.__class__.__name__ == "PapermillExecutionError" else f"{type(e).__name__}: {e}")
                if not out_nb.exists():
                    msg += " (no notebook was written: " + "".join(traceback.format_exception_only(e)).strip() + ")"
                entry.update(status="failed", finished=mf.now(), wall_s=wall, error=msg[:2000])
                mf.write_json(sdir / "stage.json", {"status": "failed", "stage": ps.stage, "id": ps.id,
                                                     "fingerprint": fp, "error": msg[:2000],
                                                     ("log" if ps.launch else "executed_notebook"): str(out_nb),
                                                     "finished": mf.now()})
                m["status"] = "failed"
                m["failed_stage"] = ps.key
                self._write_manifest(m)
                res.failed, res.manifest, res.wall_s = ps.key, m, time.perf_counter() - t0
                if isinstance(e, KeyboardInterrupt):
                    raise
                raise StageFailed(ps.key, out_nb, msg.splitlines()[0] if msg else "error",
                                  user_error=getattr(e, "ename", None) in stage_user_error_names()) from None
            info = mf.read_json(sdir / "stage.json") or {}
            wall = round(time.perf_counter() - t1, 1)
            if info.get("status") != "complete" or info.get("fingerprint") != fp:
                msg = ("the launched processes exited without error but did not write stage.json" if ps.launch else
                       "the notebook ran to its end but did not write stage.json (its last cell calls st.finish())")
                entry.update(status="failed", error=msg, wall_s=wall)
                m["status"], m["failed_stage"] = "failed", ps.key
                self._write_manifest(m)
                res.failed = ps.key
                raise StageFailed(ps.key, out_nb, msg)
            info["wall_s"] = wall
            if ps.launch:
                info.update(log=str(out_nb), launch=ps.launch)
                got = info.get("world_size", 1)
                if got != ps.launch["num_processes"]:
                    info.setdefault("warnings", []).append(
                        f"launch asked for {ps.launch['num_processes']} processes but accelerate launch started "
                        f"{got} (see {out_nb.name}; accelerate's --cpu or a config file's distributed_type: NO "
                        "starts one)")
            else:
                info["executed_notebook"] = str(out_nb)
            mf.write_json(sdir / "stage.json", info)
            entry.update(status="complete", finished=mf.now(), wall_s=wall, peak_rss_gib=info.get("peak_rss_gib"),
                         outputs=info.get("outputs"),
                         summary=info.get("summary"), warnings=info.get("warnings"))
            for w in info.get("warnings") or []:
                self.say(f"[kit run] WARNING {ps.key}: {w}")
            if contract(ps.stage).produces == Produces.MODEL and (sdir / "model").is_dir():
                try:
                    m["models"][str(sdir / "model")] = mf.describe_model(str(sdir / "model"))
                except Exception as e:  # pragma: no cover
                    m["models"][str(sdir / "model")] = {"error": str(e)}
            self._write_manifest(m)
            res.executed.append(ps.key)
            self.say(f"[kit run] {n}/{len(plan)} {ps.key}: complete in {wall:.0f}s")
        m["status"] = "complete"
        m.pop("failed_stage", None)
        m["history"][-1]["finished"] = mf.now()
        m["wall_s_last_invocation"] = round(time.perf_counter() - t0, 1)
        self._write_manifest(m)
        res.manifest, res.wall_s = m, time.perf_counter() - t0
        if res.report_dir:
            mf.write_json(res.report_dir / "manifest.json", m)
        return res


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
