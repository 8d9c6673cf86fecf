"""The paper's published numbers, for reports to print beside ours (τ²-bench pass^1, %).

Source: /work/shared/PAPER.md, which summarises "From Self-Evolving Synthetic Data to
Verifiable-Reward RL: Post-Training Multi-turn Interactive Tool-Using Agents" (arXiv 2601.22607,
AReaL-SEA / EigenData): its "Results to compare against" and "Ablations" tables.
"""

from __future__ import annotations

SOURCE = "arXiv 2601.22607 (AReaL-SEA), as summarised in PAPER.md"

# model -> phase -> domain -> pass^1 (%)
MAIN: dict[str, dict[str, dict[str, float]]] = {
    "Qwen3-235B-A22B": {
        "base": {"airline": 58.0, "retail": 59.9, "telecom": 53.7},
        "SFT": {"airline": 64.0, "retail": 71.5, "telecom": 87.9},
        "RL": {"airline": 73.0, "retail": 75.0, "telecom": 98.3},
    },
    "Qwen3-30B-A3B": {
        "base": {"airline": 56.0, "retail": 54.2, "telecom": 28.5},
        "SFT": {"airline": 60.0, "retail": 69.1, "telecom": 85.4},
        "RL": {"airline": 70.5, "retail": 75.0, "telecom": 95.6},
    },
}
FRONTIER: dict[str, dict[str, float]] = {
    "GPT-5": {"airline": 62.5, "retail": 81.6, "telecom": 95.8},
    "Claude Sonnet 4.5": {"airline": 70.0, "retail": 86.2, "telecom": 98.0},
    "Gemini 3.0 Pro": {"airline": 73.0, "retail": 85.3, "telecom": 98.0},
}
MIXED_235B = {"airline": 71.0, "retail": 79.0, "telecom": 93.0}

ABLATIONS: dict[str, dict] = {
    "data_engine": {
        "metric": "airline pass^1, Qwen3-30B-A3B after SFT on the engine's data",
        "arms": {"base": 38.0, "human-expert workflow": 52.0, "full engine": 56.0, "w/o validation": 50.0,
                 "w/o evolution": 44.0, "4 plans only": 42.5},
    },
    "user_model": {
        "metric": "telecom pass^1, Qwen3-30B-A3B",
        "arms": {"SFT checkpoint": 85.4, "RL with raw user": 75.6, "RL with fine-tuned user": 95.6},
    },
    "batch": {
        "metric": "airline pass^1, Qwen3-30B-A3B after RL",
        "arms": {"8x32": 64.0, "16x16": 66.0, "8x64": 70.5, "8x64 without dynamic filtering": 65.0},
    },
}

# the paper's τ² split sizes (PAPER.md, "Evaluation protocol")
SPLITS = {"airline": {"train": 30, "test": 20, "base": 50},
          "retail": {"train": 74, "test": 40, "base": 114},
          "telecom": {"train": 74, "test": 40, "base": 114}}


def main_table(domain: str) -> list[dict]:
    """Rows {model, phase, pass^1} of the paper for one domain (empty for mock or custom domains)."""
    rows = []
    for model, phases in MAIN.items():
        for phase, vals in phases.items():
            if domain in vals:
                rows.append({"model": model, "phase": phase, "pass^1 (%)": vals[domain]})
    for model, vals in FRONTIER.items():
        if domain in vals:
            rows.append({"model": model, "phase": "frontier", "pass^1 (%)": vals[domain]})
    if domain in MIXED_235B:
        rows.append({"model": "Qwen3-235B-A22B (mixed-domain RL)", "phase": "RL", "pass^1 (%)": MIXED_235B[domain]})
    return rows
