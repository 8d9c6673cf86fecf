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

SCRIPT = r"""
(function () {
  "use strict";
  var root = document.getElementById("eb");
  if (!root) { return; }
  var data = JSON.parse(document.getElementById("eb-data").textContent);
  var groups = data.groups, texts = data.texts;
  var q = function (s) { return root.querySelector(s); };
  var selGroup = q(".eb-group"), selStatus = q(".eb-status"), selTask = q(".eb-task"), chkSide = q(".eb-side");
  var list = q(".eb-list"), view = q(".eb-view"), counts = q(".eb-counts");
  var openUid = null;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function add(parent, child) { parent.appendChild(child); return child; }
  function json(v) { try { return JSON.stringify(v); } catch (err) { return String(v); } }
  function option(sel, value, label) { var o = el("option", null, label); o.value = value; sel.appendChild(o); }
  function group(id) { for (var i = 0; i < groups.length; i++) { if (groups[i].id === id) { return groups[i]; } } return groups[0]; }
  function matches(ep, status, task) {
    if (task && ep.task_id !== task) { return false; }
    if (status === "passed") { return ep.passed; }
    if (status === "failed") { return !ep.passed; }
    if (status === "max_steps") { return ep.termination === "max_steps"; }
    return true;
  }
  function badge(ep) {
    var b = el("span", "eb-badge " + (ep.passed ? "eb-pass" : (ep.termination === "max_steps" ? "eb-cut" : "eb-fail")),
               ep.passed ? "PASS" : (ep.termination === "max_steps" ? "CUT" : "FAIL"));
    return b;
  }
  function kv(parent, key, value) {
    var d = add(parent, el("div", "eb-kv"));
    add(d, el("b", null, key));
    if (typeof value === "string") { add(d, el("span", null, value)); } else if (value) { add(d, value); }
    return d;
  }
  function checks(items, text) {
    var s = el("span");
    items.forEach(function (x, i) {
      if (i) { add(s, el("span", null, " · ")); }
      add(s, el("span", x.met ? "eb-met" : "eb-unmet", (x.met ? "✓ " : "✗ ") + text(x)));
    });
    return s;
  }
  function call(c) { return c.name + "(" + json(c.arguments) + ")" + (c.requestor && c.requestor !== "assistant" ? " [by " + c.requestor + "]" : ""); }

  function renderEpisode(ep) {
    var g = group(ep.group);
    var box = el("div", "eb-episode");
    box.setAttribute("data-episode", ep.uid);
    box.setAttribute("data-passed", String(ep.passed));
    var h = add(box, el("h3"));
    add(h, badge(ep));
    add(h, el("span", null, " task " + ep.task_id + " · trial " + ep.trial + " · " + g.label));
    var v = ep.verdict || {};
    var vd = add(box, el("div", "eb-verdict"));
    var parts = ["reward " + v.reward];
    Object.keys(v.breakdown || {}).forEach(function (k) { parts.push(k + " " + v.breakdown[k]); });
    kv(vd, "verdict", parts.join(" · ") + (v.reason ? " — " + v.reason : ""));
    if (v.actions && v.actions.length) { kv(vd, "gold actions", checks(v.actions, call)); }
    else if (v.gold && v.gold.actions.length) { kv(vd, "gold actions", v.gold.actions.map(call).join(" · ")); }
    if (v.communicate && v.communicate.length) { kv(vd, "communicate", checks(v.communicate, function (x) { return x.info; })); }
    if (v.env_assertions && v.env_assertions.length) { kv(vd, "env assertions", checks(v.env_assertions, function (x) { return x.assertion; })); }
    if (v.db_match !== undefined && v.db_match !== null) { kv(vd, "DB match", String(v.db_match)); }
    if (v.code_status) { kv(vd, "code checker", v.code_status); }
    kv(box, "termination", ep.termination + (ep.steps !== null && ep.steps !== undefined ? " (" + ep.steps + " steps)" : ""));
    var a = ep.attribution;
    kv(box, "attribution", a ? a.label + " / " + a.rule + " (decided_by " + a.decided_by + ")" +
       (a.turn !== null && a.turn !== undefined ? " at message " + a.turn : "") + (a.evidence ? ": " + a.evidence : "")
       : (ep.passed ? "— (passed)" : "not recorded"));
    var f = ep.fidelity || {};
    var fl = [];
    if (f.request_stated !== undefined) { fl.push("request stated: " + (f.request_stated === null ? "n/a" : (f.request_stated ? "yes" : "no"))); }
    if (f.proper_end !== undefined) { fl.push("proper end: " + (f.proper_end ? "yes" : "no")); }
    var devs = f.deviations || [];
    fl.push(devs.length ? devs.length + " deviation(s): " + devs.map(function (d) { return d.kind + " at message " + d.turn + " (" + d.evidence + ")"; }).join("; ") : "no deviations");
    kv(box, "user fidelity", fl.join(" · "));
    if (ep.note) { add(box, el("div", "eb-note", ep.note)); }
    var flagged = {};
    devs.forEach(function (d) { flagged[d.turn] = (flagged[d.turn] ? flagged[d.turn] + ", " : "") + d.kind; });
    var dlg = add(box, el("div", "eb-dialogue"));
    ep.messages.forEach(function (m) {
      var cls = "eb-msg eb-" + m.role + (m.error ? " eb-err" : "");
      if (m.role === "system") {
        var det = add(dlg, el("details", cls));
        add(det, el("summary", "eb-role", "[" + m.i + "] system prompt (" + m.chars + " characters)"));
        add(det, el("div", null, texts[m.ref] || ""));
        return;
      }
      var d = add(dlg, el("div", cls));
      d.setAttribute("data-role", m.role);
      var who = m.role === "tool" ? "tool result: " + m.tool + (m.error ? " — ERROR" : "") : m.role;
      add(d, el("div", "eb-role", "[" + m.i + "] " + who));
      if (m.content) { add(d, el("div", "eb-text", m.content)); }
      (m.calls || []).forEach(function (c) { add(d, el("div", "eb-call", "→ " + call(c))); });
      if (m.parse_error) { add(d, el("div", "eb-flag", "parse error: " + m.parse_error)); }
      if (flagged[m.i]) { add(d, el("div", "eb-flag", "user fidelity: " + flagged[m.i])); }
    });
    return box;
  }

  function allEpisodes() { var out = []; groups.forEach(function (g) { out = out.concat(g.episodes); }); return out; }
  function fillTasks(g, keep) {
    var ids = {}, src = chkSide.checked ? allEpisodes() : g.episodes;
    src.forEach(function (e) { ids[e.task_id] = true; });
    while (selTask.firstChild) { selTask.removeChild(selTask.firstChild); }
    option(selTask, "", "all tasks");
    Object.keys(ids).sort().forEach(function (t) { option(selTask, t, t); });
    selTask.value = ids[keep] ? keep : "";
  }
  function render() {
    var g = group(selGroup.value), status = selStatus.value, task = selTask.value;
    while (list.firstChild) { list.removeChild(list.firstChild); }
    while (view.firstChild) { view.removeChild(view.firstChild); }
    var t = g.total || {}, s = g.shown || {};
    counts.textContent = g.label + ": " + (t.episodes || 0) + " episodes (" + (t.passed || 0) + " passed, " + (t.failed || 0) +
      " failed, of which " + (t.max_steps || 0) + " cut by max_steps); shown " + (s.episodes || 0) +
      ((t.episodes || 0) > (s.episodes || 0) ? ", left out " + ((t.episodes || 0) - (s.episodes || 0)) + " (" +
        ((t.passed || 0) - (s.passed || 0)) + " passed, " + ((t.failed || 0) - (s.failed || 0)) + " failed)" : "") +
      (g.note ? " — " + g.note : "");
    if (chkSide.checked) {
      root.setAttribute("data-eb-side", "true");
      if (!task) { add(view, el("div", "eb-note", "pick a task to see it side by side in every group that has it")); }
      groups.forEach(function (gg) {
        var eps = gg.episodes.filter(function (e) { return matches(e, status, task); });
        if (task && eps.length) { add(view, renderEpisode(eps[0])); }
      });
      root.setAttribute("data-eb-shown", String(view.childNodes.length));
      return;
    }
    root.setAttribute("data-eb-side", "false");
    var eps = g.episodes.filter(function (e) { return matches(e, status, task); });
    root.setAttribute("data-eb-shown", String(eps.length));
    if (!eps.length) { add(list, el("div", "eb-note", "no episode matches")); }
    eps.forEach(function (e) {
      var row = add(list, el("div", "eb-row" + (e.uid === openUid ? " sel" : "")));
      row.setAttribute("data-uid", e.uid);
      row.setAttribute("data-passed", String(e.passed));
      add(row, badge(e));
      add(row, el("span", null, e.task_id + " · trial " + e.trial));
      add(row, el("span", null, "reward " + (e.verdict || {}).reward));
      add(row, el("span", null, e.termination));
      if (e.attribution) { add(row, el("span", null, e.attribution.label + "/" + e.attribution.rule)); }
      row.addEventListener("click", function () { openUid = e.uid; render(); writeHash(); });
    });
    var open = eps.filter(function (e) { return e.uid === openUid; })[0];
    if (open) { add(view, renderEpisode(open)); }
  }
  function writeHash() {
    var p = ["group=" + encodeURIComponent(selGroup.value), "status=" + selStatus.value];
    if (selTask.value) { p.push("task=" + encodeURIComponent(selTask.value)); }
    if (chkSide.checked) { p.push("side=1"); }
    if (openUid) { p.push("open=" + encodeURIComponent(openUid)); }
    try { history.replaceState(null, "", "#eb:" + p.join("&")); } catch (err) { /* file:// in some browsers */ }
  }
  function readHash() {
    var h = location.hash.replace(/^#/, ""), out = {};
    if (h.indexOf("eb:") !== 0) { return out; }
    h.slice(3).split("&").forEach(function (kv) {
      var i = kv.indexOf("=");
      if (i > 0) { out[kv.slice(0, i)] = decodeURIComponent(kv.slice(i + 1)); }
    });
    return out;
  }

  groups.forEach(function (g) {
    option(selGroup, g.id, (g.kind === "eval" ? "evaluation: " : "engine: ") + g.label + " (" + (g.shown || {}).episodes + "/" + (g.total || {}).episodes + ")");
  });
  [["all", "all"], ["passed", "passed"], ["failed", "failed"], ["max_steps", "cut by max_steps"]].forEach(function (x) { option(selStatus, x[0], x[1]); });
  function changed() { openUid = null; render(); writeHash(); }
  selGroup.addEventListener("change", function () { fillTasks(group(selGroup.value), selTask.value); changed(); });
  selStatus.addEventListener("change", changed);
  selTask.addEventListener("change", changed);
  chkSide.addEventListener("change", function () { fillTasks(group(selGroup.value), selTask.value); changed(); });

  var st = readHash();
  if (st.group && groups.some(function (g) { return g.id === st.group; })) { selGroup.value = st.group; }
  if (st.status) { selStatus.value = st.status; }
  chkSide.checked = st.side === "1";
  if (groups.length) {
    fillTasks(group(selGroup.value), st.task || "");
    render();
    if (st.open === "first") {  // a link (or a test) asking for the first episode the filters leave
      var first = list.querySelector(".eb-row");
      if (first) { first.click(); }
    } else if (st.open) { openUid = st.open; render(); }
    if (st.top === "1") {  // the browser alone at the top of the page (a link to it; a screenshot)
      var wrap = document.getElementById("eb-wrap");
      document.body.insertBefore(wrap, document.body.firstChild);
      document.body.insertBefore(el("h2", null, "Episodes"), wrap);
    } else if (location.hash.indexOf("#eb:") === 0) { root.scrollIntoView(); }
  } else {
    counts.textContent = "no episodes in this run";
  }
  root.setAttribute("data-eb-ready", "true");
})();
"""


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
        f"<script>{SCRIPT}</script>",
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
