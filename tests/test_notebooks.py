"""The stage notebooks: committed without outputs, parameters cells that match the stage schemas,
and (slow) every one of them executed by papermill through `kit run` on tiny parameters."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from kit.runner.stages import RUNNER_FIELDS, STAGES

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = {s: ROOT / "notebooks" / f"{s}.ipynb" for s in STAGES}


@pytest.mark.parametrize("stage", list(STAGES))
def test_committed_notebook_has_no_outputs_and_one_parameters_cell(stage):
    nb = nbformat.read(str(NOTEBOOKS[stage]), as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{stage}: outputs not stripped"
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{stage}: needs exactly one cell tagged 'parameters'"
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith(f"# Stage `{stage}`")


@pytest.mark.parametrize("stage", list(STAGES))
def test_parameters_cell_matches_the_stage_schema(stage):
    nb = nbformat.read(str(NOTEBOOKS[stage]), as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    names = [t.id for node in ast.parse(cell.source).body if isinstance(node, ast.Assign) for t in node.targets]
    assert sorted(names) == sorted(list(STAGES[stage].model_fields) + list(RUNNER_FIELDS))
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert f'begin("{stage}", globals())' in code and "st.finish(" in code


def test_committed_notebooks_are_what_the_generator_writes():
    r = subprocess.run([sys.executable, str(ROOT / "notebooks" / "generate.py"), "--check"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_synthesize_parameters_are_engine_config_fields():
    from kit.engine import EngineConfig

    ours = set(STAGES["synthesize"].model_fields) - {"threads", "backend"}
    assert ours <= set(EngineConfig.model_fields), ours - set(EngineConfig.model_fields)
    for name in ours:
        if name not in ("model",):
            assert STAGES["synthesize"].model_fields[name].default == EngineConfig.model_fields[name].default, name


TINY = """
name: tiny-notebooks
check_budgets: false   # plumbing only: these budgets cannot score
domain: mock
base_model: embedded
stages:
  - stage: synthesize
    params: {rounds: 1, num_plans: 1, tasks_per_plan: 1, group_size: 1, max_steps: 2, max_new_tokens: 16,
             explore_steps: 0, llm_judge: false}
  - stage: sft_user
    params: {max_steps: 1, batch_size: 1, max_seq_len: 1024, gold_limit: 2}
  - stage: sft_agent
    params: {max_steps: 1, batch_size: 1, max_seq_len: 1024, gold_limit: 2}
  - stage: grpo
    params: {steps: 1, group_size: 2, tasks_per_step: 1, resample_budget: 0, micro_batch_size: 2, max_new_tokens: 8,
             max_episode_steps: 2, user_max_new_tokens: 8, filter_mode: "off"}
  - stage: evaluate
    params: {trials: 1, limit: 2, max_steps: 2, max_new_tokens: 8, label: tiny, allow_overlap: true}
  - stage: report
"""


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_every_stage_notebook_runs_under_papermill_on_tiny_parameters(tmp_path):
    from kit.runner import load_recipe
    from kit.runner.execute import Runner

    p = tmp_path / "tiny.yaml"
    p.write_text(TINY)
    log = open(tmp_path / "run.log", "w")
    res = Runner(load_recipe(p), None, tmp_path / "runs", tmp_path / "reports", stream=log).run()
    assert res.executed == list(STAGES)
    for stage in STAGES:
        out = res.run_dir / stage / f"{stage}.ipynb"
        nb = nbformat.read(str(out), as_version=4)
        errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, (stage, errors[:1])
        assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), stage
        info = json.loads((res.run_dir / stage / "stage.json").read_text())
        assert info["status"] == "complete", stage
    ev = json.loads((res.run_dir / "evaluate" / "eval.json").read_text())
    assert ev["meta"]["tasks"] == 2 and ev["config"]["model"] == f"hf:{res.run_dir}/grpo/model"
    assert (res.run_dir / "grpo" / "metrics.jsonl").read_text().count("\n") == 1
    assert json.loads((res.run_dir / "grpo" / "stage.json").read_text())["summary"]["user_tag"] == "fine-tuned"
    for f in ("index.html", "pass1.png", "sft_loss.png", "grpo.png", "engine.png", "manifest.json"):
        assert (res.report_dir / f).exists(), f
    # the SFT stages say where their data came from (engine or gold fallback), loudly if a fallback
    for role in ("user", "agent"):
        info = json.loads((res.run_dir / f"sft_{role}" / "stage.json").read_text())
        assert info["summary"]["data_source"] in ("engine", "gold-fallback")
        if info["summary"]["data_source"] == "gold-fallback":
            assert any("NO ENGINE DATA" in w for w in info["warnings"])
            assert "NO ENGINE DATA" in (res.report_dir / "index.html").read_text()
    # W&B: one offline run per stage, all in the run's group
    assert list((res.run_dir / "evaluate" / "wandb").glob("offline-run-*"))
    # a second invocation finds everything complete
    again = Runner(load_recipe(p), None, tmp_path / "runs", tmp_path / "reports", stream=log).run()
    assert again.executed == [] and again.skipped == list(STAGES)
