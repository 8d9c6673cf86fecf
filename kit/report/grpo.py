"""The report's GRPO section: what each grpo stage trained, reward and dynamic filtering per step,
where the time went, the learning curve and the curriculum's probes.

    section = grpo_section(data, out, figures)     # data: kit.report.run_data.collect(run)
    grpo_row(data["grpo_runs"][0])                 # one stage's line of the table

Read from the files the stage wrote (kit/stages/grpo.py): stage.json (its Outputs: trained steps,
skip reasons, best and last validation pass^1), metrics.jsonl (one line per step: reward, filtered
fraction, episodes a server failed and user-fault episodes, time split), curve.jsonl (one line per learning-curve point), probes.jsonl (one line per
probe: the band and every task's pass rate).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Optional

import pandas as pd

from kit import metrics as M
from kit.report.figures import int_ticks, new_figure, save
from kit.report.run_data import Section


def fig_grpo(runs: list[dict], path: Path) -> Path:
    fig = new_figure(10, 3.6)
    ax1, ax2 = fig.subplots(1, 2)
    for r in runs:
        h = r["history"]
        if M.REWARD_MEAN in h:
            ax1.plot(h["step"], h[M.REWARD_MEAN], "o-", label=r["key"])
        if M.FILTERED_FRAC in h:
            ax2.plot(h["step"], h[M.FILTERED_FRAC], "o-", label=r["key"])
    steps = [v for r in runs for v in (r["history"]["step"] if "step" in r["history"] else [])]
    int_ticks(ax1, steps)
    int_ticks(ax2, steps)
    ax1.set(xlabel="step", ylabel="mean reward", title="GRPO reward", ylim=(-0.05, 1.05))
    ax2.set(xlabel="step", ylabel="fraction of groups dropped", title="dynamic filtering", ylim=(-0.05, 1.05))
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=7)
    return save(fig, path)


def fig_grpo_curve(run: dict, path: Path) -> Path:
    """One GRPO stage's learning curve (validation pass^1 with its 95% interval, the best point marked)
    on the axes of its training reward per step (both are rates in [0, 1])."""
    curve, h, o = run["curve"], run["history"], run["outputs"]
    fig = new_figure(7.5, 3.8)
    ax = fig.subplots()
    if M.REWARD_MEAN in h:
        ax.plot(h["step"], h[M.REWARD_MEAN], ".-", color="#a5a5a5", label="training reward (mean over the step's rollouts)")
    lo, hi = zip(*curve["ci95"])
    ax.fill_between(curve["step"], lo, hi, color="#4472c4", alpha=0.2, label="95% interval")
    ax.plot(curve["step"], curve["pass1"], "o-", color="#4472c4", label="validation pass^1")
    best_step = o.best_step if o.best_step is not None else int(curve.loc[curve["pass1"].idxmax(), "step"])
    best = curve[curve["step"] == best_step]
    if len(best):
        y = float(best["pass1"].iloc[0])
        ax.plot([best_step], [y], "*", ms=16, color="#c00000", label=f"best: step {best_step}, {y:.3f} (model_best/)")
    int_ticks(ax, list(curve["step"]) + list(h["step"] if "step" in h else []))
    first = curve.iloc[0]
    ax.set(xlabel="step (a validation point: after that many steps)", ylabel="rate", ylim=(-0.05, 1.05),
           title=f"{run['key']}: pass^1 on {first['split']} ({int(first['tasks'])} tasks x {int(first['trials'])} "
                 f"trial(s), T={first['temperature']:g})")
    ax.legend(fontsize=7)
    return save(fig, path)


def _per_step(h: pd.DataFrame, col: str, absent: Optional[float] = None) -> Optional[float]:
    """A time column's total over the run divided by the steps (a step without it counts 0); `absent`
    when no step has it."""
    return float(h[col].fillna(0).sum()) / len(h) if col in h and len(h) else absent


def _total(h: pd.DataFrame, col: str) -> Optional[int]:
    """A count column's total over the steps; None when no step has it (a run from before it was counted)."""
    return int(h[col].fillna(0).sum()) if col in h and len(h) else None


def user_faults_text(h: pd.DataFrame) -> Optional[str]:
    """The failed episodes attribution put on the user simulator, over the run: how many, how many were masked
    (left out of the advantages) and replaced, and per rule; None for a run without user-fault counts."""
    found = _total(h, M.USER_FAULTS)
    if found is None:
        return None
    masked, replaced = _total(h, M.USER_FAULT_MASKED) or 0, _total(h, M.USER_FAULT_RESAMPLED) or 0
    prefix = M.user_fault_key("")
    rules = sorted(((c[len(prefix):], _total(h, c) or 0) for c in h.columns if c.startswith(prefix)),
                   key=lambda x: (-x[1], x[0]))
    how = f"{masked} masked, {replaced} replaced" if masked else "kept (trained on)"
    by = "; " + ", ".join(f"{rule} {n}" for rule, n in rules if n) if any(n for _, n in rules) else ""
    return f"{found} ({how}{by})" if found else "0"


def grpo_row(r: dict) -> dict:
    """One GRPO stage's line: what trained, its validation points, reward, and where its time went."""
    h, o, curve = r["history"], r["outputs"], r["curve"]
    n = len(h)
    recorded = "trained_steps" in r["summary"]  # a stage.json from before GRPO counted its applied steps has not
    probe_total = sum(p.get("probe_s") or 0 for p in r["probes"])
    eval_total = float(curve["eval_s"].sum()) if "eval_s" in curve else None
    return {"stage": r["key"],
            "what happened": o.what_happened() if recorded else f"GRPO {n} steps (which trained: not recorded)",
            "trained steps": f"{o.trained_steps}/{o.steps}" if recorded else None,
            "skip reasons": ", ".join(f"{k}: {v}" for k, v in o.skip_reasons.items()) or "none",
            M.label(M.INFRA_FAILED): _total(h, M.INFRA_FAILED),
            M.label(M.USER_FAULTS): user_faults_text(h),
            "best step": o.best_step, "best val pass^1": o.best_pass1, "last val pass^1": o.last_pass1,
            "user simulator": o.user_tag, "tasks from": str(o.task_source), "tasks": o.tasks,
            "reward first": h[M.REWARD_MEAN].iloc[0] if M.REWARD_MEAN in h and n else None,
            "reward last": h[M.REWARD_MEAN].iloc[-1] if M.REWARD_MEAN in h and n else None,
            "filtered frac (mean)": h[M.FILTERED_FRAC].mean() if M.FILTERED_FRAC in h else None,
            M.label(M.USER_DEVIATION_RATE): h[M.USER_DEVIATION_RATE].mean() if M.USER_DEVIATION_RATE in h else None,
            "rollout s/step": _per_step(h, "time/rollout_s"), "score s/step": _per_step(h, "time/score_s"),
            "update s/step": _per_step(h, "time/update_s", 0.0 if "time/rollout_s" in h else None),  # all skipped
            "probe s/step": probe_total / n if r["probes"] and n else _per_step(h, "time/probe_s"),
            "eval s/step": eval_total / n if eval_total is not None and n else _per_step(h, "time/eval_s"),
            "step s (mean)": h[M.STEP_TIME].mean() if M.STEP_TIME in h else None}


def probe_rows(r: dict) -> pd.DataFrame:
    """One line per curriculum probe of a GRPO stage (probes.jsonl)."""
    return pd.DataFrame([{"stage": r["key"], "before step": p["step"], "tasks probed": p["tasks"],
                          "episodes per task": p["probe_k"], "band": f"[{p['band_min']:g}, {p['band_max']:g}]",
                          "band size": p["band_size"], "always solved": p["always"], "never solved": p["never"],
                          "mean rate": p["mean_rate"], "band empty": "yes" if p["band_empty"] else "no",
                          "probe s": p["probe_s"]} for p in r["probes"]])


def rate_histogram(probe: dict) -> pd.DataFrame:
    """A probe's tasks per pass rate: one column per k/probe_k (k = 0..probe_k), one row of counts;
    the columns whose rate lies in the band are marked '*'."""
    k = probe["probe_k"]
    counts = {j: 0 for j in range(k + 1)}
    for rate in probe["rates"].values():
        counts[round(rate * k)] += 1
    star = {j: "*" if probe["band_min"] <= j / k <= probe["band_max"] else "" for j in counts}
    return pd.DataFrame([{f"{j}/{k}{star[j]}": n for j, n in counts.items()}])


def task_rows(r: dict) -> pd.DataFrame:
    """One row per RL task a GRPO stage drew (metrics.jsonl's `groups`: task, rewards, kept): its first
    probe's pass rate, how often it was drawn, each draw as 'step: successes/G' (filtered groups in
    brackets), and its success rate over the first and the second half of its draws. Empty for runs
    whose metrics carry no groups (before 2026-12-02)."""
    h = r.get("history")
    if h is None or "groups" not in getattr(h, "columns", []):
        return pd.DataFrame()
    rates = (r["probes"][0].get("rates") or {}) if r.get("probes") else {}
    draws: dict[str, list[tuple[int, list[float], bool, int]]] = {}
    for step, groups in zip(h["step"], h["groups"]):
        for g in groups if isinstance(groups, list) else []:
            draws.setdefault(g["task"], []).append((int(step), g["rewards"], bool(g["kept"]), g.get("masked", 0)))

    def one(step: int, rw: list[float], kept: bool, masked: int) -> str:
        t = f"{step}: {sum(x >= 1.0 for x in rw)}/{len(rw)}" + (f" (+{masked} user)" if masked else "")
        return t if kept else f"[{t}]"

    rows = []
    for task, ds in sorted(draws.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        ds = [d for d in ds if d[1]]  # a group every episode of which was masked or failed by a server
        if not ds:
            continue
        wins = [sum(x >= 1.0 for x in rw) / len(rw) for _, rw, _, _ in ds]
        half = len(wins) // 2
        text = ", ".join(one(*d) for d in ds)
        rows.append({"task": task, "probe rate": rates.get(task), "draws": len(ds), "step: solved/G": text,
                     "first half": round(sum(wins[:half]) / half, 3) if half else None,
                     "second half": round(sum(wins[half:]) / (len(wins) - half), 3)})
    return pd.DataFrame(rows)


def grpo_section(data: dict, out: Path, figures: list) -> Optional[Section]:
    """GRPO runs: what trained, reward and dynamic filtering per step, the learning curve, the curriculum."""
    if not data["grpo_runs"]:
        return None
    gr = Section("GRPO: reward and dynamic filtering")
    gr.text("Per stage: what the policy it wrote is (the updates applied, or why none was), its learning "
            "curve's best and last validation pass^1, reward and filtering, and where its time went: each "
            "phase's total over the run divided by its steps (rollout: sampling the episodes; score: the "
            "checkers; update: the PPO-clip minibatches, 0 on a skipped step; probe: the curriculum's probes; "
            "eval: every learning-curve point, the one after the last step included; step s: rollout, score "
            "and update of one step). Episodes left out of the advantages: those a server failed (never scored), "
            "and the failed ones failure attribution put on the user simulator (user-fault episodes: masked and "
            "replaced within the resample budget under <i>user_faults: mask</i>, trained on under <i>keep</i>; "
            "per attribution rule). Per step: mean checker reward over every rollout drawn (kept, filtered or "
            "masked), and the fraction of groups dynamic filtering dropped (all rewards equal: no signal).")
    gr.table(pd.DataFrame([grpo_row(r) for r in data["grpo_runs"]]))
    figures.append(fig_grpo(data["grpo_runs"], out / "grpo.png"))
    gr.figure(figures[-1])
    with_curve = [r for r in data["grpo_runs"] if len(r["curve"])]
    if with_curve:
        gr.text("Learning curve (kit/train/grpo_curve.py): pass^1 of the current policy on a validation split "
                "neither trained on nor the final test set, before the first step, every <i>eval_every</i> "
                "steps and after the last, with its 95% bootstrap interval over tasks; the best point's policy "
                "is model_best/, the last model/. Beside it, the training reward of each step's rollouts (the "
                "training tasks, at the training temperature).")
    for i, r in enumerate(with_curve):
        figures.append(fig_grpo_curve(r, out / f"grpo_curve{'' if i == 0 else f'_{i + 1}'}.png"))
        gr.figure(figures[-1])
    with_probes = [r for r in data["grpo_runs"] if r["probes"]]
    if with_probes:
        gr.text("Curriculum (kit/train/grpo_curriculum.py): before the first step (and every <i>probe_every</i> "
                "steps) the policy runs <i>probe_k</i> episodes of every RL task; the steps draw from the tasks "
                "whose pass rate lies in the band (always or never solved: their groups would be filtered). "
                "An empty band falls back to every task.")
        gr.table(pd.concat([probe_rows(r) for r in with_probes], ignore_index=True))
        for r in with_probes:
            gr.text(f"<b>{html.escape(r['key'])}</b>, first probe: tasks per pass rate (episodes solved of "
                    f"{r['probes'][0]['probe_k']}; * in the band)")
            gr.table(rate_histogram(r["probes"][0]))
    for r in data["grpo_runs"]:
        tasks = task_rows(r)
        if len(tasks):
            gr.text(f"<b>{html.escape(r['key'])}</b>, the RL tasks the steps drew: each draw's episodes solved "
                    "of those trained on ([…]: the group was filtered; +k user: k user-fault episodes masked), and "
                    "the task's success rate over the first and the second half of its draws: whether the policy "
                    "got better on the tasks it trained on.")
            gr.table(tasks)
    return gr
