"""A run's report: reports/<run-id>/index.html plus the PNG figures it shows.

    rep = build_report("runs/quickstart-cpu", "reports/quickstart-cpu")
    rep.sections          # [Section(title, items)], what the report notebook displays inline
    rep.html_path         # reports/<run-id>/index.html

Read from the files the stages wrote (manifest.json, each stage's stage.json and outputs):
  - engine yield per round with rejection reasons and failure categories (synthesize/rounds.csv)
  - SFT loss curves (<sft stage>/model/loss_curve.json), and where the SFT data came from
  - GRPO: what each stage trained, reward and filtering per step, where the time went, the learning
    curve and the curriculum's probes (kit/report/grpo.py)
  - pass^k per evaluation, the agent as it was trained (kit.report.run_data.agent_provenance: an
    arm whose GRPO never updated its weights is labelled so in every table), a bootstrap 95%
    interval on pass^1 over tasks and trials (and the evaluation's own interval over tasks,
    `pass1_ci95`), the user deviation rate, how often the user's first message stated the request
    and how often episodes ended by a stop (`request_stated_rate`, `proper_end_rate`), the
    train/test overlap (kit/eval/leak.py), and the paper's numbers for the same domain beside ours
    (kit/report/paper.py)
  - pass^1 of every evaluation by task shape and by phrasing (template / free_form / tau2: kit.data.task_labels),
    and the agent's and the user's sampling temperature beside every number
  - for an ablation: pass^1 per arm with its interval, next to the paper's ablation numbers
  - paired comparisons of evaluations scored on the same tasks: B − A with a paired bootstrap
    interval, a sign-flip p-value and the minimum detectable difference (kit/report/paired.py)
  - every warning a stage raised (e.g. a fallback to gold SFT data), the stages, the manifest.
Figures are matplotlib PNGs (no W&B needed to read the report).
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from kit import metrics as M
from kit.files import write_json
from kit.llm.spec import ModelSpec
from kit.report import paper
from kit.report.figures import int_ticks, new_figure, save
from kit.report.run_data import Section, collect, empty_data, eval_label, report_parts, run_folder
from kit.stages import summarizes_run
from kit.stages.contract import SectionContext

FAILURE_COLUMNS = ["failures_task", "failures_agent", "failures_user", "failures_undetermined"]


@dataclass
class Report:
    run_id: str
    title: str
    sections: list[Section]
    html_path: Path
    figures: list[Path]
    data: dict


# ----- statistics --------------------------------------------------------------------------------


def bootstrap_pass1(episodes: pd.DataFrame, n: int = 2000, ci: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """pass^1 and its interval (kit.eval.passk.pass1_interval) of an evaluation's episodes table."""
    from kit.eval.passk import pass1_interval

    if episodes is None or not len(episodes):
        return (math.nan, math.nan, math.nan)
    return pass1_interval({t: list(g["reward"]) for t, g in episodes.groupby("task_id")}, ci, n, seed)


# ----- figures -----------------------------------------------------------------------------------


def fig_engine(runs: list[dict], path: Path) -> Path:
    fig = new_figure(10, 3.6)
    ax1, ax2 = fig.subplots(1, 2)
    for r in runs:
        df = r["rounds"]
        lab = r["key"]
        ax1.plot(df["round"], df["proposals"], "o--", label=f"{lab}: proposals")
        ax1.plot(df["round"], df["accepted"], "o-", label=f"{lab}: accepted")
    ax1.set_xlabel("round")
    ax1.set_ylabel("tasks")
    ax1.set_title("engine yield per round")
    ax1.legend(fontsize=7)
    df = runs[-1]["rounds"]
    cols = [c for c in FAILURE_COLUMNS if c in df.columns]
    bottom = None
    for c in cols:
        vals = df[c].fillna(0).to_numpy()
        ax2.bar(df["round"], vals, width=0.5, bottom=bottom, label=c.replace("failures_", ""))
        bottom = vals if bottom is None else bottom + vals
    int_ticks(ax1, [v for r in runs for v in r["rounds"]["round"]])
    int_ticks(ax2, df["round"])
    ax2.set_xlabel("round")
    ax2.set_ylabel("failed rollouts")
    ax2.set_title(f"failure attribution ({runs[-1]['key']})")
    if cols:
        ax2.legend(fontsize=7)
    return save(fig, path)


def fig_sft(runs: list[dict], path: Path) -> Path:
    fig = new_figure()
    ax = fig.subplots()
    for r in runs:
        if r["curve"]:
            steps, losses = zip(*r["curve"])
            ax.plot(steps, losses, "o-", ms=3, label=f"{r['key']} ({r['summary'].get('data_source', '?')})")
    int_ticks(ax, [st for r in runs for st, _ in (r["curve"] or [])])
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("completion-token loss")
    ax.set_title("SFT loss")
    ax.legend(fontsize=7)
    return save(fig, path)


def fig_pass1(rows: pd.DataFrame, path: Path, title: str = "pass^1 with 95% interval") -> Path:
    fig = new_figure(max(5.0, 1.2 * len(rows) + 2), 3.6)
    ax = fig.subplots()
    x = range(len(rows))
    y = rows["pass^1"].to_numpy() * 100
    lo = (rows["pass^1"] - rows["ci_low"]).clip(lower=0).to_numpy() * 100
    hi = (rows["ci_high"] - rows["pass^1"]).clip(lower=0).to_numpy() * 100
    ax.bar(x, y, yerr=[lo, hi], capsize=4, color="#4472c4")
    for i, v in enumerate(y):
        ax.text(i + 0.06, v + 0.5, f"{v:.1f}%", ha="left", va="bottom", fontsize=8)
    ax.set_xticks(list(x))
    ax.set_xticklabels(rows["evaluation"], rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("pass^1 (%)")
    ax.set_title(title)
    ax.set_ylim(0, max(5.0, float((rows["ci_high"].max() or 0) * 100) + 5))
    return save(fig, path)


def fig_ablation(rows: pd.DataFrame, path: Path, paper_metric: str) -> Path:
    fig = new_figure(10, 3.8)
    ax1, ax2 = fig.subplots(1, 2)
    x = list(range(len(rows)))
    y = rows["ours pass^1 (%)"].to_numpy()
    err = [(rows["ours pass^1 (%)"] - rows["ci low (%)"]).clip(lower=0).to_numpy(),
           (rows["ci high (%)"] - rows["ours pass^1 (%)"]).clip(lower=0).to_numpy()]
    ax1.bar(x, y, yerr=err, capsize=4, color="#4472c4")
    for i, v in enumerate(y):
        ax1.text(i + 0.06, (0 if pd.isna(v) else v) + 0.5, "n/a" if pd.isna(v) else f"{v:.1f}", ha="left", fontsize=8)
    ax1.set_xticks(x)
    ax1.set_xticklabels(rows["arm"], rotation=20, ha="right", fontsize=8)
    ax1.set(ylabel="pass^1 (%)", title="this run (95% bootstrap interval)")
    ax1.set_ylim(0, max(5.0, float(rows["ci high (%)"].max()) + 5))
    py = rows["paper (%)"]
    ax2.bar(x, py.fillna(0).to_numpy(), color="#a5a5a5")
    for i, v in enumerate(py):
        ax2.text(i, (0 if pd.isna(v) else v) + 1, "n/a" if pd.isna(v) else f"{v:.1f}", ha="center", fontsize=8)
    ax2.set_xticks(x)
    ax2.set_xticklabels(rows["paper arm"].fillna(rows["arm"]), rotation=20, ha="right", fontsize=8)
    ax2.set(ylabel="pass^1 (%)", title=f"paper: {paper_metric}"[:70], ylim=(0, 105))
    return save(fig, path)


# ----- tables ------------------------------------------------------------------------------------


def _ci_text(ci95: Any) -> Optional[str]:
    try:
        lo, hi = (float(x) for x in ci95)
    except (TypeError, ValueError):
        return None
    return f"[{lo:.3f}, {hi:.3f}]"


def tasks_text(meta: dict) -> Optional[str]:
    """Which tasks and how many: "test (10 of 40)" when a limit cut the split, "heldout_test (189)" when not
    (older eval.json files, without tasks_available, give the count alone)."""
    where = meta.get("split") or meta.get("tasks_file")
    n, total = meta.get("tasks"), meta.get("tasks_available")
    if n is None:
        return where
    return f"{where} ({n} of {total})" if total is not None and total != n else f"{where} ({n})"


def protocol_columns(meta: dict) -> dict:
    """An evaluation's protocol measures (kit.eval.runner meta): pass^1 interval over tasks, how often the
    user's first message stated the request, how often episodes ended by a stop, train/test overlap."""
    leak = meta.get("leak") or {}
    return {"protocol": meta.get("protocol", "kit"), "tasks": tasks_text(meta),
            M.label(M.PASS1_CI95): _ci_text(meta.get(M.PASS1_CI95)),
            M.label(M.REQUEST_STATED_RATE): meta.get(M.REQUEST_STATED_RATE),
            M.label(M.PROPER_END_RATE): meta.get(M.PROPER_END_RATE),
            M.label(M.INFRA_FAILURES): meta.get(M.INFRA_FAILURES),
            "train/test overlap": (f"{leak.get('n_overlap')}/{leak.get('n_tasks')}" if leak else None),
            "agent T": meta.get("temperature"), "user T": meta.get("user_temperature")}


def eval_table(evals: list[dict], n_boot: int, ci: float) -> pd.DataFrame:
    rows = []
    for ev in evals:
        p1, lo, hi = bootstrap_pass1(ev["episodes"], n_boot, ci)
        meta, pk = ev["meta"], ev["passk"]
        prov = ev.get("provenance")
        row = {"evaluation": eval_label(ev), "arm": ev["arm"], "domain": meta.get("domain"), "tasks": meta.get("tasks"),
               "trials": meta.get("trials"), "pass^1": pk.get(1, p1), "ci_low": lo, "ci_high": hi}
        for k in sorted(pk):
            if k > 1:
                row[f"pass^{k}"] = pk[k]
        row.update(protocol_columns(meta))
        row.update({M.label(M.USER_DEVIATION_RATE): meta.get(M.USER_DEVIATION_RATE), "agent": meta.get("model"),
                    "agent, as trained": prov.text if prov is not None else None,
                    "user simulator": meta.get("user_model"),
                    "tau2": meta.get("tau2_version")})
        rows.append(row)
    return pd.DataFrame(rows)


PHRASINGS = ("template", "free_form", "tau2", "unlabelled")  # the breakdown's column order (others after)


def breakdown_table(evals: list[dict], by: str) -> Optional[pd.DataFrame]:
    """pass^1 by task shape or by phrasing (`by`: 'shape' / 'phrasing'): one row per evaluation, one column
    per label, each cell 'pass^1 (tasks)'. From eval.json's meta, else from the episode rows' labels; None
    when no evaluation has either (eval.json files older than the breakdown)."""
    from kit.eval.passk import pass1_by

    key = {"shape": M.PASS1_BY_SHAPE, "phrasing": M.PASS1_BY_PHRASING}[by]
    rows, cols = [], []
    for ev in evals:
        got, eps = ev["meta"].get(key), ev["episodes"]
        if got is None and by in eps.columns:
            got = pass1_by({t: list(g["reward"]) for t, g in eps.groupby("task_id")}, dict(zip(eps["task_id"], eps[by])))
        if not got:
            continue
        cols += [k for k in got if k not in cols]
        rows.append({"evaluation": eval_label(ev), **{k: f"{v['pass^1']:.2f} ({v['tasks']})" for k, v in got.items()}})
    if not rows:
        return None
    if by == "phrasing":
        cols = [c for c in PHRASINGS if c in cols] + [c for c in cols if c not in PHRASINGS]
    return pd.DataFrame(rows, columns=["evaluation", *cols])


def _short(value: Any, run_dir: Path) -> str:
    """A model spec or a path as the report shows it: the run folder written <run>."""
    s, root = str(value), str(run_dir)
    try:
        ms = ModelSpec.parse(s, folder_kind="hf")
    except ValueError:
        return s
    if not ms.local or not (ms.path or "").startswith(root):
        return s
    short = "<run>" + ms.path[len(root):]
    return short if s == ms.path else str(replace(ms, path=short))


# ----- HTML --------------------------------------------------------------------------------------

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
h1{border-bottom:2px solid #4472c4}h2{margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:13px;margin:.6em 0}th,td{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f0f3fa}td:first-child,th:first-child{text-align:left}img{max-width:100%;border:1px solid #eee;margin:.5em 0}
.warn{border:3px solid #c00;background:#fee;padding:.6em;margin:.4em 0;font-weight:bold}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;font-size:12px}.muted{color:#777;font-size:12px}.tbl{overflow-x:auto}
"""


# After load, the page marks itself: every figure decoded (a headless browser test reads this).
SELF_CHECK = """<script>
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images);
  var broken = imgs.filter(function (i) { return !(i.complete && i.naturalWidth > 0); });
  document.body.setAttribute("data-figures", String(imgs.length));
  document.body.setAttribute("data-broken-figures", broken.map(function (i) { return i.alt; }).join(","));
  document.body.setAttribute("data-loaded", "true");
});
</script>"""


def _item_html(kind: str, value: Any, out_dir: Path) -> str:
    if kind == "text":
        return f"<p>{value}</p>"  # our own strings; they may carry simple markup
    if kind == "warn":
        return f'<div class="warn">{html.escape(str(value))}</div>'
    if kind == "table":
        table = value.to_html(index=False, na_rep="–", float_format=lambda v: f"{v:.4g}", border=0, escape=True)
        return f'<div class="tbl">{table}</div>'

    if kind == "figure":  # inlined: the page is one self-contained file
        data = base64.b64encode(Path(value).read_bytes()).decode("ascii")
        return f'<img src="data:image/png;base64,{data}" alt="{html.escape(Path(value).name)}">'
    if kind == "pre":
        return f"<pre>{html.escape(str(value))}</pre>"
    if kind == "details":
        summary, body = value
        return f"<details><summary>{html.escape(summary)}</summary><pre>{html.escape(body)}</pre></details>"
    return str(value)


def public_paths(run_dir: Path) -> list[tuple[str, str]]:
    """(absolute prefix, what the page says instead), longest first: the run folder relative to the
    project (runs/<id>), the project root '.', the home folder '~'. A report names no local path."""
    import kit

    root = Path(kit.__file__).resolve().parents[1]
    run = Path(run_dir).resolve()
    try:
        shown = str(run.relative_to(root))
    except ValueError:
        shown = f"runs/{run.name}"
    subs = [(str(run), shown), (str(root), "."), (str(Path.home()), "~")]
    return sorted((s for s in subs if len(s[0]) > 1), key=lambda s: -len(s[0]))


def render_html(title: str, sections: list[Section], out_dir: Path, subtitle: str = "",
                paths: tuple[tuple[str, str], ...] | list = ()) -> Path:
    """index.html: one self-contained page (figures inlined; `paths` rewrites local path prefixes)."""
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>",
             f"<p class='muted'>{subtitle}</p>"]
    for s in sections:
        parts.append(f"<h2>{html.escape(s.title)}</h2>")
        parts += [_item_html(k, v, out_dir) for k, v in s.items]
    parts.append(SELF_CHECK)
    parts.append("</body></html>")
    page = "\n".join(parts)
    for prefix, shown in paths:
        page = page.replace(prefix, shown)
    path = out_dir / "index.html"
    path.write_text(page, encoding="utf-8")
    return path


# ----- the report --------------------------------------------------------------------------------


def eval_section(data: dict, out: Path, figures: list, bootstrap: int, ci: float, run_dir: Path) -> Optional[Section]:
    """pass^k of every evaluation, its interval, protocol measures, beside the paper's numbers."""
    if not data["evals"]:
        return None
    ev = Section("Evaluation: pass^k")
    table = eval_table(data["evals"], bootstrap, ci)
    data["eval_table"] = table
    shown = table.copy()
    for c in ("agent", "user simulator"):
        shown[c] = shown[c].map(lambda s: _short(s, run_dir))
    if not shown["arm"].notna().any():
        shown = shown.drop(columns=["arm"])
    ev.text(f"pass^k as τ²-bench defines it (mean over tasks of C(c,k)/C(n,k)); {int(ci * 100)}% bootstrap "
            "interval on pass^1 over tasks and trials. User deviation rate: share of episodes in which the "
            "user simulator broke its instructions (kit/rollout/fidelity.py); request stated: share of "
            "episodes whose first user message names every value the gold write actions need that the user "
            "knows; proper end: share ended by the user's or the agent's stop (not a step or error limit); "
            "pass^1 95% CI: percentile bootstrap over tasks (kit/eval/passk.py); train/test overlap: "
            "evaluation tasks whose gold actions all appear in the run's training data (kit/eval/leak.py). "
            "The user simulator is recorded with every number (the paper does not publish its own). "
            "<i>agent, as trained</i>: the stage that wrote the evaluated weights and what it trained (read from "
            "its stage.json); a label followed by '— GRPO skipped: …' is an arm whose training never updated "
            "its weights: it measures its start's policy.")
    ev.table(shown)
    figures.append(fig_pass1(table, out / "pass1.png"))
    ev.figure(figures[-1])
    parts = {by: breakdown_table(data["evals"], by) for by in ("phrasing", "shape")}
    data["eval_breakdown"] = parts
    if any(t is not None for t in parts.values()):
        ev.text("pass^1 by phrasing and by task shape, each cell <i>pass^1 (tasks)</i> (kit.data.task_labels): "
                "the held-out set's tasks carry their shape and phrasing (template or free_form, "
                "scripts/make_mock_heldout.py); τ²'s own tasks count as phrasing <i>tau2</i>, their shape "
                "named by their gold tools.")
        for t in parts.values():
            if t is not None:
                ev.table(t)
    for dom in sorted({d for d in table["domain"].dropna()}):
        rows = paper.main_table(dom)
        if rows:
            ours = ", ".join(f"{html.escape(str(row['evaluation']))}: {100 * row['pass^1']:.1f}%"
                             for _, row in table[table["domain"] == dom].iterrows())
            ev.text(f"The paper's τ²-bench pass^1 on <b>{html.escape(dom)}</b> ({html.escape(paper.SOURCE)}), "
                    f"beside ours ({ours}):")
            ev.table(pd.DataFrame(rows))
        else:
            ev.text(f"The paper publishes no numbers for domain '{html.escape(dom)}' "
                    "(it reports airline, retail and telecom).")
    return ev


def engine_section(data: dict, out: Path, figures: list) -> Optional[Section]:
    """The data engine's rounds: yield, rejection reasons, failure attribution."""
    if not data["engine"]:
        return None
    en = Section("Data engine: yield per round")
    en.text("From the synthesize stage's rounds.csv: proposals, accepted tasks, rejection reasons, rollouts, "
            "and failed rollouts attributed to the task, the agent or the user. <i>fidelity_templated</i>: "
            "proposals whose model-written text failed the fidelity gate and was replaced by the grounded "
            "template; <i>sft_ungrounded</i>: SFT samples the grounding check dropped (never trained on).")
    for r in data["engine"]:
        df = r["rounds"]
        cols = [c for c in ["round", "plans", "proposals", "built", "accepted", "acceptance_rate", "sft_pool",
                            "rl_pool", "episodes", M.PASS_RATE, *FAILURE_COLUMNS, M.USER_DEVIATION_RATE, "diversity", "repaired",
                            "fidelity_templated", M.AGENT_SAMPLES, M.USER_SAMPLES, "sft_ungrounded", "wall_s"]
                if c in df.columns]
        en.text(f"<b>{html.escape(r['key'])}</b>")
        en.table(df[cols])
        rej = [c for c in df.columns if c.startswith("reject_")]
        if rej:
            en.text("rejection reasons per round:")
            en.table(df[["round", *rej]])
        if "unvalidated" in df.columns and pd.to_numeric(df["unvalidated"], errors="coerce").fillna(0).sum() > 0:
            en.text("validation off: accepted tasks that a check would have rejected (<i>unvalidated</i>), and "
                    "per check how many tasks it flagged; they are in this run's data:")
            en.table(df[["round", "accepted", "unvalidated", "unvalidated_checks"]].fillna(""))
        mix = [c for c in ("kinds", "write_share", "write_coverage", "pattern_entropy", "kind_entropy", "tools")
               if c in df.columns]
        if mix:
            en.text("the accepted tasks per round, by kind (lookup, one_write, lookup_write: a read then the write "
                    "that uses it, two_writes, chained: the second write changes the record the first made) and by tool; write_coverage: the domain's write tools some task "
                    "calls; entropies (bits) over gold tool patterns and kinds:")
            en.table(df[["round", *mix]].fillna(""))
    figures.append(fig_engine(data["engine"], out / "engine.png"))
    en.figure(figures[-1])
    return en


def sft_section(data: dict, out: Path, figures: list, run_dir: Path) -> Optional[Section]:
    """SFT runs: data, steps, losses, and their loss curves."""
    if not data["sft_runs"]:
        return None
    sf = Section("SFT: loss curves")
    rows = []
    for r in data["sft_runs"]:
        o = r["outputs"]
        rows.append({"stage": r["key"], "data": o.data_source, "samples": o.samples,
                     "steps": o.steps, "first loss": o.first_loss, "final loss": o.final_loss,
                     "tokens trained": o.tokens_trained, "wall s": o.wall_time_s,
                     "start model": _short(r["params"].get("model"), run_dir)})
    sf.table(pd.DataFrame(rows))
    figures.append(fig_sft(data["sft_runs"], out / "sft_loss.png"))
    sf.figure(figures[-1])
    return sf


def stage_sections(data: dict, ctx: SectionContext) -> list[Section]:
    """Every stage's sections (its CONTRACT's report part, kit/stages/contract.py), by rank: the
    evaluations (pass^k, paired differences, what changed), the engine, SFT, GRPO; empty ones left out."""
    parts = sorted(report_parts(), key=lambda part: part.rank)
    return [s for part in parts for s in part.sections(data, ctx) if s is not None]


def build_report(run_dir: str | Path, report_dir: str | Path, title: Optional[str] = None, ci: float = 0.95,
                 bootstrap: int = 2000) -> Report:
    run_dir, out = Path(run_dir), Path(report_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = collect(run_dir)
    m = data["manifest"]
    recipe = m.get("recipe", {})
    spec = recipe.get("parsed") or {}
    run_id = m.get("run_id", run_dir.name)
    title = title or f"{run_id}: {spec.get('name', '')}".strip(": ")
    sections: list[Section] = []
    figures: list[Path] = []

    # -- overview
    ov = Section("Run")
    ov.text(html.escape(spec.get("description") or ""))
    before = [s for s in m.get("stages", []) if not summarizes_run(s.get("stage"))]
    done = [s for s in before if s.get("status") in ("complete", "shared")]
    ov.table(pd.DataFrame([{
        "run id": run_id, "recipe": recipe.get("path"), "stages complete (before the report)": f"{len(done)}/{len(before)}",
        "git commit": ((m.get("git") or {}).get("commit") or "?")[:12] + (" (dirty)" if (m.get("git") or {}).get("dirty") else ""),
        "tau2": m.get("tau2_version"), "W&B": f"{(m.get('wandb') or {}).get('mode')} / group {run_id}",
    }]))
    sections.append(ov)

    # -- warnings first: a fallback must never be missed
    if data["warnings"]:
        w = Section("Warnings")
        for x in data["warnings"]:
            w.items.append(("warn", f"{x['stage']}: {x['warning']}"))
        sections.append(w)

    # -- ablation comparison
    arms = spec.get("arms") or []
    if arms and data["evals"]:
        comp = spec.get("comparison") or {}
        ab = Section("Ablation: pass^1 per arm")
        rows = []
        for arm in arms:
            evs = [e for e in data["evals"] if e["arm"] == arm["name"]]
            if not evs:
                rows.append({"arm": arm.get("label") or arm["name"], "ours pass^1 (%)": math.nan, "ci low (%)": math.nan,
                             "ci high (%)": math.nan, "tasks": None, "trials": None,
                             "paper arm": arm.get("paper_label"), "paper (%)": arm.get("paper")})
                continue
            ev = evs[-1]
            p1, lo, hi = bootstrap_pass1(ev["episodes"], bootstrap, ci)
            untrained = ev["provenance"].untrained if ev.get("provenance") else None
            rows.append({"arm": (arm.get("label") or arm["name"]) + (f" — {untrained}" if untrained else ""),
                         "ours pass^1 (%)": 100 * p1, "ci low (%)": 100 * lo,
                         "ci high (%)": 100 * hi, "tasks": ev["meta"].get("tasks"), "trials": ev["meta"].get("trials"),
                         M.label(M.USER_DEVIATION_RATE): ev["meta"].get(M.USER_DEVIATION_RATE), **protocol_columns(ev["meta"]),
                         "paper arm": arm.get("paper_label"), "paper (%)": arm.get("paper")})
        df = pd.DataFrame(rows)
        ab.text(f"Ours: pass^1 of each arm's last evaluation, with a {int(ci * 100)}% percentile bootstrap interval "
                f"({bootstrap} resamples of tasks, then of trials within each task). Paper: "
                f"{html.escape(comp.get('paper_metric') or 'see PAPER.md')} — source: "
                f"{html.escape(comp.get('paper_source') or paper.SOURCE)}. The paper's numbers come from "
                "Qwen3 models on 64+ H200s; ours from this recipe's models and sizes: compare directions, not levels.")
        if comp.get("note"):
            ab.text(html.escape(comp["note"]))
        ab.table(df)
        figures.append(fig_ablation(df, out / "ablation.png", comp.get("paper_metric") or ""))
        ab.figure(figures[-1])
        sections.append(ab)
        data["ablation"] = df

    sections += stage_sections(data, SectionContext(out, figures, bootstrap, ci, run_dir))

    # -- episodes: every evaluation's and engine round's dialogues, with verdicts (kit/report/browser.py)
    from kit.report.browser import episode_section

    sections.append(episode_section(data))

    # -- stages
    st = Section("Stages")
    st.table(pd.DataFrame([{"stage": s["key"], "status": s.get("status"), "wall s": s.get("wall_s"),
                            "peak RSS GiB": s.get("peak_rss_gib"), "fingerprint": s.get("fingerprint"),
                            "executed notebook": _short(s.get("executed_notebook") or s.get("log") or s.get("shared_with"),
                                                         run_dir)}
                           for s in m.get("stages", [])]))
    sections.append(st)

    # -- manifest
    mn = Section("Manifest")
    pk = m.get("packages") or {}
    mn.table(pd.DataFrame([{"package": k, "version": v} for k, v in pk.items() if v]))
    mrows = []
    for spec_, d in (m.get("models") or {}).items():
        files = d.get("files") or {}
        weights = {k: v for k, v in files.items() if k.endswith((".safetensors", ".bin", ".gguf"))}
        mrows.append({"model": _short(spec_, run_dir), "kind": d.get("kind"), "id": d.get("id"),
                      "weights sha256": ", ".join(f"{k}:{v[:12]}" for k, v in weights.items())
                      or (d.get("gguf_sha256") or "")[:12] or d.get("note", "")})
    if mrows:
        mn.table(pd.DataFrame(mrows))
    mn.table(pd.DataFrame([{"stage": k, "seed": v} for k, v in (m.get("seeds") or {}).items()]))
    slim = {k: v for k, v in m.items() if k not in ("stages",)}
    slim["recipe"] = {k: v for k, v in (m.get("recipe") or {}).items() if k != "parsed"}
    mn.items.append(("details", ("manifest.json (the run's full record; also next to this page)",
                                 json.dumps(slim, indent=1, default=str))))
    sections.append(mn)

    write_json(out / "manifest.json", m)
    subtitle = (f"recipe {html.escape(str(recipe.get('path')))} · generated from {html.escape(str(run_dir))} · "
                f"one self-contained page (figures inlined; PNGs and manifest.json also beside it)")
    path = render_html(title, sections, out, subtitle, public_paths(run_dir))
    return Report(run_id, title, sections, path, figures, data)


def display_report(rep: Report) -> None:
    """Show a report's sections inline in a notebook (tables, figures, warnings; the episode browser as a
    pointer to the HTML page, whose scripts a notebook would not run)."""
    from IPython.display import HTML, Image, Markdown, display

    for s in rep.sections:
        display(Markdown(f"## {s.title}"))
        for kind, value in s.items:
            if kind == "table":
                display(value)
            elif kind == "figure":
                display(Image(filename=str(value)))
            elif kind in ("text", "warn"):
                display(HTML(_item_html(kind, value, rep.html_path.parent)))
            elif kind == "details":
                display(HTML(_item_html(kind, value, rep.html_path.parent)))
            elif kind == "html":  # the episode browser: a page of its own, not copied into the notebook
                display(Markdown(f"The episodes are browsable in the report, `{rep.html_path}` (one self-contained "
                                 f"page: filters, side by side); in a shell, `kit view {rep.run_id}`."))


# ----- comparing finished runs -------------------------------------------------------------------


def merge_runs(run_dirs: list[str | Path]) -> tuple[dict, list[dict], list]:
    """Several run folders as one report's data (`kit compare`, `kit results` across runs): each run is an
    arm named by its run id (numbered when two share one), its stages keyed `<run id>/<stage key>` and its
    evaluations labelled `<run id>: <label>`. Returns (merged data, one row per run, public path prefixes)."""
    merged = empty_data({})
    runs, subs = [], []
    for d in map(run_folder, run_dirs):
        data = collect(d)
        m = data["manifest"]
        rid = m.get("run_id", d.name)
        if rid in [r["run"] for r in runs]:  # two runs of one name (other folders): number them
            rid = f"{rid}#{len(runs) + 1}"
        stages = [s for s in m.get("stages", []) if not summarizes_run(s.get("stage"))]
        runs.append({"run": rid, "recipe": (m.get("recipe") or {}).get("path"), "status": m.get("status"),
                     "stages complete": f"{sum(s.get('status') in ('complete', 'shared') for s in stages)}/{len(stages)}",
                     "git commit": ((m.get("git") or {}).get("commit") or "?")[:12], "tau2": m.get("tau2_version")})
        for name in [part.bucket for part in report_parts()]:
            for x in data[name]:
                label = x["summary"].get("label") or x["params"].get("label") or x["key"]
                merged[name].append({**x, "key": f"{rid}/{x['key']}", "arm": rid,
                                     "summary": {**x["summary"], "label": f"{rid}: {label}"}})
        merged["warnings"] += [{**w, "stage": f"{rid}/{w['stage']}"} for w in data["warnings"]]
        subs += public_paths(d)
    return merged, runs, subs


def build_comparison(run_dirs: list[str | Path], report_dir: str | Path, title: Optional[str] = None,
                     ci: float = 0.95, bootstrap: int = 2000) -> Report:
    """One report over several finished runs that did not come from one ablation recipe (`kit
    compare`): pass^k with intervals, paired differences of evaluations across runs on the same tasks,
    engine yield, SFT and GRPO curves side by side. Each run is an
    'arm' named by its run id; its stages are keyed `<run id>/<stage key>`."""
    out = Path(report_dir)
    out.mkdir(parents=True, exist_ok=True)
    merged, runs, subs = merge_runs(run_dirs)
    title = title or "comparison: " + ", ".join(r["run"] for r in runs)
    sections, figures = [Section("Runs")], []
    sections[0].text("Runs compared side by side; each one's own report has its details. Numbers are comparable "
                     "only under the same protocol: check the evaluation table's tasks, user simulator and "
                     "temperature columns.")
    sections[0].table(pd.DataFrame(runs))
    if merged["warnings"]:
        w = Section("Warnings")
        w.items += [("warn", f"{x['stage']}: {x['warning']}") for x in merged["warnings"]]
        sections.append(w)
    common = Path(os.path.commonpath([str(Path(d).resolve()) for d in run_dirs]))
    sections += stage_sections(merged, SectionContext(out, figures, bootstrap, ci, common, across_runs=True))
    path = render_html(title, sections, out, f"{len(runs)} runs · one self-contained page",
                       sorted(set(subs), key=lambda s: -len(s[0])))
    return Report("compare", title, sections, path, figures, merged)
