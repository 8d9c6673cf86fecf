"""`kit bench sft|grpo --against REV`: the same workload from this checkout and from git revision REV,
side by side in one run, on one machine at one time.

    kit bench sft --against b7d8fc2 --steps 4 --repeats 5 --out sft_vs_b7d8fc2.json
    kit bench grpo --against b7d8fc2 --steps 2 --repeats 3

How: a temporary detached worktree of REV (`git worktree add --detach`; removed at the end, on an error
too). Every run is its own process (`sys.executable` with PYTHONPATH = its tree) that prints one JSON
result line; the parent checks that the child's `kit.__file__` lies in the child's tree. The arms
alternate, current, REV, current, REV, ... for `repeats` rounds, so a machine that slows down for a
while slows both arms' neighbouring runs.

What each child runs:
  sft   this checkout's kit/bench/sft.py, loaded by path (the measuring code is the same in both arms),
        on its own tree's kit.train.sft (SFTConfig fields that tree lacks are left out and listed)
  grpo  its own tree's kit.bench.grpo.bench_grpo, given only the arguments its signature accepts
        (the others listed)
A number a tree cannot give is "—".

The table: each arm's median over the rounds, and current / REV of the medians; the headline ratio
(seconds per trained token for sft; seconds per training episode, (rollout + update) / episodes, for
grpo) also as the range of the rounds' own ratios (each round's two runs are neighbours in time).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

MARK = "KIT_BENCH_RESULT "  # the child's result line starts with this
SFT, GRPO = "bench-sft", "bench-grpo"  # the two workloads (`kit bench sft` / `kit bench grpo`)

# Run in the child with `python -c`: no '' (the working directory) on sys.path, so that `kit` is the
# PYTHONPATH tree's; then this file, loaded by path, runs the job.
CHILD = """
import importlib.util, json, sys
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
spec = importlib.util.spec_from_file_location("_kit_bench_against", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = mod
spec.loader.exec_module(mod)
mod.child(json.loads(sys.argv[2]))
"""


# ----- the child ---------------------------------------------------------------------------------


def _load_by_path(path: Path, name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _peak_rss_gib() -> float:
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)  # KiB on Linux


def child(job: dict) -> None:
    """Run one arm's workload in this process (whose `kit` is the arm's tree) and print its result line."""
    import kit

    kwargs = dict(job["kwargs"])
    if job["kind"] == SFT:
        sft = _load_by_path(Path(__file__).with_name("sft.py"), "_kit_bench_sft_arm")
        out = sft.bench_sft(**kwargs).to_json()
    elif job["kind"] == GRPO:
        import inspect

        from kit.bench import grpo

        threads = kwargs.pop("threads", None)
        if threads:
            import torch

            torch.set_num_threads(threads)
        params = inspect.signature(grpo.bench_grpo).parameters
        given = {k: v for k, v in kwargs.items() if k in params}
        if "log" in params:
            given["log"] = None
        out = grpo.bench_grpo(**given).to_json()
        out["args_dropped"] = sorted(set(kwargs) - set(params))
        out["peak_rss_gib"] = _peak_rss_gib()
    else:
        raise ValueError(f"unknown bench kind {job['kind']!r}")
    out["kit_file"] = kit.__file__
    print(MARK + json.dumps(out), flush=True)


# ----- the numbers -------------------------------------------------------------------------------


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _sft_rows() -> list[tuple[str, Callable[[dict], Any], str]]:
    return [
        ("train s", lambda r: r["seconds"], ".2f"),
        ("steps", lambda r: r["steps"], "d"),
        ("rows", lambda r: r["rows"], "d"),
        ("turns", lambda r: r["turns"], "d"),
        ("tokens trained", lambda r: r["tokens_trained"], "d"),
        ("tokens seen", lambda r: r["tokens_seen"], "d"),
        ("tokens computed", lambda r: r.get("tokens_computed"), "d"),
        ("positions computed", lambda r: r.get("positions_computed"), "d"),
        ("ms / trained token", lambda r: 1000 * r["seconds"] / r["tokens_trained"] if r["tokens_trained"] else None,
         ".3f"),
        ("peak RSS GiB", lambda r: r.get("peak_rss_gib"), ".2f"),
        ("load s", lambda r: r.get("load_s"), ".1f"),
    ]


def _grpo_rows() -> list[tuple[str, Callable[[dict], Any], str]]:
    def t(key: str) -> Callable[[dict], Any]:
        return lambda r: r["total"].get(key)

    def per_episode(r: dict) -> float | None:
        tot = r["total"]
        return (tot["rollout_s"] + tot["update_s"]) / tot["episodes"] if tot.get("episodes") else None

    return [
        ("rollout s", t("rollout_s"), ".2f"),
        ("score s", t("score_s"), ".2f"),
        ("update s", t("update_s"), ".2f"),
        ("step s", t("step_s"), ".2f"),
        ("episodes", t("episodes"), "d"),
        ("rows", t("rows"), "d"),
        ("turns", t("turns"), "d"),
        ("tokens trained", t("tokens"), "d"),
        ("passes", t("passes"), "d"),
        ("s / training episode", per_episode, ".3f"),
        ("update / rollout", lambda r: _ratio(r["total"].get("update_s"), r["total"].get("rollout_s")), ".2f"),
        ("peak RSS GiB", lambda r: r.get("peak_rss_gib"), ".2f"),
        ("load s", lambda r: r.get("load_s"), ".1f"),
    ]


ROWS = {SFT: _sft_rows, GRPO: _grpo_rows}
HEADLINE = {SFT: "ms / trained token", GRPO: "s / training episode"}


def _value(get: Callable[[dict], Any], r: dict) -> float | None:
    try:
        v = get(r)
    except (KeyError, TypeError, ZeroDivisionError):
        return None
    return None if v is None else float(v)


def medians(kind: str, results: list[dict]) -> dict[str, float | None]:
    """Each row's median over the runs that have it (None where none has)."""
    out: dict[str, float | None] = {}
    for label, get, _ in ROWS[kind]():
        vals = [v for v in (_value(get, r) for r in results) if v is not None]
        out[label] = statistics.median(vals) if vals else None
    return out


def _fmt(v: float | None, fmt: str) -> str:
    if v is None:
        return "—"
    return format(round(v), ",") if fmt == "d" else format(v, fmt)


def table(kind: str, ab: dict) -> list[str]:
    """The side-by-side lines of a `run_against` result."""
    cur, rev = ab["arms"]["current"], ab["arms"]["against"]
    names = (cur["name"], rev["name"])
    mc, mr = medians(kind, cur["results"]), medians(kind, rev["results"])
    lines = [(f"{kind}: {names[0]} = {cur['tree']} (working tree), {names[1]} = {ab['sha'][:10]}; median of "
              f"{len(cur['results'])} round(s), arms alternating")]
    for arm in (cur, rev):
        files = sorted({r["kit_file"] for r in arm["results"]})
        lines.append(f"  {arm['name']}: kit from {', '.join(files)}")
    for arm in (cur, rev):
        dropped = sorted({k for r in arm["results"] for k in r.get("settings", {}).get("config_dropped", [])}
                         | {k for r in arm["results"] for k in r.get("args_dropped", [])})
        if dropped:
            lines.append(f"  {arm['name']} has no {', '.join(dropped)}: left out")
    w = max(12, *(len(n) for n in names))
    ratio_head = f"{names[0]}/{names[1]}"
    lines.append(f"{'':<22} {names[0]:>{w}} {names[1]:>{w}} {ratio_head:>{max(w, len(ratio_head))}}")
    if kind == SFT:
        wd = [{r["settings"].get("whole_dialogues") for r in arm["results"]} for arm in (cur, rev)]
        shown = ["—" if s == {None} else "/".join(str(x) for x in sorted(s, key=str)) for s in wd]
        lines.append(f"{'whole_dialogues':<22} {shown[0]:>{w}} {shown[1]:>{w}}")
    for label, _, fmt in ROWS[kind]():
        r = _ratio(mc[label], mr[label])
        rs = "—" if r is None else f"{r:.2f}"
        lines.append(f"{label:<22} {_fmt(mc[label], fmt):>{w}} {_fmt(mr[label], fmt):>{w}} "
                     f"{rs:>{max(w, len(ratio_head))}}")
    head = ab["headline"]
    if head["ratio"] is not None:
        rounds = head["rounds"]
        spread = f" (rounds: {min(rounds):.2f}–{max(rounds):.2f})" if len(rounds) > 1 else ""
        lines.append(f"{head['label']}: {names[0]}/{names[1]} = {head['ratio']:.2f}{spread}")
    return lines


# ----- the parent --------------------------------------------------------------------------------


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def checkout_root() -> Path:
    """The git work tree this kit was imported from."""
    from kit.errors import BadInput

    here = Path(__file__).resolve().parent
    try:
        return Path(_git("rev-parse", "--show-toplevel", cwd=here))
    except (OSError, subprocess.CalledProcessError):
        raise BadInput(f"--against needs the kit as a git checkout; {here} is in none",
                       "run from a clone of the kit's repository") from None


def resolve_rev(rev: str) -> str:
    """REV's full commit id, or BadInput."""
    from kit.errors import BadInput

    root = checkout_root()
    try:
        return _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", cwd=root)
    except subprocess.CalledProcessError:
        raise BadInput(f"--against {rev}: no such git revision in {root}",
                       "give a commit, tag or branch (git log --oneline)") from None


@contextlib.contextmanager
def rev_worktree(rev: str) -> Iterator[tuple[Path, str]]:
    """(a temporary detached worktree of `rev`, its commit id); removed on the way out."""
    root, sha = checkout_root(), resolve_rev(rev)
    tmp = Path(tempfile.mkdtemp(prefix=f"kit-bench-{sha[:7]}-"))
    tree = tmp / "tree"
    try:
        _git("worktree", "add", "--detach", str(tree), sha, cwd=root)
        yield tree, sha
    finally:
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            _git("worktree", "remove", "--force", str(tree), cwd=root)
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            _git("worktree", "prune", cwd=root)


def run_child(kind: str, kwargs: dict, tree: Path) -> dict:
    """One run of `kind` in a fresh process whose kit is `tree`'s; its result (RuntimeError if it failed)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.setdefault("HF_HUB_OFFLINE", "1")
    job = json.dumps({"kind": kind, "kwargs": kwargs})
    proc = subprocess.run([sys.executable, "-c", CHILD, str(Path(__file__).resolve()), job], env=env,
                          capture_output=True, text=True, check=False)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    if proc.returncode != 0 or not lines:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise RuntimeError(f"bench {kind} in {tree} failed (exit {proc.returncode}):\n{tail}")
    out = json.loads(lines[-1][len(MARK):])
    if not Path(out["kit_file"]).resolve().is_relative_to(tree.resolve()):
        raise RuntimeError(f"the child for {tree} imported kit from {out['kit_file']}")
    return out


def run_against(kind: str, kwargs: dict, rev: str, repeats: int = 3,
                log: Callable[[str], None] | None = print) -> dict:
    """`repeats` rounds of (this checkout, `rev`), each run in its own process; every raw result, the
    medians and the ratios (see the module doc). `kwargs`: the child's arguments (sft: bench_sft's;
    grpo: bench_grpo's, plus threads)."""
    current = checkout_root()
    with rev_worktree(rev) as (tree, sha):
        arms = {"current": {"name": "current", "tree": str(current), "results": []},
                "against": {"name": rev, "tree": str(tree), "sha": sha, "results": []}}
        for k in range(repeats):
            for key, where in (("current", current), ("against", tree)):
                res = run_child(kind, kwargs, where)
                arms[key]["results"].append(res)
                if log is not None:
                    label, get, fmt = next(row for row in ROWS[kind]() if row[0] == HEADLINE[kind])
                    log(f"round {k + 1}/{repeats} {arms[key]['name']}: {label} {_fmt(_value(get, res), fmt)} "
                        f"(kit from {res['kit_file']})")
    mc, mr = medians(kind, arms["current"]["results"]), medians(kind, arms["against"]["results"])
    head = HEADLINE[kind]
    get = next(row[1] for row in ROWS[kind]() if row[0] == head)
    rounds = [_ratio(_value(get, a), _value(get, b))
              for a, b in zip(arms["current"]["results"], arms["against"]["results"], strict=True)]
    ratios = {label: _ratio(mc[label], mr[label]) for label in mc}
    headline = {"label": head, "ratio": ratios[head], "rounds": [r for r in rounds if r is not None]}
    return {"kind": kind, "against": rev, "sha": sha, "repeats": repeats, "kwargs": kwargs, "arms": arms,
            "medians": {"current": mc, "against": mr}, "ratios": ratios, "headline": headline}
