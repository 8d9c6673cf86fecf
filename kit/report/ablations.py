"""The ablation page (`kit ablations`): one answer for a batch of ablation runs.

    page = ablations_page(["runs/ablation-no-validation", "runs/ablation-user-model"], "reports/ablations")

Per ablation run (a recipe with `arms:`), one table, one row per arm (its last evaluation):
  - pass^1 with its interval (tasks, then trials within a task: kit.eval.passk.pass1_interval);
  - against the recipe's reference arm (`comparison.reference`, else `default_reference`), on the tasks
    both were scored on: the paired difference with its interval, the sign-flip p-value and the
    smallest difference this many tasks could detect (kit.eval.paired);
  - the paper's number for the arm and the paper's difference to its reference arm, and the verdict:
    `reproduced` (same sign, significant: the interval excludes 0 and the sign-flip p is below 0.05; the
    percentile bootstrap alone can exclude 0 on a few discordant tasks, 4 of 189 say, where the exact test
    gives p = 0.125), `same sign, not significant`, `opposite sign, not significant`, `opposite`
    (significant the other way), or `no paper number`;
  - for an arm with its own engine run (the data its agent SFT'd on: `engine_columns`), what the data was:
    proposals, accepted tasks, SFT samples kept and dropped as ungrounded, accepted tasks validation would
    have rejected (an arm without validation), and the realized task mix per round (entropy over gold tool
    patterns, share of the domain's write tools covered), and how many of those samples its SFT trained on
    (`trained_columns`: arms sharing one engine run differ here): a data-side arm differs first in its data;
  - for an arm with a GRPO stage, what its RL saw (`rl_columns`): steps trained, rollout episodes, reward
    (mean and the within-group spread, the noise a user adds), the share of groups with any signal, the
    effective batch (kept groups x G per step), resamples, and the rollout user's request-stated,
    proper-end and deviation rates: what tells a mute user from a noisy one, or one batch shape from another;
  - what produced the number: the referee user simulator (and how often it stated the request), temperatures, turn cap, tokens per turn (and
    how many gold calls and customer openings they cut: kit.rollout.loop.token_caps_cut), tasks and
    trials. Arms of one recipe judged by different referees or tasks are flagged;
  - how many paired tasks the observed difference would need to be detected (alpha 0.05, power 0.8, at
    the observed per-task sd: kit.eval.paired.tasks_needed): what a direction not reproduced asks for.
Below it, the arms other than the reference paired among themselves (`arm_pairs`: the paper's other orderings,
fine-tuned user > raw user, 8x64 > 16x16). A summary table on top lists every non-reference arm's verdict and
every such pair the paper has numbers for, so the page answers "which of the paper's directions did this batch
reproduce" in one place.

The batch may run in parts, on different machines (each recipe is one to two hours on 2 cores): every page
saves each run's rows beside itself (`rows/<run name>.json`: the recipe's spec, the rows, the pairs, the warnings, the
run folder and when), and a later page over other run folders carries the saved rows of the runs it was
not given, labelled as such (`saved_sections`). A run folder given supersedes its saved rows.
"""

from __future__ import annotations

import html
import json
import math
import time
from pathlib import Path
from typing import Any, Optional

import pandas as pd

import kit.metrics as M
from kit.eval.paired import ALPHA, tasks_needed
from kit.report.cost import RecipeCost, recipe_cost
from kit.report.run_data import Section, collect, run_folder

BASE_WORDS = ("base",)
CURVE = "_curve"  # a row's learning-curve points (saved with the rows, drawn on the page, not a table column)
# the recipes' run names in the paper's order (kit ablations runs them in it; the page lists them in it)
PAPER_ORDER = ("ablation-no-validation", "ablation-no-evolution", "ablation-user-model", "ablation-batch-size",
               "ablation-dynamic-filtering")


def paper_rank(name: str) -> tuple[int, str]:
    """Where a run's section goes: the paper's order, a renamed earlier configuration of a recipe
    ("ablation-user-model-30x2x8") right after the recipe's own, anything else last."""
    for i, known in enumerate(PAPER_ORDER):
        if name == known or name.startswith(known + "-"):
            return i, name
    return len(PAPER_ORDER), name


def default_reference(arms: list[dict]) -> Optional[str]:
    """The first arm with a paper number whose name is not a base arm's (the trained arm the others
    vary), else the first arm."""
    for a in arms:
        if a.get("paper") is not None and a["name"] not in BASE_WORDS:
            return a["name"]
    return arms[0]["name"] if arms else None


def verdict(paper_diff: Optional[float], diff: Optional[float], ci: Optional[tuple], p: Optional[float] = None) -> str:
    """Does our paired difference show the paper's direction? (module docstring)."""
    if paper_diff is None or diff is None or ci is None:
        return "no paper number" if paper_diff is None else "not compared"
    lo, hi = ci
    same = (diff > 0) == (paper_diff > 0) and diff != 0
    if (lo > 0 or hi < 0) and (p is None or p < ALPHA):
        return "reproduced" if same else "opposite"
    return "same sign, not significant" if same else ("no difference" if diff == 0 else "opposite sign, not significant")


def rl_columns(run: Optional[dict]) -> dict:
    """The ablation row's RL block for one GRPO stage's report entry (kit.stages.grpo.report_entry): means
    over its steps of metrics.jsonl. Empty for an arm without GRPO."""
    if run is None:
        return {}
    h, o = run["history"], run["outputs"]
    g = (run.get("params") or {}).get("group_size")

    def mean(col):
        return float(h[col].mean()) if col in h and len(h) else None

    kept = mean(M.GROUPS_KEPT)
    filtered = mean(M.FILTERED_FRAC)
    curve = validation_curve(run)
    # a group has signal when its scores (rewards, less the failed-call penalty) differ: read from the groups
    # metrics.jsonl lists, filtered or not (an unfiltered arm keeps groups without signal), pooled over every
    # group drawn; without those lists, the mean over steps of what the filter dropped
    drawn = [g for gs in (h["groups"] if "groups" in h else []) if isinstance(gs, list) for g in gs]
    signal = (sum(len(set(g.get("scores") or g.get("rewards") or [])) > 1 for g in drawn) / len(drawn) if drawn
              else None if filtered is None else 1.0 - filtered)
    if drawn:  # the same pool of groups: the share the filter dropped, over every group drawn
        filtered = sum(not g.get("kept", True) for g in drawn) / len(drawn)
    return {"validation pass^1 by step": " -> ".join(f"{s}: {p:.3f}" for s, _, p in curve) or None,
            CURVE: [[e, p] for _, e, p in curve if e is not None] or None,
            "RL steps trained": f"{o.trained_steps}/{o.steps}", "RL episodes": o.episodes,
            "RL reward (mean)": mean(M.REWARD_MEAN), "RL reward sd (in a step)": mean(M.REWARD_STD),
            "groups with signal": signal, "groups filtered": filtered,
            "effective batch (episodes/step)": kept * g if kept is not None and g else None,
            "resamples": int(h[M.GROUPS_RESAMPLES].sum()) if M.GROUPS_RESAMPLES in h and len(h) else None,
            "RL user": o.user_tag, "RL user request stated": mean(M.REQUEST_STATED_RATE),
            "RL user proper end": mean(M.PROPER_END_RATE), "RL user deviation": mean(M.USER_DEVIATION_RATE)}


def validation_curve(run: dict) -> list[tuple[int, Optional[int], float]]:
    """(step, rollout episodes scored by then, validation pass^1) per point of a GRPO stage's learning curve:
    what an RL arm learned against what it spent (the x axis on which arms of equal cost compare)."""
    h = run.get("history")
    spent = {}
    if isinstance(h, pd.DataFrame) and len(h) and M.EPISODES_TOTAL in h and "step" in h:
        spent = {int(st) + 1: int(e) for st, e in zip(h["step"], h[M.EPISODES_TOTAL]) if e == e}
    return [(int(p["step"]), 0 if int(p["step"]) == 0 else spent.get(int(p["step"])), float(p["pass1"]))
            for p in _records(run.get("curve")) if p.get("pass1") is not None]


def _records(x) -> list[dict]:
    """A report entry's curve: a DataFrame or a list of curve.jsonl records."""
    if isinstance(x, pd.DataFrame):
        return x.to_dict(orient="records")
    return list(x or [])


def curve_figure(name: str, df: pd.DataFrame, out: Path) -> Optional[Path]:
    """One line per RL arm: validation pass^1 against the rollout episodes it had scored (None without curves)."""
    from kit.report.figures import new_figure, save

    if CURVE not in df:
        return None
    arms = [(r["arm"], r[CURVE]) for _, r in df.iterrows() if isinstance(r[CURVE], list) and r[CURVE]]
    if not arms:
        return None
    fig = new_figure(7.0, 3.4)
    ax = fig.subplots()
    for arm, pts in arms:
        ax.plot([e for e, _ in pts], [p for _, p in pts], marker="o", label=str(arm))
    ax.set_xlabel("rollout episodes scored (the arms' common budget)")
    ax.set_ylabel("validation pass^1")
    ax.set_title(f"{name}: GRPO's learning curve per arm", fontsize=10)
    ax.legend(fontsize=8)
    return save(fig, out / f"{name}-curve.png")


def _engine_of_arm(data: dict, eval_key: str) -> tuple[Optional[dict], Optional[dict]]:
    """(the engine report entry whose data the evaluated agent trained on, the manifest entry of the SFT stage
    that read it): from the evaluation's `model` reference back through the stages that made it (GRPO from its
    SFT start, SFT from its `data`), shared stages followed to the folder that ran; Nones for an agent that never
    trained on engine data."""
    from kit.report.run_data import _stage_dir

    by_key = {e.get("key"): e for e in data["manifest"].get("stages", [])}
    entry = by_key.get(eval_key)
    for _ in range(8):  # a chain of model stages, never a cycle
        refs = (entry or {}).get("references") or {}
        if "data" in refs:
            src = by_key.get(refs["data"])
            d = _stage_dir(src) if src else None
            return next((x for x in data["engine"] if d is not None and str(x["dir"]) == str(d)), None), entry
        entry = by_key.get(refs.get("model"))
        if entry is None:
            return None, None
    return None, None


def same_model(a: Any, b: Any) -> bool:
    """Two model references name the same model: the same text, or two folders whose files a backend reads are
    byte for byte the same (kit.llm.weights: a stage reused by `kit run --keep` names its first run's folder)."""
    from kit.llm.weights import weights_digest

    if str(a) == str(b):
        return True
    da = weights_digest(a)
    return da is not None and da == weights_digest(b)


def trained_columns(sft: Optional[dict]) -> dict:
    """What the arm's SFT trained on of its engine's data (the manifest's SFT entry): the samples, and which of
    them when the arms share one engine run (`validated_only`: the samples its validation keeps)."""
    if not sft:
        return {}
    params = sft.get("params") or {}
    return {"data: SFT samples trained": (sft.get("summary") or {}).get("samples"),
            "data: trained on": "validated samples" if params.get("validated_only") else "every sample"}


def engine_columns(run: Optional[dict]) -> dict:
    """The ablation row's data block for one engine report entry (rounds.csv): totals over the rounds, and
    per round (a -> b -> c) the entropy of the accepted tasks' gold tool patterns and the write-tool coverage."""
    if run is None:
        return {}
    r = run["rounds"]

    def total(col):
        return int(r[col].sum()) if col in r and len(r) else None

    def per_round(col, fmt):
        return " -> ".join(fmt.format(v) for v in r[col]) if col in r and len(r) and r[col].notna().all() else None

    return {"data: proposals": total("proposals"), "data: accepted": total("accepted"),
            "data: SFT samples": total(M.AGENT_SAMPLES), "data: dropped ungrounded": total("sft_ungrounded"),
            "data: unvalidated accepted": total("unvalidated"),
            "data: rollouts (passed)": (f"{total('episodes')} ({round(float((r[M.PASS_RATE] * r['episodes']).sum()))})"
                                        if total("episodes") and M.PASS_RATE in r else None),
            "data: SFT samples from failed rollouts": total("unvalidated_samples"),
            "data: pattern entropy per round (bits)": per_round("pattern_entropy", "{:.2f}"),
            "data: write-tool coverage per round": per_round("write_coverage", "{:.2f}")}


def request_columns(episodes: pd.DataFrame) -> dict:
    """pass^1 over the episodes whose referee stated the request in its opening and over those whose did not
    (episodes.csv's request_stated; tasks with nothing the user must state are in neither), "rate (episodes)".
    An agent that learned to act on what it is told gains where the request was stated."""
    if "request_stated" not in episodes:
        return {}
    said = episodes["request_stated"].map({True: True, False: False, "True": True, "False": False})
    out = {}
    for name, mask in (("pass^1, request stated", said == True), ("pass^1, request not stated", said == False)):  # noqa: E712
        part = episodes.loc[mask, "reward"]
        out[name] = f"{(part == 1.0).mean():.3f} ({len(part)})" if len(part) else None
    return out


def _settings(meta: dict) -> dict:
    return {"referee user": str(meta.get("user_model")),
            "referee request stated": meta.get(M.REQUEST_STATED_RATE), "agent T": meta.get("temperature"),
            "user T": meta.get("user_temperature"), "turn cap (messages)": meta.get("max_messages"),
            "tokens/turn (agent, user)": (f"{meta.get('max_new_tokens')}, {meta.get('user_max_new_tokens')}"
                                          if meta.get("max_new_tokens") else None),
            "gold calls / openings cut by the caps": (f"{meta['token_caps']['calls_cut']} / "
                                                      f"{meta['token_caps']['openings_cut']}"
                                                      if meta.get("token_caps") else None),
            "tasks": meta.get("split") or meta.get("tasks_file"), "n tasks": meta.get("tasks"),
            "trials": meta.get("trials")}


def _arms_of(data: dict) -> tuple[dict, list[dict], Optional[str], dict[str, Optional[dict]]]:
    """(the recipe's spec, its arms, the reference arm's name, {arm name: its last evaluation or None}) of a
    collected run (kit.report.run_data.collect)."""
    spec = ((data["manifest"].get("recipe") or {}).get("parsed")) or {}
    arms = spec.get("arms") or []
    ref_name = (spec.get("comparison") or {}).get("reference") or default_reference(arms)
    last = {a["name"]: next((e for e in reversed(data["evals"]) if e["arm"] == a["name"]), None) for a in arms}
    return spec, arms, ref_name, last


def _arm_label(arm: dict, ev: Optional[dict]) -> str:
    """An arm's name on the page: its recipe label, followed by ' — <why>' when the agent its evaluation scored is
    a training stage's output that holds its start's weights (a skipped GRPO, a validation-best point before any
    update): the label says what was evaluated, not what the recipe intended."""
    prov = (ev or {}).get("provenance")
    label = arm.get("label") or arm["name"]
    return f"{label} — {prov.untrained}" if prov is not None and prov.untrained else label


def _paired_columns(d, delta_key: str) -> dict:
    """A paired difference (kit.eval.paired.PairedDiff) as the page's columns."""
    return {delta_key: d.diff, "Δ CI": f"[{d.ci95[0]:+.3f}, {d.ci95[1]:+.3f}]", "p": d.p_value, "MDE": d.mde,
            "paired tasks": d.n_tasks, "tasks this Δ needs": tasks_needed(d.diff, d.mde_sd)}


def arm_pairs(run_dir: str | Path, n_boot: int = 2000, ci: float = 0.95, data: Optional[dict] = None) -> pd.DataFrame:
    """The paired difference between every two evaluated arms that are not the reference (the main table pairs
    each with the reference), later arm minus earlier in the recipe's order, with the paper's difference where
    both arms have a paper number: the paper's other orderings (fine-tuned user > raw user, 8x64 > 16x16).
    `data`: the run already collected (kit.report.run_data.collect), not read again."""
    from kit.eval.paired import outcomes_by_task, paired_difference

    _, arms, ref_name, last = _arms_of(data if data is not None else collect(run_folder(run_dir)))
    # units: every evaluated arm but the reference, then every pool with two or more evaluated runs (its
    # replicates pooled per task); two replicates of one pool, or a pool and its own replicate, are not paired
    # (a pool stands after its last replicate, in the recipe's order)
    pools, units = pools_of(arms), []
    for a in arms:
        if a["name"] != ref_name and last[a["name"]] is not None:
            units.append((a, a.get("pool"), outcomes_by_task(last[a["name"]]["episodes"])))
        members = pools.get(a.get("pool") or "", [])
        evs = [last[m["name"]] for m in members if last[m["name"]] is not None]
        if members and a is members[-1] and len(evs) >= 2:
            units.append(({"name": a["pool"], "label": f"{a['pool']} (pooled: {len(evs)} runs)",
                           "paper": members[0].get("paper")}, a["pool"], pooled_outcomes(evs)))
    rows = []
    for i, (a, pool_a, out_a) in enumerate(units):
        for b, pool_b, out_b in units[i + 1:]:
            if pool_a is not None and pool_a == pool_b:
                continue
            la, lb = _arm_label(a, last.get(a["name"])), _arm_label(b, last.get(b["name"]))
            d = paired_difference(out_a, out_b, la, lb, ci=ci, n_boot=n_boot)
            paper = b["paper"] - a["paper"] if a.get("paper") is not None and b.get("paper") is not None else None
            rows.append({"arm": lb, "against": la, **_paired_columns(d, "Δ"), "paper Δ (points)": paper,
                         "verdict": verdict(paper, d.diff, d.ci95, d.p_value)})
    return pd.DataFrame(rows)


def ablation_rows(run_dir: str | Path, n_boot: int = 2000, ci: float = 0.95,
                  data: Optional[dict] = None) -> tuple[dict, pd.DataFrame, list[str]]:
    """(the recipe's spec, one row per arm, warnings) of one ablation run folder (`data`: already collected)."""
    from kit.eval.paired import outcomes_by_task, paired_difference
    from kit.report.build import bootstrap_pass1

    data = data if data is not None else collect(run_folder(run_dir))
    spec, arms, ref_name, last = _arms_of(data)
    ref_arm = next((a for a in arms if a["name"] == ref_name), None)
    ref_ev = last.get(ref_name)
    grpo = {r["arm"]: r for r in data["grpo_runs"]}  # an arm's (last) GRPO stage
    rows, warnings = [], []
    ref_label = _arm_label(ref_arm, ref_ev) if ref_arm else ref_name

    def score(row: dict, episodes, outcomes: dict, arm: dict, user_model: Any) -> dict:
        """`row` with its pass^1 and interval, its paired difference to the reference (where that is evaluated
        and the row is not it), `arm`'s paper number, the paper's difference and the verdict."""
        p1, lo, hi = bootstrap_pass1(episodes, n_boot, ci)
        row.update({"pass^1": p1, f"{int(ci * 100)}% CI": f"[{lo:.3f}, {hi:.3f}]"})
        paper = arm.get("paper")
        row.update({"paper arm": arm.get("paper_label"), "paper (%)": paper})
        if row["reference"]:
            return {**row, "paper Δ (points)": None, "verdict": "reference"}
        paper_diff = (paper - ref_arm["paper"] if ref_arm and paper is not None and ref_arm.get("paper") is not None
                      else None)
        d = None
        if ref_ev is not None:
            d = paired_difference(outcomes_by_task(ref_ev["episodes"]), outcomes, ref_label, row["arm"],
                                  ci=ci, n_boot=n_boot)
            row.update(_paired_columns(d, "Δ vs reference"))
            if d.unmatched:
                warnings.append(f"{row['arm']}: {d.unmatched} tasks scored in only one of it and the reference "
                                "(left out of the difference)")
            if not same_model(ref_ev["meta"].get("user_model"), user_model):
                warnings.append(f"{row['arm']}: referee user {user_model} differs from the reference's "
                                f"{ref_ev['meta'].get('user_model')}: the difference is not the agent's alone")
        return {**row, "paper Δ (points)": paper_diff,
                "verdict": verdict(paper_diff, d.diff if d else None, d.ci95 if d else None, d.p_value if d else None)}

    for arm in arms:
        ev = last[arm["name"]]
        row = {"arm": _arm_label(arm, ev), "reference": arm["name"] == ref_name}
        if ev is None:
            rows.append({**row, "pass^1": math.nan, "verdict": "not evaluated yet",
                         "paper arm": arm.get("paper_label"), "paper (%)": arm.get("paper")})
            continue
        row = score(row, ev["episodes"], outcomes_by_task(ev["episodes"]), arm,
                    ev["meta"].get("user_model"))
        engine, sft = _engine_of_arm(data, ev["key"])
        rows.append({**row, **engine_columns(engine), **trained_columns(sft), **rl_columns(grpo.get(arm["name"])),
                     **request_columns(ev["episodes"]), **_settings(ev["meta"])})
    for pool, members in pools_of(arms).items():
        evs = [last[a["name"]] for a in members if last[a["name"]] is not None]
        first = members[0]
        row = {"arm": f"{pool} (pooled: {len(evs)} of {len(members)} runs)", "reference": False,
               "pooled over": ", ".join(a["name"] for a in members)}
        if len(evs) < 2:
            rows.append({**row, "pass^1": math.nan, "verdict": "fewer than two of its runs evaluated yet",
                         "paper arm": first.get("paper_label"), "paper (%)": first.get("paper")})
            continue
        referees = {str(e["meta"].get("user_model")) for e in evs}
        if len(referees) > 1:
            warnings.append(f"{row['arm']}: its runs were judged by different referee users ({', '.join(sorted(referees))})")
        episodes = pd.concat([pd.DataFrame(e["episodes"]) for e in evs], ignore_index=True)
        row = score(row, episodes, pooled_outcomes(evs), first, evs[0]["meta"].get("user_model"))
        rows.append({**row, **request_columns(episodes), **_settings(evs[0]["meta"]),
                     "trials": f"{len(evs)} runs x {evs[0]['meta'].get('trials')}"})
    if ref_name and ref_ev is None and arms:
        warnings.append(f"the reference arm '{ref_name}' has no evaluation yet: no paired difference")
    return spec, pd.DataFrame(rows), warnings


def pools_of(arms: list[dict]) -> dict[str, list[dict]]:
    """{pool name: its arms, in the recipe's order} (ArmSpec.pool: replicates of one arm, e.g. GRPO seeds)."""
    out: dict[str, list[dict]] = {}
    for a in arms:
        if a.get("pool"):
            out.setdefault(a["pool"], []).append(a)
    return out


def pooled_outcomes(evaluations: list[dict]) -> dict[str, list[float]]:
    """{task id: every replicate's outcomes of it}: a task's pass rate in a pool is the mean over all its
    replicates' trials (kit.eval.paired.paired_difference averages a task's list), so the pool's pass^1 is the
    mean of its runs' pass^1 on the tasks they share, and its paired interval is over tasks, as every row's."""
    from kit.eval.paired import outcomes_by_task

    out: dict[str, list[float]] = {}
    for e in evaluations:
        for t, xs in outcomes_by_task(e["episodes"]).items():
            out.setdefault(t, []).extend(xs)
    return out


def save_rows(report_dir: str | Path, run_dir: str | Path, spec: dict, df: pd.DataFrame, warnings: list[str],
              pairs: Optional[pd.DataFrame] = None, cost: Optional[RecipeCost] = None) -> Path:
    """`report_dir/rows/<run name>.json`: what a later page needs to show this run without its folder."""
    out = Path(report_dir) / "rows"
    out.mkdir(parents=True, exist_ok=True)
    keep = {k: spec.get(k) for k in ("name", "description", "comparison", "arms")}
    doc = {"run_dir": str(run_dir), "saved": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "spec": keep,
           "rows": json.loads(df.to_json(orient="records", force_ascii=False)), "warnings": warnings,
           "pairs": json.loads(pairs.to_json(orient="records", force_ascii=False)) if pairs is not None else [],
           "cost": cost.as_dict() if cost is not None else None}
    path = out / f"{spec.get('name') or Path(run_dir).name}.json"
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    return path


def saved_sections(report_dir: str | Path, skip: set[str]) -> list[tuple[dict, pd.DataFrame, list[str], dict]]:
    """The runs saved beside an earlier page (`save_rows`) whose name is not in `skip`: (spec, rows,
    warnings, {run_dir, saved, recovered_from?, pairs}) each, by name. A file that does not parse is named."""
    found = []
    for path in sorted((Path(report_dir) / "rows").glob("*.json")):
        try:
            doc = json.loads(path.read_text())
            spec, rows = doc["spec"], pd.DataFrame(doc["rows"])
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: not a saved ablation run ({e}); delete it or regenerate its page") from None
        if (spec.get("name") or path.stem) in skip:
            continue
        found.append((spec, rows, list(doc.get("warnings") or []),
                      {**{k: doc.get(k) for k in ("run_dir", "saved", "recovered_from")},
                       "pairs": pd.DataFrame(doc.get("pairs") or []),
                       "cost": RecipeCost.from_dict(doc["cost"]) if doc.get("cost") else None}))
    return found


def _summary_row(spec: dict, arm: str, r, delta_key: str, source: str) -> dict:
    """One line of the page's summary of directions from an arm's row or a pair's."""
    return {"ablation": spec.get("name"), "arm": arm, "paper Δ (points)": r.get("paper Δ (points)"),
            "ours Δ": r.get(delta_key), "Δ CI": r.get("Δ CI"), "p": r.get("p"), "MDE": r.get("MDE"),
            "tasks this Δ needs": r.get("tasks this Δ needs"), "verdict": r["verdict"], "from": source}


def ablations_page(run_dirs: list[str | Path], report_dir: str | Path, title: str = "Ablations",
                   n_boot: int = 2000, ci: float = 0.95, status: Optional[dict] = None,
                   carry_saved: bool = True) -> Path:
    """index.html in `report_dir`: the summary of verdicts, then one section per ablation run. `status`:
    {run folder name: what happened to it in this batch}, shown beside it (a failed or unfinished run).
    Each run's rows are saved beside the page; with `carry_saved`, the saved rows of runs not in `run_dirs`
    are shown too, each labelled with its run folder and when it was saved."""
    from kit.report.build import render_html

    out = Path(report_dir)
    out.mkdir(parents=True, exist_ok=True)
    built = []
    for d in run_dirs:
        run = run_folder(d)
        data = collect(run)
        spec, df, warnings = ablation_rows(run, n_boot, ci, data=data)
        pairs = arm_pairs(run, n_boot, ci, data=data)
        cost = recipe_cost(run, data.get("manifest"))
        save_rows(out, run, spec, df, warnings, pairs, cost)
        origin = (f"run folder <code>{html.escape(str(run))}</code>"
                  + (f"; this batch: {html.escape(str((status or {}).get(run.name)))}" if (status or {}).get(run.name)
                     else ""))
        built.append((spec, df, warnings, origin, "run folder", pairs, cost))
    if carry_saved:
        for spec, df, warnings, src in saved_sections(out, {b[0].get("name") for b in built}):
            origin = (f"saved rows of {html.escape(str(src.get('saved')))} (run folder "
                      f"<code>{html.escape(str(src.get('run_dir')))}</code> is not part of this batch)"
                      + (f"; {html.escape(str(src['recovered_from']))}" if src.get("recovered_from") else ""))
            built.append((spec, df, warnings, origin, f"saved {src.get('saved')}", src["pairs"], src["cost"]))
    built.sort(key=lambda b: paper_rank(b[0].get("name") or ""))
    sections, summary, costs = [], [], []
    for spec, df, warnings, origin, source, pairs, cost in built:
        comp = spec.get("comparison") or {}
        sec = Section(f"{spec.get('name')}")
        sec.text(html.escape(spec.get("description") or ""))
        sec.text(origin + f". Paper: {html.escape(comp.get('paper_metric') or '')} "
                          f"({html.escape(comp.get('paper_source') or '')}).")
        if comp.get("note"):
            sec.text(html.escape(comp["note"]))
        costs.append({"ablation": spec.get("name"), "from nothing (min)": cost.total_min if cost else None,
                      "stages": len(cost.table) if cost else None, "run on (UTC)": ", ".join(cost.days) if cost else "",
                      "a lower bound": ("yes: " + ", ".join(cost.missing + cost.resumed))
                      if cost and (cost.missing or cost.resumed) else "", "from": source})
        for w in warnings:
            sec.items.append(("warn", w))
        if cost is not None and len(cost.table):
            sec.text(html.escape(cost.line) + ":")
            sec.table(cost.table)
        if len(df):
            fig = curve_figure(spec.get("name") or "ablation", df, out)
            if fig is not None:
                sec.figure(fig)
            sec.table(df.drop(columns=[CURVE], errors="ignore"))
            for _, r in df[~df["reference"].astype(bool)].iterrows():
                summary.append(_summary_row(spec, r["arm"], r, "Δ vs reference", source))
            if len(pairs):
                sec.text("Between the other arms (later arm minus earlier, paired on the same tasks):")
                sec.table(pairs)
                for _, r in pairs[pairs["paper Δ (points)"].notna()].iterrows():
                    summary.append(_summary_row(spec, f"{r['arm']} vs {r['against']}", r, "Δ", source))
        else:
            sec.text("No arms: not an ablation recipe.")
        sections.append(sec)
    top = Section("Which of the paper's directions this batch reproduced")
    top.text(f"Each arm against its recipe's reference arm on the same tasks: the paired difference of pass^1 with "
             f"its {int(ci * 100)}% paired bootstrap interval, the sign-flip p-value and the minimum detectable "
             "difference (alpha 0.05, power 0.8) at that task count (kit/eval/paired.py). <i>reproduced</i>: the "
             "paper's sign and an interval that excludes 0. The paper's numbers are Qwen3 on 64+ H200s; ours this "
             "batch's models and sizes: compare directions, not levels. <i>from</i>: this page's run folders, or "
             "the rows an earlier page saved (rows/*.json) for a run whose folder is not here.")
    top.table(pd.DataFrame(summary) if summary else pd.DataFrame([{"verdict": "no arm evaluated yet"}]))
    spent = Section("What each recipe cost")
    spent.text("Each recipe's cost from nothing: the sum over its distinct stages of the wall time each took where it "
               "ran, stages shared with another run or kept from an earlier one included (kit/report/cost.py). One "
               "machine's speed drifts from day to day: compare costs measured on the same days. Saved rows of an "
               "earlier page carry no cost.")
    spent.table(pd.DataFrame(costs) if costs else pd.DataFrame([{"ablation": "none"}]))
    n_saved = sum(1 for b in built if b[4] != "run folder")
    return render_html(title, [top, spent, *sections], out,
                       f"{len(run_dirs)} ablation runs" + (f" and {n_saved} carried from saved rows" if n_saved else "")
                       + " · generated by kit ablations")
