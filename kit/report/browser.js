// The episode browser's page script, inlined into the report by kit/report/browser.py (render_fragment):
// it reads the JSON block #eb-data and builds the DOM with textContent only, so model text stays data.
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
