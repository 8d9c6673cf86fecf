"""The report's "Paired comparisons" table: pass^1 of two evaluations scored on the same tasks, B − A,
with a paired bootstrap interval, a sign-flip p-value and the difference the number of tasks can
detect (kit/eval/paired.py computes them).

    section = paired_section(data, bootstrap=2000, ci=0.95)                   # a run's report
    section = paired_section(merged, 2000, 0.95, across_runs=True)            # `kit compare`

Which pairs: evaluations of one domain that share task ids (only the shared ones count; the row says
how many were left out), never an evaluation with itself (an arm's shared evaluation is one
evaluation). In a run, a pair whose A or B is a reference arm (its label, arm or stage id has the word
"base" or "sft") is oriented reference → other and listed first, then the others in stage order. In a
comparison of runs, only pairs across runs, A from the run named first; those of one stage id first.
Pairs judged by different referees (user model, its temperature, the protocol) come last, and the
referee column says that they differ: such a difference is the agent's and the referee's together.
At most MAX_PAIRS rows; the section says how many more there were.

    section = changes_section(data)      # what the agents did differently, for the first pairs above

"What changed" (kit/eval/behaviour.py), for the first MAX_CHANGE_PAIRS pairs judged by one referee: each
arm's behaviour read from its episodes (calls, writes, the right write tool, exact writes, grounded ids,
its most common script and how much of the arm plays it), and the tasks whose pass rate moved, with the
calls each arm made on them.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from itertools import combinations
from typing import Optional

import pandas as pd

from kit.eval.paired import PairedDiff, outcomes_by_task, paired_difference
from kit.report.run_data import Section, eval_label

MAX_PAIRS = 12
MAX_CHANGE_PAIRS = 3
MAX_SLICE_PAIRS = 3
SLICE_KEYS = ("phrasing", "shape")
REFERENCE_WORDS = {"base", "sft"}


def eval_name(ev: dict) -> str:
    """The evaluation as the report names it: its label (kit.report.run_data.eval_label: flagged when its
    agent was never trained), after its arm when the label does not say it."""
    label = eval_label(ev)
    arm = ev.get("arm")
    return label if not arm or label.startswith(str(arm)) else f"{arm}: {label}"


def is_reference(ev: dict) -> bool:
    """A base or SFT arm, named so in the evaluation's label, arm or stage id."""
    text = " ".join(str(x) for x in (ev["summary"].get("label"), ev["params"].get("label"), ev.get("arm"), ev["id"])
                    if x)
    return bool(REFERENCE_WORDS & set(re.split(r"[^a-z0-9]+", text.lower())))


def referee(ev: dict) -> tuple:
    """What judges an evaluation besides the agent: protocol, user simulator, its temperature."""
    meta = ev["meta"]
    return (meta.get("protocol") or "kit", str(meta.get("user_model")), meta.get("user_temperature"))


def _run_of(ev: dict) -> str:
    return str(ev.get("arm"))


def candidate_pairs(evals: list[dict], across_runs: bool = False) -> list[tuple[dict, dict, dict, dict]]:
    """(A, A's outcomes, B, B's outcomes) in the order shown (module docstring), not yet capped; outcomes
    are kit.eval.paired.outcomes_by_task of the evaluation's episodes."""
    outcomes = [(ev, outcomes_by_task(ev["episodes"])) for ev in evals]
    runs = list(dict.fromkeys(_run_of(ev) for ev in evals))
    scored = []
    for (i, (a, oa)), (j, (b, ob)) in combinations(enumerate(outcomes), 2):
        if str(a["dir"]) == str(b["dir"]) or a["meta"].get("domain") != b["meta"].get("domain"):
            continue  # one evaluation (shared between arms), or two domains
        if not set(oa) & set(ob) or (across_runs and _run_of(a) == _run_of(b)):
            continue
        if across_runs:
            if runs.index(_run_of(a)) > runs.index(_run_of(b)):
                a, oa, b, ob = b, ob, a, oa
            first = a["id"] == b["id"]
        else:
            if is_reference(b) and not is_reference(a):
                a, oa, b, ob = b, ob, a, oa
            first = is_reference(a)
        scored.append(((referee(a) != referee(b), not first, i, j), (a, oa, b, ob)))
    return [pair for _, pair in sorted(scored, key=lambda s: s[0])]


def paired_rows(evals: list[dict], n_boot: int = 2000, ci: float = 0.95, across_runs: bool = False,
                short: Callable[[str], str] = str) -> tuple[list[PairedDiff], pd.DataFrame, int]:
    """(the PairedDiffs shown, their table, how many pairs were left out past MAX_PAIRS)."""
    pairs = candidate_pairs(evals, across_runs)
    diffs, rows = [], []
    for a, oa, b, ob in pairs[:MAX_PAIRS]:
        res = paired_difference(oa, ob, eval_name(a), eval_name(b), ci=ci, n_boot=n_boot)
        ra, rb = referee(a), referee(b)
        judged = short(ra[1]) if ra == rb else f"differs: {_referee_text(ra, short)} vs {_referee_text(rb, short)}"
        diffs.append(res)
        rows.append({**res.to_row(), "referee": judged})
    table = pd.DataFrame(rows)
    if len(table) and table["McNemar p"].isna().all():
        table = table.drop(columns=["McNemar p"])  # no pair with one 0/1 trial per task: nothing to show
    elif len(table):
        table["McNemar p"] = pd.to_numeric(table["McNemar p"])  # None where it does not apply: shown as –
    return diffs, table, max(0, len(pairs) - MAX_PAIRS)


def _referee_text(r: tuple, short: Callable[[str], str]) -> str:
    protocol, user, temp = r
    return f"{short(user)} ({protocol}{'' if temp is None else f', T={temp}'})"


def paired_section(data: dict, bootstrap: int, ci: float, across_runs: bool = False,
                   short: Callable[[str], str] = str) -> Optional[Section]:
    """The section, or None when no two evaluations share a task (0 or 1 evaluation, disjoint sets)."""
    diffs, table, left_out = paired_rows(data.get("evals") or [], bootstrap, ci, across_runs, short)
    data["paired"] = diffs
    if not diffs:
        return None
    sec = Section("Paired comparisons")
    sec.text("Two evaluations scored on the same tasks, compared task by task (B − A; only "
             "tasks both were scored on count, matched by task id; <i>unmatched</i>: tasks left out). "
             "A task's pass^1 is its mean success over its trials; Δ is the mean per-task difference. "
             f"{int(ci * 100)}% CI: paired bootstrap over tasks ({bootstrap} resamples). p: paired sign-flip "
             "permutation test (exact up to 20 tasks that differ, else 20000 Monte Carlo draws); McNemar p: its "
             "exact test, given for one 0/1 trial per task. MDE: the smallest true difference these tasks "
             "detect with two-sided α = 0.05 and power 0.8, (z<sub>0.975</sub> + z<sub>0.8</sub>) · sd(d) / √n, "
             "from the observed sd of the per-task differences, or a planning sd of √0.5 (half the tasks "
             "discordant) when there are under 5 tasks or the observed sd is 0 (kit/eval/paired.py). "
             + ("Pairs across runs only." if across_runs else
                "Each arm against the base / SFT evaluations first, then the other pairs."))
    sec.table(table)
    if left_out:
        sec.text(f"{left_out} more pairs not shown (the first {MAX_PAIRS} above).")
    slices = slice_rows(data.get("evals") or [], bootstrap, ci, across_runs)
    if len(slices):
        sec.text("The same comparison within each phrasing (template: the kit's wordings; free_form: written "
                 "in tau2's style; tau2: tau2's own tasks) and each task shape, for the first "
                 f"{MAX_SLICE_PAIRS} pairs judged by one referee: a gain confined to one wording shows here.")
        sec.table(slices)
    return sec


def _labels_by_task(ev: dict) -> dict[str, dict]:
    """{task id: {"phrasing": ..., "shape": ...}} from an evaluation's episode rows (None where absent)."""
    eps = ev.get("episodes")
    if eps is None:
        return {}
    out: dict[str, dict] = {}
    for r in (eps.to_dict(orient="records") if isinstance(eps, pd.DataFrame) else eps):
        out.setdefault(str(r["task_id"]), {k: r[k] if isinstance(r.get(k), str) and r[k] else None
                                           for k in SLICE_KEYS})  # NaN / missing: no label
    return out


def slice_rows(evals: list[dict], n_boot: int = 2000, ci: float = 0.95, across_runs: bool = False) -> pd.DataFrame:
    """Paired B − A within each phrasing and shape (the labels eval.json's episodes carry) for the first
    MAX_SLICE_PAIRS same-referee pairs; one row per (pair, slice) with at least 2 shared tasks."""
    rows = []
    pairs = [p for p in candidate_pairs(evals, across_runs) if referee(p[0]) == referee(p[2])]
    for a, oa, b, ob in pairs[:MAX_SLICE_PAIRS]:
        labels = {**_labels_by_task(b), **_labels_by_task(a)}
        shared = set(oa) & set(ob)
        for key in SLICE_KEYS:
            values = sorted({str(labels[t][key]) for t in shared if t in labels and labels[t].get(key)})
            if len(values) < 2 and key == "shape":
                continue  # one shape: the slice is the whole pair, already above
            for v in values:
                tasks = [t for t in shared if t in labels and str(labels[t].get(key)) == v]
                if len(tasks) < 2:
                    continue
                res = paired_difference({t: oa[t] for t in tasks}, {t: ob[t] for t in tasks}, eval_name(a),
                                        eval_name(b), ci=ci, n_boot=n_boot)
                row = res.to_row()
                rows.append({"A": row["A"], "B": row["B"], "slice": f"{key}: {v}", "tasks": row["tasks"],
                             "pass^1 A": row["pass^1 A"], "pass^1 B": row["pass^1 B"], "Δ (B−A)": row["Δ (B−A)"],
                             f"{int(ci * 100)}% CI": row[f"{int(ci * 100)}% CI"], "p": row["p"],
                             "B wins / A wins / ties": row["B wins / A wins / ties"]})
    return pd.DataFrame(rows)


def _arm_episodes(ev: dict) -> tuple:
    """(domain, {task id: Task}, trajectories, rewards) of an evaluation, as the episode browser reads them."""
    from pathlib import Path

    from kit.report.episodes import _eval_inputs, _eval_tasks

    cfg, rows, trajs = _eval_inputs(Path(ev["dir"]))
    if not trajs:
        return None, {}, {}, {}
    dom, tasks = _eval_tasks(cfg)
    rewards = {k: float(rows[k]["reward"]) for k in trajs if k in rows and rows[k].get("reward") is not None}
    return dom, tasks, {k: t for k, t in trajs.items() if k in rewards}, rewards


def changes_section(data: dict, across_runs: bool = False) -> Optional[Section]:
    """What the agents of the first paired arms (same referee) did differently; None without such a pair or
    without recorded trajectories."""
    from kit.eval.behaviour import arm_profile, changed_tasks

    pairs = [p for p in candidate_pairs(data.get("evals") or [], across_runs) if referee(p[0]) == referee(p[2])]
    sec = Section("What changed between paired arms")
    sec.text("Read from the episodes (kit/eval/behaviour.py), assistant calls only. <i>wrote</i>: episodes with "
             "a write call; <i>right write tool</i>: the write tools called are the gold's; <i>exact write</i>: "
             "every gold write made with the gold's compared arguments; <i>writes grounded</i>: every argument of "
             "the writes appeared earlier in the dialogue (a made-up id does not); <i>script share</i>: the "
             "fraction of episodes that play the arm's most common call sequence (near 1: one script whatever "
             "the request). Below each pair: the tasks whose pass rate moved, with each arm's calls.")
    shown = 0
    for a, _, b, _ in pairs[:MAX_CHANGE_PAIRS]:
        try:
            dom, tasks, ta, ra = _arm_episodes(a)
            _, tasks_b, tb, rb = _arm_episodes(b)
        except Exception as e:  # a folder without trajectories (old run, deleted files): say so, keep the report
            sec.text(f"{html.escape(eval_name(a))} vs {html.escape(eval_name(b))}: episodes not readable ({e})")
            continue
        if not ta or not tb:
            continue
        tasks = {**tasks_b, **tasks}
        prof = pd.DataFrame([{"arm": f"A: {eval_name(a)}", **arm_profile(dom, tasks, ta, ra)},
                             {"arm": f"B: {eval_name(b)}", **arm_profile(dom, tasks, tb, rb)}])
        sec.text(f"<b>A</b> {html.escape(eval_name(a))} → <b>B</b> {html.escape(eval_name(b))}")
        sec.table(prof)
        moved = changed_tasks(dom, tasks, (ta, ra), (tb, rb))
        sec.table(moved) if len(moved) else sec.text("No task's pass rate moved.")
        shown += 1
    return sec if shown else None
