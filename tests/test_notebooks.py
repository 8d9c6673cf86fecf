"""The stage notebooks: jupytext percent files (notebooks/<stage>.py) that are thin drivers of
kit/stages, parameters cells that match the stage Configs, a JupyterLab open-run-save that leaves
them unchanged, stage Configs that carry every knob of their mechanism, and (slow) every notebook
executed by papermill through `kit run` on tiny parameters."""

from __future__ import annotations

import ast
import json
import re
import shutil
from pathlib import Path

import jupytext
import nbformat
import pytest

from kit.runner.stages import RUNNER_FIELDS, STAGES
from kit.runner.stage import cell_comment
from kit.stages import MODULES

ROOT = Path(__file__).resolve().parents[1]
# one notebook per stage module: sft_user and sft_agent share notebooks/sft.py
NOTEBOOKS = {s: ROOT / "notebooks" / f"{MODULES[s]}.py" for s in STAGES}
MODULE = MODULES


def _cells(stage):
    nb = jupytext.read(NOTEBOOKS[stage])
    params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    return nb, params


@pytest.mark.parametrize("stage", list(STAGES))
def test_notebook_is_a_thin_driver_of_its_stage_module(stage):
    nb, params = _cells(stage)
    assert len(params) == 1, f"{stage}: needs exactly one cell tagged 'parameters'"
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert nb.cells[0].cell_type == "markdown" and f"`{stage}`" in nb.cells[0].source.splitlines()[0]
    code = [c.source for c in nb.cells if c.cell_type == "code" and c is not params[0]]
    lines = [x for src in code for x in src.splitlines() if x.strip() and not x.lstrip().startswith("#")]
    assert len(lines) <= 25, f"{stage}: {len(lines)} lines of code outside the parameters cell"
    text = "\n".join(code)
    assert re.search(r'begin\("(' + "|".join(s for s in STAGES if MODULES[s] == MODULE[stage]) + r')", globals\(\)\)',
                     text) and f"{MODULE[stage]}.run(st.config, st)" in text
    assert "st.finish(out)" in text
    for node in ast.walk(ast.parse(text)):  # no stage logic: no functions, loops or classes of its own
        assert not isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.For, ast.While, ast.With)), \
            f"{stage}: {type(node).__name__} in a notebook; stage logic belongs in kit/stages/{MODULE[stage]}.py"


@pytest.mark.parametrize("stage", list(STAGES))
def test_parameters_cell_matches_the_stage_config(stage):
    _, params = _cells(stage)
    values = {}
    for node in ast.parse(params[0].source).body:
        if isinstance(node, ast.Assign):
            values[node.targets[0].id] = ast.literal_eval(node.value)
    config = STAGES[stage]
    assert sorted(values) == sorted(list(config.model_fields) + list(RUNNER_FIELDS))
    comments = {line.split(" = ")[0]: line.split("  # ", 1)[1] for line in params[0].source.splitlines()
                if " = " in line and "  # " in line}
    for name, f in config.model_fields.items():
        if not f.is_required():
            assert values[name] == f.default, f"{stage}: {name} = {values[name]!r} in the notebook, " \
                                              f"{f.default!r} in its Config"
        assert comments[name] == cell_comment(f.description), f"{stage}: {name}'s comment is not its Config description"
    # papermill reads every line (a line with two '=' it cannot parse, and the parameter is then "unknown")
    assert all(line.count("=") == 1 for line in params[0].source.splitlines() if " = " in line), stage
    assert all(values[k] is None for k in RUNNER_FIELDS)


def test_opening_running_and_saving_in_jupyterlab_changes_nothing(tmp_path):
    """JupyterLab saves through jupytext's contents manager: outputs and execution counts are never
    written to the .py, so a notebook opened, run and saved is byte-identical."""
    from jupytext import TextFileContentsManager

    for stage, path in NOTEBOOKS.items():
        shutil.copy(path, tmp_path / path.name)
    cm = TextFileContentsManager(root_dir=str(tmp_path))
    for stage, path in NOTEBOOKS.items():
        model = cm.get(path.name)
        nb = model["content"]
        for i, c in enumerate(nb.cells):
            if c.cell_type == "code":  # what running it in the kernel adds
                c.execution_count = i + 1
                c.outputs = [nbformat.v4.new_output("stream", name="stdout", text="ran\n")]
        cm.save({"type": "notebook", "content": nb}, path.name)
        assert (tmp_path / path.name).read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), stage
        assert not list(tmp_path.glob("*.ipynb")), "saving must not create a paired .ipynb"


# runtime values a stage resolves itself (folders, backend specs, W&B wiring), not recipe knobs
RUNTIME = {"out_dir", "output_dir", "model_path", "report_to", "run_name", "templates_dir", "wandb_group",
           "wandb_project", "print_metrics", "user_tag", "user_model", "model", "sync_dir",
           "checkpoint_dir", "checkpoint_tag"}


@pytest.mark.parametrize("stage", ["synthesize", "sft_agent", "grpo", "evaluate"])
def test_every_mechanism_knob_is_a_stage_config_field_with_its_default(stage):
    from kit.engine import EngineConfig
    from kit.eval import EvalConfig
    from kit.train.grpo_config import GRPOConfig
    from kit.train.sft import SFTConfig

    mech = {"synthesize": EngineConfig, "sft_agent": SFTConfig, "grpo": GRPOConfig, "evaluate": EvalConfig}[stage]
    defaults = {n: f.default for n, f in mech.model_fields.items()}
    renamed: dict = {}
    config = STAGES[stage].model_fields
    for name, default in defaults.items():
        if name in RUNTIME or name == "training_data":
            continue
        ours = renamed.get(name, name)
        assert ours in config, f"{mech.__name__}.{name} cannot be set from a recipe (no field in {stage}'s Config)"
        if name not in renamed and name != "domain":
            assert config[ours].default == default, (stage, name)


@pytest.mark.parametrize("stage", ["synthesize", "sft_agent", "grpo", "evaluate"])
def test_a_recipe_knob_reaches_the_mechanism_config_under_its_own_name(stage):
    """The path of every knob from a recipe's params to the mechanism's config: the stage Config
    inherits the mechanism's Knobs class (one declaration), and mechanism_kwargs hands each one on."""
    from kit.engine.config import EngineConfig, EngineKnobs
    from kit.eval.config import EvalConfig, EvalKnobs
    from kit.stages.base import mechanism_kwargs
    from kit.train.grpo_config import GRPOConfig, GRPOKnobs
    from kit.train.sft import SFTConfig, SFTKnobs

    knobs, mech = {"synthesize": (EngineKnobs, EngineConfig), "sft_agent": (SFTKnobs, SFTConfig),
                   "grpo": (GRPOKnobs, GRPOConfig), "evaluate": (EvalKnobs, EvalConfig)}[stage]
    config_cls = STAGES[stage]
    assert issubclass(config_cls, knobs)
    for name, f in knobs.model_fields.items():
        assert repr(config_cls.model_fields[name]) == repr(f), f"{stage}.{name} is redeclared, not inherited"
    changed = {}
    for name, f in knobs.model_fields.items():  # a value other than the default, of the field's type
        d = f.default
        if isinstance(d, bool):
            changed[name] = not d
        elif isinstance(d, int):
            changed[name] = d + 3
        elif isinstance(d, float):  # stays inside (0, 1] bounds
            changed[name] = (d + 0.05) / 2
    config = config_cls(domain="mock", **changed)
    resolved = {"model": "embedded", "user_model": "embedded"}  # what run() resolves from the run's stages
    runtime = {"synthesize": {"out_dir": "x", **resolved}, "evaluate": resolved,
               "grpo": {"user_model": "embedded", "user_tag": "raw"}}.get(stage, {})
    built = mech(**mechanism_kwargs(config, mech, **runtime))
    for name, value in changed.items():
        assert getattr(built, name) == value, (stage, name)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.xdist_group("tiny_chain")  # the episode browser's slow test reads the same run
def test_every_stage_notebook_runs_under_papermill_on_tiny_parameters(tiny_chain):
    from kit.runner import load_recipe
    from kit.runner.execute import Runner

    res, p, tmp_path = tiny_chain.result, tiny_chain.recipe, tiny_chain.root
    log = open(tmp_path / "rerun.log", "w")
    assert res.executed == list(STAGES)
    for stage in STAGES:
        out = res.run_dir / stage / f"{stage}.ipynb"
        nb = nbformat.read(str(out), as_version=4)
        assert any("parameters" in c.metadata.get("tags", []) for c in nb.cells), stage
        errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, (stage, errors[:1])
        assert any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), stage
        info = json.loads((res.run_dir / stage / "stage.json").read_text())
        assert info["status"] == "complete", stage
    ev = json.loads((res.run_dir / "evaluate" / "eval.json").read_text())
    assert ev["meta"]["tasks"] == 2 and ev["config"]["model"] == f"hf:{res.run_dir}/grpo/model"
    assert (res.run_dir / "grpo" / "metrics.jsonl").read_text().count("\n") == 1
    # the curriculum probed before the step; the learning curve has a point before and after it
    assert (res.run_dir / "grpo" / "probes.jsonl").read_text().count("\n") == 1
    curve = [json.loads(x) for x in (res.run_dir / "grpo" / "curve.jsonl").read_text().splitlines()]
    assert [p["step"] for p in curve] == [0, 1] and curve[0]["split"] == "heldout_val" and curve[0]["tasks"] == 1
    assert (res.run_dir / "grpo" / "model_best" / "config.json").exists()
    assert json.loads((res.run_dir / "grpo" / "stage.json").read_text())["summary"]["user_tag"] == "fine-tuned"
    # each stage.json reads back as its stage's Outputs model (what the report reads)
    from kit.stages import outputs_class

    for stage in STAGES:
        info = json.loads((res.run_dir / stage / "stage.json").read_text())
        out = outputs_class(stage).from_stage_json(info)
        assert all(Path(p).exists() for p in out.files.values()), stage
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


def test_jupyterlab_opens_the_stage_notebooks_as_notebooks():
    """Was: a double click on notebooks/*.py opened the text editor. `make setup` sets jupytext's
    notebook view as the default viewer of Python files in the venv's JupyterLab app settings."""
    from jupyterlab.commands import get_app_dir

    app = Path(get_app_dir())
    overrides = app / "settings" / "overrides.json"
    assert overrides.is_file(), f"{overrides} missing: run `make setup`"
    viewers = json.loads(overrides.read_text())["@jupyterlab/docmanager-extension:plugin"]["defaultViewers"]
    assert viewers["python"] == "Jupytext Notebook"
    assert (app.parent / "labextensions" / "jupyterlab-jupytext").is_dir()  # the extension that provides that viewer
