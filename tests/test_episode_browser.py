"""The episode browser (kit/report/episodes.py, browser.py): extraction from records the kit's own writers wrote, the
terminal view (`kit view`), model text that never becomes markup, and the page in headless Chromium.

The fast run (`scripted_run`) is real records without a model: two evaluations written by
kit.eval.runner.evaluate with the scripted roles of one mock task (kit/rollout/scripted.py) over three
tasks (one passes, two fail with a wrong write), the second arm cut by max_messages; one engine unit
committed by kit.engine.store.RunStore with a checker from kit.engine.validate.make_checker (its real
mutation report), rollouts verified by the checker and attributed (kit.checkers.attribution), and a
rejected proposal. The slow test browses the report of the tiny chain the notebook test runs end to end
(papermill, a small random-weight model; tests/_tiny_chain.py).
"""

from __future__ import annotations

import html
import json
import re
import time
from pathlib import Path

import pytest

from _fake_run import _stage
from test_report_browser import ARTIFACTS, browse, chromium

from kit.files import write_json
from kit.stages import outputs_class


def _evaluate_stage(run: Path, key: str, arm: str, tasks_file: Path, task, label: str, max_messages: int = 30) -> dict:
    from kit.eval import evaluate
    from kit.eval.config import EvalConfig
    from kit.rollout import ScriptedAgent, ScriptedUser

    st, entry = _stage(run, "evaluate", key, arm=arm, params={"label": label})
    cfg = EvalConfig(domain="mock", tasks_file=str(tasks_file), trials=1, max_messages=max_messages,
                     out_dir=str(st.out_dir), allow_overlap=True)
    res = evaluate(cfg, agent=ScriptedAgent(task), user=ScriptedUser(task), progress=False)
    st.finish(outputs_class("evaluate")(
        files={"eval": str(st.out_dir / "eval.json"), "episodes": str(st.out_dir / "episodes.csv")}, label=label,
        passk={str(k): v for k, v in res.passk.items()}, model="scripted", user_model="scripted",
        tasks=res.meta["tasks"], trials=1))
    return entry


def _engine_stage(run: Path, dom, task, broken) -> dict:
    """One committed engine unit: an accepted task (checker + mutation report) with two scripted rollouts,
    one passing and one failing (attributed), and a rejected proposal."""
    from kit.checkers.attribution import attribute
    from kit.checkers.checker import run_checker
    from kit.engine.records import Episode, UnitResult
    from kit.engine.rounds import ROUND_COLUMNS, RoundRow, write_rounds_csv
    from kit.engine.store import RunStore
    from kit.engine.synthesize import Proposal
    from kit.engine.validate import executable_checks, make_checker
    from kit.rollout import ScriptedAgent, ScriptedUser
    from kit.rollout.fidelity import user_deviations
    from kit.rollout.loop import RolloutConfig, run_episodes
    from kit.verify import verify

    st, entry = _stage(run, "synthesize", "synthesize")
    rec, reasons = make_checker(dom, task)
    assert not reasons and rec.checker.mutation_report
    good = run_episodes(dom, [task], ScriptedAgent(task), ScriptedUser(task), RolloutConfig(max_messages=30))
    bad = run_episodes(dom, [task], ScriptedAgent(broken), ScriptedUser(task), RolloutConfig(max_messages=30))
    episodes = []
    for i, traj in enumerate(good + bad):
        traj.meta.update({"source": "engine", "unit": "r0-p0", "trial": i})
        criteria = verify(dom, task, traj)
        v = run_checker(dom, rec, traj, criteria=criteria)
        devs = user_deviations(task, traj, goal_reached=v.reward == 1.0)
        traj.meta.update({"reward": v.reward, "breakdown": v.breakdown, "user_deviations": [d.__dict__ for d in devs]})
        failure = None
        if v.reward < 1.0:
            att = attribute(dom, task, traj, criteria=criteria)
            failure = {"unit": "r0-p0", "round": 0, "task_id": traj.task_id, "trajectory_id": traj.id,
                       "label": att.label, "rule": att.rule, "decided_by": att.decided_by,
                       "evidence": att.evidence[:300], "reason": v.reason, "termination": traj.termination_reason}
        episodes.append(Episode(trajectory=traj, verdict=v, failure=failure))
    rejected = broken.model_copy(deep=True)
    rejected.id = "syn-r0-p0-a1"
    rejected.evaluation_criteria.actions = [a for a in rejected.evaluation_criteria.actions
                                            if not dom.is_write_tool(a.name, a.requestor)]  # reads only
    rej_reasons = executable_checks(dom, rejected)
    assert rej_reasons
    props = []
    for a, (t, rs) in enumerate([(task, []), (rejected, rej_reasons)]):
        row = Proposal(unit="r0-p0", attempt=a, plan_id="plan0", task=t).record()
        row.update({"round": 0, "accepted": not rs, "reasons": [r.to_json() for r in rs]})
        if rs:
            row["task"] = json.loads(t.model_dump_json(exclude_none=True))
        props.append(row)
    RunStore(st.out_dir).commit(UnitResult(unit="r0-p0", round=0, plan_id="plan0", proposals=props, accepted=[rec],
                                           episodes=episodes, samples_agent=[], samples_user=[], sft_ungrounded=0,
                                           choice_fallbacks=0))
    write_json(st.out_dir / "manifest.json", {"config": {"llm_judge": False, "validation": True}})
    write_rounds_csv(st.out_dir / "rounds.csv", [RoundRow(**({c: 0 for c in ROUND_COLUMNS} | {"round": 0, "proposals": 2,
                                                                                             "accepted": 1, "episodes": 2}))])
    st.finish(outputs_class("synthesize")(files={"rounds": str(st.out_dir / "rounds.csv")}, accepted=1, rounds=1,
                                          proposals=2, lines={}))
    return entry


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory):
    from kit.envs import load_domain

    root = tmp_path_factory.mktemp("browser")
    run = root / "runs" / "scripted"
    dom = load_domain("mock")
    tasks = dom.tasks("heldout")[:3]
    tasks_file = root / "tasks.json"
    tasks_file.write_text(json.dumps([json.loads(t.model_dump_json()) for t in tasks]))
    entries = [_evaluate_stage(run, "scripted/evaluate", "scripted", tasks_file, tasks[0], "scripted agent"),
               _evaluate_stage(run, "cut/evaluate", "cut", tasks_file, tasks[0], "cut at 3 messages", max_messages=3),
               _engine_stage(run, dom, tasks[0], tasks[1])]
    write_json(run / "manifest.json", {"run_id": "scripted", "recipe": {"path": "scripted", "parsed": {"name": "scripted"}},
                                       "stages": entries})
    return run, [t.id for t in tasks]


def _payload(run, cap=40):
    from kit.report.episodes import browser_data
    from kit.report.build import collect

    return browser_data(collect(run), cap=cap)


def test_evaluation_episodes_carry_dialogue_verdict_attribution_and_fidelity(scripted_run):
    run, ids = scripted_run
    t0 = time.perf_counter()
    p = _payload(run)
    assert time.perf_counter() - t0 < 10
    assert p["problems"] == []
    g = {x["id"]: x for x in p["groups"]}
    ok = g["eval:scripted/evaluate"]
    assert ok["total"] == ok["shown"] == {"episodes": 3, "passed": 1, "failed": 2, "max_steps": 0}
    by_task = {e["task_id"]: e for e in ok["episodes"]}
    good, bad = by_task[ids[0]], by_task[ids[1]]
    assert good["passed"] and good["verdict"]["reward"] == 1.0 and good["attribution"] is None
    assert good["verdict"]["breakdown"] == {"DB": 1.0} and good["verdict"]["db_match"] is True  # mock: DB basis
    calls = [c for m in good["messages"] for c in m.get("calls") or []]
    assert calls and calls[0]["arguments"]  # tool calls with their arguments
    assert any(m["role"] == "tool" and m["content"] for m in good["messages"])  # and their results
    assert good["fidelity"]["proper_end"] is True and "request_stated" in good["fidelity"]
    assert not bad["passed"] and bad["verdict"]["reward"] == 0.0
    assert bad["attribution"]["decided_by"] == "rule" and bad["attribution"]["label"] == "agent"
    assert bad["verdict"]["breakdown"] == {"DB": 0.0} and bad["verdict"]["db_match"] is False
    assert bad["note"] is None  # the recomputed verdict agrees with eval.json
    cut = g["eval:cut/evaluate"]
    assert cut["total"]["max_steps"] == 3 and all(e["status"] == "max_steps" for e in cut["episodes"])
    rules = {e["task_id"]: e["attribution"]["rule"] for e in cut["episodes"]}
    assert rules[ids[0]] == "ended_early" and rules[ids[1]] == "wrong_write"  # the first rule that fires decides


def test_a_cap_keeps_whole_tasks_in_one_order_for_every_arm_and_counts_the_rest(scripted_run):
    run, _ = scripted_run
    p = _payload(run, cap=2)
    g = {x["id"]: x for x in p["groups"]}
    a, b = g["eval:scripted/evaluate"], g["eval:cut/evaluate"]
    assert a["shown"]["episodes"] == b["shown"]["episodes"] == 2 and a["total"]["episodes"] == 3
    assert [e["task_id"] for e in a["episodes"]] == [e["task_id"] for e in b["episodes"]]  # side by side works


def test_a_tau2_protocol_evaluation_is_browsed_from_its_simulation_runs(tmp_path):
    """`protocol: tau2` keeps tau2's SimulationRuns (kit.eval.tau2_native.SIM_FILE, one JSON line per episode, as
    evaluate_tau2_native appends them) and no trajectories.jsonl: the browser reads those. The episodes here are
    the scripted ones of `scripted_run`'s first arm, converted to SimulationRuns by kit.trajectory (no tau2 LLM run:
    the test is about reading the file)."""
    from kit.eval.config import EvalConfig
    from kit.eval.results import EvalResult, done_pairs
    from kit.eval.tau2_native import SIM_FILE
    from kit.envs import load_domain

    dom = load_domain("mock")
    tasks = dom.tasks("heldout")[:3]
    tasks_file = tmp_path / "tasks.json"
    tasks_file.write_text(json.dumps([json.loads(t.model_dump_json()) for t in tasks]))
    run = tmp_path / "runs" / "t2"
    kit_entry = _evaluate_stage(run, "kit/evaluate", "kit", tasks_file, tasks[0], "kit protocol")
    kit_dir = Path(kit_entry["executed_notebook"]).parent
    st, entry = _stage(run, "evaluate", "tau2/evaluate", arm="tau2", params={"label": "tau2 protocol"})
    with open(st.out_dir / SIM_FILE, "w", encoding="utf-8") as f:
        for (task_id, trial), traj in done_pairs(kit_dir / "trajectories.jsonl").items():
            sim = traj.to_tau2()
            sim.trial = trial
            f.write(sim.model_dump_json() + "\n")
    ev = json.loads((kit_dir / "eval.json").read_text())
    import pandas as pd

    cfg = EvalConfig(domain="mock", tasks_file=str(tasks_file), trials=1, protocol="tau2", out_dir=str(st.out_dir),
                     model="openai:http://127.0.0.1:9/v1#agent", user_model="openai:http://127.0.0.1:9/v1#user")
    EvalResult(cfg, pd.DataFrame(ev["episodes"]), {int(k): v for k, v in ev["passk"].items()},
               {**ev["meta"], "protocol": "tau2"}).write(st.out_dir)
    st.finish(outputs_class("evaluate")(
        files={"eval": str(st.out_dir / "eval.json"), "episodes": str(st.out_dir / "episodes.csv")},
        label="tau2 protocol", passk=ev["passk"], model=cfg.model, user_model=cfg.user_model, tasks=3, trials=1))
    assert not (st.out_dir / "trajectories.jsonl").exists()
    write_json(run / "manifest.json", {"run_id": "t2", "recipe": {"path": "t2", "parsed": {"name": "t2"}},
                                       "stages": [kit_entry, entry]})
    g = {x["id"]: x for x in _payload(run)["groups"]}
    kit_g, t2 = g["eval:kit/evaluate"], g["eval:tau2/evaluate"]
    assert "note" not in t2 and t2["total"] == t2["shown"] == {"episodes": 3, "passed": 1, "failed": 2, "max_steps": 0}
    for a, b in zip(kit_g["episodes"], t2["episodes"]):  # the same dialogues, verdicts and attributions
        assert (a["task_id"], a["passed"], a["verdict"]["reward"]) == (b["task_id"], b["passed"], b["verdict"]["reward"])
        assert a["attribution"] == b["attribution"] and b["note"] is None
        assert [(m["role"], m.get("content")) for m in a["messages"]] == [(m["role"], m.get("content")) for m in b["messages"]]
        assert [c["arguments"] for m in a["messages"] for c in m.get("calls") or []] == \
            [c["arguments"] for m in b["messages"] for c in m.get("calls") or []]


def test_engine_rounds_and_proposals(scripted_run):
    run, ids = scripted_run
    p = _payload(run)
    (eng,) = [x for x in p["groups"] if x["kind"] == "engine"]
    assert eng["id"] == "engine:synthesize:r0" and eng["total"] == {"episodes": 2, "passed": 1, "failed": 1, "max_steps": 0}
    failed = [e for e in eng["episodes"] if not e["passed"]][0]
    assert failed["attribution"]["decided_by"] == "rule" and failed["verdict"]["breakdown"].get("CODE") is not None
    assert failed["verdict"]["gold"]["actions"]
    (props,) = p["proposals"]
    assert props["total"] == {"proposals": 2, "accepted": 1, "rejected": 1}
    acc, rej = props["proposals"]
    assert acc["accepted"] and acc["mutation_report"]["made"] > 0 and "reason_for_call" in acc["scenario"]
    assert acc["gold"]["actions"] == [{"name": a["name"], "arguments": a["arguments"], "requestor": a["requestor"]}
                                      for a in acc["gold"]["actions"]] and acc["passed"] and "llm_judge" not in acc["passed"]
    assert not rej["accepted"] and rej["failed"][0]["check"] and rej["failed"][0]["detail"]
    assert rej["scenario"] and rej["gold"] is not None and not rej["passed"]


def test_model_text_never_becomes_markup():
    from kit.report.browser import _json_script, render_fragment
    from kit.report.episodes import messages_view
    from kit.trajectory import Message, Trajectory

    evil = "</script><img src=x onerror=alert(1)><!-- & \u2028"
    t = Trajectory(task_id="t<b>", messages=[Message(role="user", content=evil), Message(role="assistant", content="ok")])
    ep = {"uid": "g/t", "group": "g", "task_id": "t<b>", "trial": 0, "passed": False, "status": "failed",
          "termination": "agent_stop", "verdict": {"reward": 0.0, "breakdown": {}}, "attribution": None,
          "fidelity": {}, "messages": messages_view(t, {})}
    payload = {"groups": [{"id": "g", "kind": "eval", "label": "<i>arm</i>", "episodes": [ep], "total": {}, "shown": {}}],
               "proposals": [{"id": "g", "label": "<b>r0</b>", "total": {"proposals": 1}, "shown": 1, "proposals": [
                   {"unit": "<u>", "attempt": 0, "plan_id": "p", "task_id": "<x>", "accepted": False,
                    "scenario": {"reason_for_call": evil}, "gold": None, "failed": [{"check": "policy", "detail": evil}],
                    "passed": [], "checks_note": "n", "mutation_report": None}]}],
               "texts": {}, "cap": 40}
    page = render_fragment(payload)
    assert "<img" not in page and "</script><img" not in page and "<b>r0" not in page and "<u>" not in page
    block = re.search(r"<script type='application/json' id='eb-data'>(.*?)</script>", page, re.S).group(1)
    assert json.loads(block)["groups"][0]["episodes"][0]["messages"][0]["content"] == evil
    assert "<" not in _json_script({"a": evil})


def test_kit_view_prints_one_episode_in_the_browsers_layout(scripted_run, capsys):
    from kit.cli import main

    run, ids = scripted_run
    assert main(["view", str(run), "--arm", "scripted"]) == 0
    out = capsys.readouterr().out
    head = out.splitlines()[0]
    assert head.startswith("FAIL") and "scripted agent" in head
    for part in ("verdict        reward 0.0", "termination    agent_stop", "decided_by rule", "user fidelity",
                 "[0] ", "    → ", "tool result: "):
        assert part in out, part
    assert main(["view", str(run), "--arm", "scripted", "--status", "passed"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"PASS  task {ids[0]}") and "DB match       True" in out and "attribution    — (passed)" in out
    assert main(["view", str(run), "--arm", "cut", "--task", ids[2]]) == 0
    assert capsys.readouterr().out.startswith(f"CUT  task {ids[2]}")
    assert main(["view", str(run), "--arm", "synthesize"]) == 0
    assert "gold actions" in capsys.readouterr().out
    assert main(["view", str(run), "--arm", "nope"]) == 2
    err = capsys.readouterr().err
    assert "'nope'" in err and "scripted" in err and "synthesize" in err


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line
            or "Failed to load resource" in line]


def _browse_failed(binary: str, html_path: Path, profile: Path, group: str, shot: Path) -> str:
    """Open the report filtered to `group`'s failed episodes with the first one open; returns the DOM."""
    url = html_path.resolve().as_uri() + f"#eb:group={group}&status=failed&open=first&top=1"
    dom = browse(binary, url, profile, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert not _console(dom.stderr), _console(dom.stderr)
    ARTIFACTS.mkdir(exist_ok=True)
    shot.unlink(missing_ok=True)
    r = browse(binary, url, profile, "--window-size=1200,1400", f"--screenshot={shot}")
    assert r.returncode == 0 and shot.exists() and shot.stat().st_size > 20_000, r.stderr[-2000:]
    print(f"screenshot: {shot}  page: {html_path.stat().st_size} bytes")
    return dom.stdout


def _check_failed_view(dom: str, group: dict) -> None:
    root = re.search(r'<div id="eb"[^>]*>', dom).group(0)
    assert 'data-eb-ready="true"' in root, root
    n_failed = sum(not e["passed"] for e in group["episodes"])
    assert f'data-eb-shown="{n_failed}"' in root, (root, n_failed)
    rows = re.findall(r'<div class="eb-row[^"]*" data-uid="([^"]+)" data-passed="(\w+)"', dom)
    assert len(rows) == n_failed and {p for _, p in rows} == {"false"}
    first = rows[0][0]
    ep = next(e for e in group["episodes"] if e["uid"] == first)
    box = dom[dom.index(f'data-episode="{first}"'):]
    box = box[: box.index('class="eb-dialogue"') + 20_000]
    assert 'data-passed="false"' in box[:200]
    assert re.search(r"verdict</b><span>reward 0(\.0)?\b", box), box[:1500]
    assert f"task {ep['task_id']}" in box and "termination" in box and "attribution" in box
    text = html.unescape(box)
    said = [m["content"][:40] for m in ep["messages"] if m.get("content")]
    assert said and all(s in text for s in said[:4])  # the dialogue itself
    where = [text.index(s) for s in said[:4]]
    assert where == sorted(where)  # in order


def test_report_browser_filters_to_failed_episodes_in_headless_chromium(scripted_run, tmp_path):
    binary = chromium()
    if binary is None:
        pytest.skip("no Chromium found (apt-get install -y chromium, or set KIT_CHROMIUM)")
    from kit.report.build import build_report

    run, ids = scripted_run
    rep = build_report(run, tmp_path / "report", bootstrap=100)
    group = next(g for g in rep.data["browser"]["groups"] if g["id"] == "eval:scripted/evaluate")
    assert 0 < sum(not e["passed"] for e in group["episodes"]) < len(group["episodes"])  # the filter has work to do
    dom = _browse_failed(binary, rep.html_path, tmp_path / "profile", group["id"], ARTIFACTS / "episode-browser.png")
    _check_failed_view(dom, group)
    assert "REJECTED" in dom and "ACCEPTED" in dom and "mutation report" in dom
    # side by side: one task in every group that has it
    url = rep.html_path.resolve().as_uri() + f"#eb:side=1&task={ids[1]}&status=all"
    side = browse(binary, url, tmp_path / "profile", "--dump-dom")
    assert not _console(side.stderr)
    root = re.search(r'<div id="eb"[^>]*>', side.stdout).group(0)
    assert 'data-eb-side="true"' in root and 'data-eb-shown="2"' in root, root
    assert len(re.findall(r'class="eb-episode" data-episode="eval:[a-z]+/evaluate/' + re.escape(ids[1]), side.stdout)) == 2


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.xdist_group("tiny_chain")  # the notebook test's tiny chain (tests/_tiny_chain.py), built once
def test_a_real_tiny_runs_report_browses_its_failed_episodes_in_chromium(tiny_chain, tmp_path):
    """A real run through papermill (the tiny chain: tests/_tiny_chain.py): the report the run itself rendered."""
    binary = chromium()
    if binary is None:
        pytest.skip("no Chromium found (apt-get install -y chromium, or set KIT_CHROMIUM)")
    from kit.report.episodes import browser_data
    from kit.report.build import collect

    res = tiny_chain.result
    html_path = res.report_dir / "index.html"
    payload = browser_data(collect(res.run_dir))
    assert payload["problems"] == []
    group = next(g for g in payload["groups"] if g["kind"] == "eval")
    assert group["total"]["episodes"] == 2 and any(g["kind"] == "engine" for g in payload["groups"])
    assert group["total"]["failed"] > 0  # random weights in 2 messages: always
    dom = _browse_failed(binary, html_path, tmp_path / "profile", group["id"], ARTIFACTS / "episode-browser-tiny-run.png")
    _check_failed_view(dom, group)
    assert html_path.stat().st_size < 2_000_000
