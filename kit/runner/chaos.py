"""`kit chaos RECIPE`: kill a whole `kit run` with SIGKILL at random moments, rerun after each kill, and
check that the end is the uninterrupted run's, artifact by artifact.

    kit chaos recipes/quickstart-cpu.yaml --kills 20 --seed 0      # a table: kill points, reruns, identical?

What it does (`chaos`):
  1. runs the recipe once without interruption (its wall time T); every run of it happens in
     <runs-dir>/<name>-chaos/work/ and then moves aside (reference/, round-1/, ...), so every run has the same
     paths and what differs is what was computed;
  2. draws the kill points from `seed`: each attempt of the chaos run is killed (SIGKILL to its whole process
     group: the runner, its notebook kernels, the servers it started, as a scheduler or the OOM killer
     would) at a second drawn uniformly from (0, T) after it starts, unless it finishes first; the next
     attempt is the same command again (a rerun resumes). An attempt that finishes ends a round: its folder
     is compared with the reference, its kill point is spent (counted as outlived) and the next round starts
     afresh. After the `kills`-th kill, a last rerun finishes the round;
  3. records, per kill, the round, the attempt, the second, the stage that was running (from the manifest)
     and how far into it; per round, each artifact "identical" or what differs.

What is compared (`digests`): every file of the run folder and its report folder except what records when and
how long (executed notebooks, logs, W&B folders, the kernelspec, attempts.json, lock files, plots, HTML); JSON,
JSONL and CSV files are compared after dropping the fields that hold times, durations, memory peaks, dates and
the run's history (`VOLATILE`: also `skipped`, and checkpoint tags, which name an upstream run by its start
time), random ids (uuid4) renamed in order of appearance; every other file byte for byte (weights, tokenizers).
So weights digests, tasks, pools, verdicts and the report's numbers are compared exactly; a difference is
a bug to fix, not a tolerance to widen.

The table goes to the terminal and <runs-dir>/<name>-chaos/chaos.json (and chaos.md); each run's report is in its
folder's reports/.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

# names of fields that record when, how long or how much memory: not part of what a run computed
VOLATILE = re.compile(r"^(started|finished|updated|since|date|time|timestamp|created|.*_time|wall_s.*|.*_s|.*_sec|.*seconds"
                      r"|.*_per_s|.*per_second|elapsed.*|peak_rss.*|rss.*|.*_gib|history|argv|git|executed_notebook"
                      r"|log|wandb|machine|hostname|pid|attempts|how|kept_from|replaced|python|duration.*"
                      # how this invocation got there (a stage skipped as complete) and the tags of in-stage
                      # checkpoints, which name the upstream run by its start time (kit/runner/execute.py _resume_tag)
                      r"|skipped|tag|checkpoint_tag|resume_tag)$")
SKIP_DIRS = {".jupyter", "wandb", "servers", "__pycache__"}
SKIP_SUFFIXES = (".ipynb", ".log", ".png", ".lock", ".tmp", ".html")
SKIP_NAMES = {"attempts.json", ".kit.lock", ".kit-digests.json"}  # .kit-digests.json: a cache keyed by mtimes


UUID = re.compile(r"\b[0-9a-f]{32}\b|\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


class _Ids(dict):
    """Random ids (uuid4: an episode's trajectory id) renamed <id1>, <id2>, ... in the order a run's files
    hold them: two runs compare equal when their ids differ but every reference to one id matches."""

    def __call__(self, m: re.Match) -> str:
        return self.setdefault(m.group(0), f"<id{len(self) + 1}>")


def _normal(x: Any, subs: list[tuple[str, str]], ids: Optional[_Ids] = None) -> Any:
    if isinstance(x, dict):
        return {_normal(str(k), subs, ids): _normal(v, subs, ids) for k, v in sorted(x.items())
                if not VOLATILE.match(str(k))}
    if isinstance(x, list):
        return [_normal(v, subs, ids) for v in x]
    if isinstance(x, str):
        for a, b in subs:
            x = x.replace(a, b)
        return UUID.sub(ids, x) if ids is not None else x
    if isinstance(x, float):
        return repr(x)
    return x


def _file_digest(path: Path, subs: list[tuple[str, str]], ids: _Ids) -> str:
    name = path.name
    if name.endswith(".json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if name == "manifest.json" and isinstance(data, dict):
                data = _without_inner_file_hashes(data, subs)
            return "json:" + hashlib.sha256(json.dumps(_normal(data, subs, ids), sort_keys=True).encode()).hexdigest()
        except (UnicodeDecodeError, json.JSONDecodeError):
            pass
    elif name.endswith(".jsonl"):
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(_normal(json.loads(line), subs, ids) if line.strip() else None)
            except json.JSONDecodeError:
                rows.append(("torn", line))
        return "jsonl:" + hashlib.sha256(json.dumps([r for r in rows if r is not None], sort_keys=True).encode()).hexdigest()
    elif name.endswith(".csv"):
        rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
        return "csv:" + hashlib.sha256(json.dumps([_normal(r, subs, ids) for r in rows], sort_keys=True).encode()).hexdigest()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "bytes:" + h.hexdigest()


def _without_inner_file_hashes(manifest: dict, subs: list[tuple[str, str]]) -> dict:
    """The manifest less the raw sha256 it keeps of each file of a model folder inside the run: those files are
    compared as artifacts of their own (a JSON one without its times), and a raw hash of a file holding a time
    (sft_metrics.json) would differ in every run."""
    run = subs[0][0]
    models = {k: ({**v, "files": None} if isinstance(v, dict) and str(k).startswith(run) else v)
              for k, v in (manifest.get("models") or {}).items()}
    return {**manifest, "models": models}


def digests(run_dir: str | Path, reports_dir: Optional[str | Path] = None) -> dict[str, str]:
    """{artifact path relative to the run folder (report files as 'report:<path>'): digest of what it holds}."""
    run_dir = Path(run_dir).resolve()
    subs = [(str(run_dir), "<run>"), (run_dir.name, "<run>")]
    out, ids = {}, _Ids()
    roots = [("", run_dir)] + ([("report:", Path(reports_dir).resolve() / run_dir.name)] if reports_dir else [])
    for tag, root in roots:
        if not root.is_dir():
            continue
        if tag:
            subs = subs + [(str(root), "<report>")]
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and ".replaced-" not in d)
            for fn in sorted(filenames):
                if fn in SKIP_NAMES or fn.endswith(SKIP_SUFFIXES):
                    continue
                p = Path(dirpath) / fn
                out[tag + str(p.relative_to(root))] = _file_digest(p, subs, ids)
    return out


def compare(reference: dict[str, str], other: dict[str, str]) -> dict[str, str]:
    """{artifact: 'identical' | 'differs' | 'missing' | 'extra'} over both runs' artifacts."""
    out = {}
    for k in sorted(set(reference) | set(other)):
        if k not in other:
            out[k] = "missing"
        elif k not in reference:
            out[k] = "extra"
        else:
            out[k] = "identical" if reference[k] == other[k] else "differs"
    return out


@dataclass
class Kill:
    n: int
    round: int
    attempt: int
    at_s: float            # seconds after the attempt started
    stage: Optional[str]   # the stage the manifest said was running (None: before the first, or between two)
    stage_s: Optional[float]  # seconds into that stage


@dataclass
class Round:
    round: int
    attempts: int
    kills: int
    rc: int
    verdicts: dict[str, str] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return self.rc == 0 and all(v == "identical" for v in self.verdicts.values())


@dataclass
class ChaosResult:
    recipe: str
    seed: int
    reference_s: float
    kills: list[Kill]
    rounds: list[Round]
    outlived: int = 0  # kill points drawn after the attempt had finished (spent, and another drawn)

    @property
    def identical(self) -> bool:
        return bool(self.rounds) and all(r.identical for r in self.rounds)

    def table(self) -> str:
        lines = [f"chaos of {self.recipe} (seed {self.seed}; uninterrupted run {self.reference_s:.0f} s; {len(self.kills)} "
                 f"kills; {self.outlived} more points drawn after the attempt had finished)", "",
                 "| kill | round | attempt | at second | stage running | second of stage |", "|---|---|---|---|---|---|"]
        for k in self.kills:
            lines.append(f"| {k.n} | {k.round} | {k.attempt} | {k.at_s:.1f} | {k.stage or '(between stages)'} | "
                         f"{'' if k.stage_s is None else f'{k.stage_s:.1f}'} |")
        lines += ["", "| round | attempts | kills | last exit | artifacts | identical | differ / missing / extra |",
                  "|---|---|---|---|---|---|---|"]
        for r in self.rounds:
            bad = [f"{a} ({v})" for a, v in r.verdicts.items() if v != "identical"]
            lines.append(f"| {r.round} | {r.attempts} | {r.kills} | {r.rc} | {len(r.verdicts)} | "
                         f"{sum(v == 'identical' for v in r.verdicts.values())} | {', '.join(bad) or 'none'} |")
        lines += ["", "every artifact identical to the uninterrupted run" if self.identical else
                  "DIFFERENCES: each is a bug (resume must give the uninterrupted run's result)"]
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"recipe": self.recipe, "seed": self.seed, "reference_s": self.reference_s, "identical": self.identical,
                "outlived": self.outlived,
                "kills": [asdict(k) for k in self.kills],
                "rounds": [{**asdict(r), "identical": r.identical} for r in self.rounds]}


def _running(run_dir: Path) -> tuple[Optional[str], Optional[float]]:
    """(stage key, seconds into it) of the stage the manifest says is running now."""
    try:
        m = json.loads((run_dir / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None, None
    for s in m.get("stages") or []:
        if s.get("status") == "running":
            try:
                t0 = time.mktime(time.strptime(str(s.get("started"))[:19], "%Y-%m-%dT%H:%M:%S"))
                return s.get("key"), max(0.0, time.time() - t0)
            except ValueError:
                return s.get("key"), None
    return None, None


def _attempt(argv: list[str], log: Path, kill_at: Optional[float], run_dir: Path,
             env: dict) -> tuple[Optional[int], float, tuple[Optional[str], Optional[float]]]:
    """One `kit run`: (exit status or None when killed, seconds it ran, the stage running when killed)."""
    t0 = time.monotonic()
    with open(log, "a") as out:
        out.write(f"\n===== {' '.join(argv)}  (kill at {kill_at}) =====\n")
        out.flush()
        p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        try:
            rc = p.wait(timeout=kill_at)
            return rc, time.monotonic() - t0, (None, None)
        except subprocess.TimeoutExpired:
            where = _running(run_dir)
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            _reap_group(p.pid)
            return None, time.monotonic() - t0, where
        except BaseException:  # Ctrl-C or SIGTERM on `kit chaos`: the run it started (its own session) goes too
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
            _reap_group(p.pid)
            raise


def _reap_group(pgid: int, timeout: float = 30) -> None:
    """Wait until no process of the killed group is left (a kernel or server dies a moment after its parent)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        time.sleep(0.2)


def chaos(recipe: str | Path, kills: int = 20, seed: int = 0, runs_dir: str | Path = "runs",
          sets: tuple[str, ...] = (), name: Optional[str] = None,
          say: Callable[[str], None] = print, kit: Optional[list[str]] = None) -> ChaosResult:
    """See the module doc. `kit`: the command that runs the kit (default: this interpreter's `-m kit.cli`)."""
    import shutil

    from kit.runner import load_recipe, parse_override

    rec = load_recipe(recipe, dict(parse_override(x) for x in sets))
    root = Path(runs_dir).resolve() / (name or f"{rec.name}-chaos")
    if root.exists():
        say(f"[kit chaos] {root} exists: removed (chaos's own folder; a fresh start)")
        shutil.rmtree(root)
    # every run happens at the same path (work/), then moves aside: paths, and the memo keys and resume tags
    # derived from them, are the same in every run, so what differs is what was computed
    work = root / "work"
    run_dir = work / "runs" / "chaos"
    root.mkdir(parents=True)
    kit = kit or [sys.executable, "-m", "kit.cli"]
    env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "disabled")}
    log = root / "chaos.log"
    argv = [*kit, "run", str(recipe), "--run-id", "chaos", "--runs-dir", str(work / "runs"), "--reports-dir",
            str(work / "reports"), *[a for s in sets for a in ("--set", s)]]

    from kit.runner.execute import sigterm_interrupts

    with sigterm_interrupts():  # SIGTERM on `kit chaos` stops the attempt in flight too
        return _chaos(root, work, run_dir, argv, log, env, recipe, kills, seed, say)


def _chaos(root: Path, work: Path, run_dir: Path, argv: list[str], log: Path, env: dict, recipe: str | Path,
           kills: int, seed: int, say: Callable[[str], None]) -> ChaosResult:
    def done(as_name: str) -> dict[str, str]:
        d = digests(run_dir, work / "reports")
        work.rename(root / as_name)
        return d

    say(f"[kit chaos] reference: {' '.join(argv)}")
    rc, ref_s, _ = _attempt(argv, log, None, run_dir, env)
    if rc != 0:
        raise RuntimeError(f"the uninterrupted run failed (exit {rc}); see {log}")
    ref = done("reference")
    say(f"[kit chaos] reference done in {ref_s:.0f} s: {len(ref)} artifacts")
    rng = random.Random(seed)
    res = ChaosResult(str(recipe), seed, round(ref_s, 1), [], [])
    rnd, attempt, killed_in_round, outlived = 1, 0, 0, 0
    kill_at = rng.uniform(0, ref_s)  # drawn one at a time: a point an attempt outlives is spent, the next drawn
    while len(res.rounds) < 4 * kills + 1:  # a guard: every round ends, and a point is spent each round
        attempt += 1
        last = len(res.kills) >= kills
        rc, took, (stage, stage_s) = _attempt(argv, log, None if last else kill_at, run_dir, env)
        if rc is None:
            killed_in_round += 1
            res.kills.append(Kill(len(res.kills) + 1, rnd, attempt, round(took, 1), stage,
                                  None if stage_s is None else round(stage_s, 1)))
            say(f"[kit chaos] kill {len(res.kills)}/{kills}: round {rnd}, attempt {attempt}, at {took:.1f} s"
                f" ({stage or 'between stages'}{'' if stage_s is None else f', {stage_s:.0f} s into it'})")
            kill_at = rng.uniform(0, ref_s)
            continue
        if not last:  # it finished before its kill point: that point is spent
            outlived += 1
            kill_at = rng.uniform(0, ref_s)
        verdicts = compare(ref, done(f"round-{rnd}")) if rc == 0 else {}
        r = Round(rnd, attempt, killed_in_round, rc, verdicts)
        res.rounds.append(r)
        say(f"[kit chaos] round {rnd}: finished after {attempt} attempts, {killed_in_round} kills, exit {rc}: "
            + ("every artifact identical" if r.identical else
               f"{sum(v != 'identical' for v in verdicts.values())} artifacts differ" if rc == 0 else "the rerun FAILED"))
        if rc != 0 or last:
            break
        rnd, attempt, killed_in_round = rnd + 1, 0, 0
    res.outlived = outlived
    (root / "chaos.json").write_text(json.dumps(res.to_json(), indent=1))
    (root / "chaos.md").write_text(res.table() + "\n")
    return res
