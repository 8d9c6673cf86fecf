"""The episode browser: every evaluation arm's and every engine round's episodes as dialogues, in the
report (one self-contained HTML fragment) and in the terminal (`kit view`).

    payload = browser_data(collect(run_dir))          # JSON-able: groups of episodes, engine proposals
    html = render_fragment(payload)                   # <section> + <script type="application/json"> + vanilla JS
    print(format_episode(payload["groups"][0]["episodes"][0], payload))   # the same layout, as text

The data: kit/report/episodes.py (what an episode shows, where each part comes from, the cap).

Model text is data: it travels as JSON in a <script type="application/json"> block ('<', '>' and '&'
escaped), and the page builds the DOM with textContent only, so nothing a model wrote becomes markup.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Optional

from kit.errors import UnknownName
from kit.report.run_data import Section, collect, run_folder
from kit.report.episodes import CAP, browser_data, engine_groups, episode_status, eval_group, sample_keys


# ----- HTML --------------------------------------------------------------------------------------

CSS = """
.eb{font-size:13px}.eb-controls{display:flex;flex-wrap:wrap;gap:.8em;align-items:center;margin:.5em 0;
padding:.5em;background:#f0f3fa;border:1px solid #ccd}.eb-counts{color:#555;margin:.3em 0}
.eb-list{max-height:260px;overflow-y:auto;border:1px solid #ddd}.eb-row{display:flex;gap:1em;padding:2px 6px;
cursor:pointer;border-bottom:1px solid #eee}.eb-row:hover,.eb-row.sel{background:#eef3ff}
.eb-badge{display:inline-block;min-width:4.2em;text-align:center;border-radius:3px;color:#fff;font-weight:bold;
padding:0 4px}.eb-pass{background:#2e7d32}.eb-fail{background:#c62828}.eb-cut{background:#ef6c00}
.eb-view{display:flex;gap:1em;align-items:flex-start}.eb-episode{flex:1;min-width:0;border:1px solid #ccd;
padding:.5em;margin:.5em 0}.eb-episode h3{margin:.1em 0 .4em;font-size:14px}
.eb-kv{margin:.2em 0}.eb-kv b{display:inline-block;min-width:7.5em}.eb-met{color:#2e7d32}.eb-unmet{color:#c62828}
.eb-msg{border-left:4px solid #bbb;margin:.3em 0;padding:.2em .5em;white-space:pre-wrap;word-break:break-word}
.eb-user{border-color:#4472c4;background:#f4f7fd}.eb-assistant{border-color:#2e7d32;background:#f4faf4}
.eb-tool{border-color:#888;background:#f7f7f7;font-family:monospace;font-size:12px}.eb-system{border-color:#ccc}
.eb-err{border-color:#c62828;background:#fdeeee}.eb-role{font-weight:bold;color:#444}
.eb-call{font-family:monospace;font-size:12px;background:#fff;border:1px dashed #aaa;padding:1px 4px;margin:2px 0}
.eb-flag{color:#c62828;font-size:12px}.eb-prop{border:1px solid #ddd;margin:.4em 0;padding:.4em}
.eb-note{color:#8a4b00;font-size:12px}
"""

SCRIPT_FILE = Path(__file__).with_name("browser.js")  # package data (pyproject.toml); a test runs `node --check` on it


def script() -> str:
    """The page's script (vanilla JS, no dependencies): reads the data block, builds the DOM with textContent."""
    return SCRIPT_FILE.read_text(encoding="utf-8")


def _json_script(payload: dict) -> str:
    """JSON that cannot end its <script> block or open a comment: '<', '>', '&' as \\u escapes."""
    s = json.dumps(payload, ensure_ascii=False, default=str, separators=(",", ":"))
    return s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _proposals_html(prop_groups: list[dict]) -> str:
    """Engine proposals as static HTML (every string escaped): accepted and rejected, with the checks."""
    out = []
    for g in prop_groups:
        t = g.get("total") or {}
        out.append(f"<details class='eb-props'><summary>engine proposals, {html.escape(g['label'])}: "
                   f"{t.get('proposals', 0)} ({t.get('accepted', 0)} accepted, {t.get('rejected', 0)} rejected)"
                   f"{'; shown ' + str(g['shown']) if g.get('shown', 0) < t.get('proposals', 0) else ''}"
                   f"{' — ' + html.escape(g['note']) if g.get('note') else ''}</summary>")
        for p in g.get("proposals") or []:
            e = html.escape
            head = (f"<span class='eb-badge {'eb-pass' if p['accepted'] else 'eb-fail'}'>"
                    f"{'ACCEPTED' if p['accepted'] else 'REJECTED'}</span> {e(str(p['unit']))} attempt {e(str(p['attempt']))}"
                    f" · plan {e(str(p['plan_id']))} · task {e(str(p['task_id']))}")
            rows = [f"<div class='eb-prop' data-accepted='{str(p['accepted']).lower()}'><div>{head}</div>"]
            if p.get("scenario"):
                sc = "; ".join(f"{k}: {v}" for k, v in p["scenario"].items())
                rows.append(f"<div class='eb-kv'><b>scenario</b> {e(sc)}</div>")
            else:
                rows.append("<div class='eb-kv'><b>scenario</b> <span class='eb-note'>not recorded (no task was built, or "
                            "the run predates proposals.jsonl recording a rejected task)</span></div>")
            if p.get("gold"):
                acts = " · ".join(f"{a['name']}({json.dumps(a['arguments'], default=str)})" for a in p["gold"]["actions"])
                rows.append(f"<div class='eb-kv'><b>gold actions</b> <code>{e(acts or '(none)')}</code></div>")
                if p["gold"]["communicate"]:
                    rows.append(f"<div class='eb-kv'><b>communicate</b> {e('; '.join(map(str, p['gold']['communicate'])))}</div>")
            if p["failed"]:
                rows.append("<div class='eb-kv'><b>failed checks</b> " + "; ".join(
                    f"<span class='eb-unmet'>✗ {e(str(x['check']))}</span>: {e(str(x['detail']))}" for x in p["failed"])
                    + "</div>")
            if p["passed"]:
                rows.append("<div class='eb-kv'><b>passed checks</b> " + " · ".join(
                    f"<span class='eb-met'>✓ {e(c)}</span>" for c in p["passed"]) + "</div>")
            rows.append(f"<div class='eb-kv'><b>checks</b> {e(p['checks_note'])}</div>")
            mr = p.get("mutation_report")
            if mr:
                rows.append(f"<div class='eb-kv'><b>mutation report</b> {e(json.dumps(mr, default=str))}"
                            f"{' (checker ' + e(p['checker']) + ')' if p.get('checker') else ''}</div>")
            for k in ("failure", "repairs", "fidelity"):
                if p.get(k):
                    rows.append(f"<div class='eb-kv'><b>{k}</b> {e(json.dumps(p[k], default=str))}</div>")
            rows.append("</div>")
            out += rows
        out.append("</details>")
    return "\n".join(out)


def render_fragment(payload: dict) -> str:
    """The browser as one HTML fragment for the report: controls, the data block, the script."""
    n = sum(len(g["episodes"]) for g in payload["groups"])
    total = sum((g.get("total") or {}).get("episodes", 0) for g in payload["groups"])
    problems = "".join(f"<div class='warn'>episode browser: {html.escape(p)}</div>" for p in payload.get("problems") or [])
    return "\n".join([
        "<div id='eb-wrap'>",
        f"<style>{CSS}</style>",
        problems,
        f"<p class='muted'>{n} of {total} episodes shown (at most {payload.get('cap')} per evaluation and per engine "
        "round: whole tasks in one task order shared by every group; the rest are counted). Pick a group and a filter, "
        "click an episode; <i>side by side</i> shows one task in every group that has it. The page's address keeps "
        "the view (#eb:...), so a link opens the same episode. In a shell: <code>kit view RUN --arm A --task T</code>.</p>",
        "<div id='eb' class='eb'><div class='eb-controls'>"
        "<label>group <select class='eb-group'></select></label>"
        "<label>episodes <select class='eb-status'></select></label>"
        "<label>task <select class='eb-task'></select></label>"
        "<label><input type='checkbox' class='eb-side'> side by side</label></div>"
        "<div class='eb-counts'></div><div class='eb-list'></div><div class='eb-view'></div></div>",
        _proposals_html(payload.get("proposals") or []),
        "</div>",
        f"<script type='application/json' id='eb-data'>{_json_script(payload)}</script>",
        f"<script>{script()}</script>",
    ])


def episode_section(data: dict, cap: Optional[int] = CAP):
    """The report's 'Episodes' section (kit.report.build.build_report); the payload goes to data['browser']."""
    sec = Section("Episodes")
    try:
        payload = browser_data(data, cap)
    except Exception as e:  # the browser never costs the report
        sec.items.append(("warn", f"episode browser failed: {type(e).__name__}: {e}"))
        return sec
    data["browser"] = payload
    sec.items.append(("html", render_fragment(payload)))
    return sec


# ----- terminal ----------------------------------------------------------------------------------


def format_episode(ep: dict, payload: Optional[dict] = None, width: int = 100) -> str:
    """One episode as text, in the browser's layout: header, verdict, termination, attribution, user
    fidelity, then the dialogue (system prompt folded)."""
    import textwrap

    def call(c):
        by = f" [by {c['requestor']}]" if c.get("requestor") not in (None, "assistant") else ""
        return f"{c['name']}({json.dumps(c.get('arguments'), ensure_ascii=False, default=str)}){by}"

    def mark(items, text):
        return " · ".join(("✓ " if x["met"] else "✗ ") + text(x) for x in items)

    label = ep["group"]
    for g in (payload or {}).get("groups") or []:
        if g["id"] == ep["group"]:
            label = g["label"]
    v = ep.get("verdict") or {}
    state = "PASS" if ep["passed"] else ("CUT" if ep["termination"] == "max_steps" else "FAIL")
    out = [f"{state}  task {ep['task_id']} · trial {ep['trial']} · {label}"]
    parts = [f"reward {v.get('reward')}"] + [f"{k} {x}" for k, x in (v.get("breakdown") or {}).items()]
    out.append(f"verdict        {' · '.join(parts)}{' — ' + v['reason'] if v.get('reason') else ''}")
    if v.get("actions"):
        out.append(f"gold actions   {mark(v['actions'], call)}")
    elif (v.get("gold") or {}).get("actions"):
        out.append(f"gold actions   {' · '.join(call(a) for a in v['gold']['actions'])}")
    if v.get("communicate"):
        out.append(f"communicate    {mark(v['communicate'], lambda x: str(x['info']))}")
    if v.get("env_assertions"):
        out.append(f"env assertions {mark(v['env_assertions'], lambda x: x['assertion'])}")
    if v.get("db_match") is not None:
        out.append(f"DB match       {v['db_match']}")
    if v.get("code_status"):
        out.append(f"code checker   {v['code_status']}")
    out.append(f"termination    {ep['termination']}" + (f" ({ep['steps']} steps)" if ep.get("steps") is not None else ""))
    a = ep.get("attribution")
    if a:
        at = f" at message {a['turn']}" if a.get("turn") is not None else ""
        out.append(f"attribution    {a['label']} / {a['rule']} (decided_by {a.get('decided_by')}){at}"
                   f"{': ' + a['evidence'] if a.get('evidence') else ''}")
    else:
        out.append("attribution    " + ("— (passed)" if ep["passed"] else "not recorded"))
    f = ep.get("fidelity") or {}
    fl = []
    if "request_stated" in f:
        fl.append("request stated: " + ("n/a" if f["request_stated"] is None else ("yes" if f["request_stated"] else "no")))
    if "proper_end" in f:
        fl.append("proper end: " + ("yes" if f["proper_end"] else "no"))
    devs = f.get("deviations") or []
    fl.append(f"{len(devs)} deviation(s): " + "; ".join(f"{d['kind']} at message {d['turn']} ({d['evidence']})" for d in devs)
              if devs else "no deviations")
    out.append(f"user fidelity  {' · '.join(fl)}")
    if ep.get("note"):
        out.append(f"note           {ep['note']}")
    out.append("-" * min(width, 100))
    flagged: dict = {}
    for d in devs:
        flagged[d["turn"]] = (flagged.get(d["turn"], "") + ", " if d["turn"] in flagged else "") + d["kind"]
    for m in ep["messages"]:
        if m["role"] == "system":
            out.append(f"[{m['i']}] system prompt ({m['chars']} characters, folded)")
            continue
        who = f"tool result: {m['tool']}" + (" — ERROR" if m.get("error") else "") if m["role"] == "tool" else m["role"]
        out.append(f"[{m['i']}] {who}")
        for line in (m.get("content") or "").splitlines() or ([] if not m.get("content") else [""]):
            out += textwrap.wrap(line, width - 4, initial_indent="    ", subsequent_indent="    ") or ["    "]
        for c in m.get("calls") or []:
            out.append(f"    → {call(c)}")
        if m.get("parse_error"):
            out.append(f"    ! parse error: {m['parse_error']}")
        if m["i"] in flagged:
            out.append(f"    ! user fidelity: {flagged[m['i']]}")
    return "\n".join(out)


def _find_groups(data: dict, arm: Optional[str]) -> list[dict]:
    """collect() entries an --arm names: an evaluation's arm, stage key or id, or label; an engine stage's key
    (optionally with ':r<round>'). None: every evaluation, then every engine run."""
    evs, ens = data.get("evals") or [], data.get("engine") or []
    if arm is None:
        return [("eval", e) for e in evs] + [("engine", e) for e in ens]
    out = [("eval", e) for e in evs if arm in (e.get("arm"), e["key"], e["id"], e["summary"].get("label"),
                                                 e["params"].get("label"))]
    base = arm.split(":r")[0]
    out += [("engine", e) for e in ens if base in (e["key"], e["id"])]
    return out


def view(run_dir: str | Path, arm: Optional[str] = None, task: Optional[str] = None, status: str = "failed",
         width: int = 100) -> str:
    """The text of one episode of a run (`kit view`): in the first group --arm names (default: the first
    evaluation), the first episode of --task (default: any task) that is `status` (failed by default),
    else the first episode at all; episodes in the browser's task order. Raises a kit.errors.UserError naming what
    exists when nothing matches."""
    run_dir = run_folder(run_dir)
    data = collect(run_dir)
    found = _find_groups(data, arm)
    if not found:
        names = sorted({str(x) for e in data.get("evals") or [] for x in (e.get("arm"), e["key"], e["summary"].get("label")) if x}
                       | {e["key"] for e in data.get("engine") or []})
        raise UnknownName(f"no evaluation or engine stage named {arm!r} in {run_dir}",
                          f"--arm takes one of: {', '.join(names) or 'none (the run has no episodes yet)'}")
    texts: dict = {}
    def first(keys, rows):  # the episode to show, from eval.json's rows: no verdict computed for the others
        keys = [k for k in sample_keys(keys, None) if task is None or k[0] == task]
        ok = [k for k in keys if status == "all" or episode_status(float((rows.get(k) or {}).get("reward") or 0) == 1.0,
                                                              (rows.get(k) or {}).get("termination")) == status
              or (status == "failed" and float((rows.get(k) or {}).get("reward") or 0) < 1.0)]
        return (ok or keys)[:1]

    for kind, entry in found:
        if kind == "eval":
            groups = [eval_group(entry, texts, pick=first)]
        else:
            groups, _ = engine_groups(entry, texts, cap=None, proposal_cap=0)
            if arm and ":r" in arm:
                groups = [g for g in groups if g["id"].endswith(":r" + arm.split(":r")[-1])]
        for g in groups:
            eps = [e for e in g["episodes"] if task is None or e["task_id"] == task]
            want = [e for e in eps if status == "all" or e["status"] == status
                    or (status == "failed" and not e["passed"])]
            ep = (want or eps or [None])[0]
            if ep is not None:
                return format_episode(ep, {"groups": [g]}, width)
    raise UnknownName(f"no episode{' of task ' + repr(task) if task else ''} in {run_dir}"
                      f"{' for ' + repr(arm) if arm else ''}", "leave out --task (or --arm) to see what the run has")
