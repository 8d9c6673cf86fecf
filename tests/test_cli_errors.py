"""User errors at the command line: a message naming what is wrong and how to fix it, exit status
2, no traceback (`--debug` shows it); a bug keeps its traceback (kit/errors.py)."""

from __future__ import annotations

import pytest

from kit.cli import main

CASES = {  # what a newcomer types -> what the one `error:` line must name
    "unknown domain": (["eval", "--domain", "nosuch", "--limit", "1"], "unknown domain 'nosuch'"),
    "unknown split": (["eval", "--domain", "mock", "--split", "nosuch"], "has no task split 'nosuch'"),
    "missing model folder": (["eval", "--domain", "mock", "--model", "hf:/nonexistent", "--limit", "1"],
                             "model folder not found: /nonexistent"),
    "missing task file": (["eval", "--domain", "mock", "--tasks-file", "/no/tasks.jsonl"],
                          "task file not found: /no/tasks.jsonl"),
    "bad flag values": (["eval", "--domain", "mock", "--trials", "zero", "--limit", "x"], "--trials: "),
    "missing recipe": (["run", "/no/recipe.yaml"], "/no/recipe.yaml: recipe file not found"),
    "vllm without a GPU": (["eval", "--domain", "mock", "--backend", "vllm", "--model", "/tmp", "--limit", "1"],
                           "the vllm backend needs"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_user_errors_exit_2_with_a_fix_and_no_traceback(case, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # kit eval writes its outputs under the working folder
    argv, expected = CASES[case]
    if case == "vllm without a GPU":
        from kit.llm.vllm_backend import unavailable

        if unavailable() is None:
            pytest.skip("vllm and CUDA are here")
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines[0].startswith("error: ") and expected in err, err
    assert any(x.startswith("fix: ") for x in lines), err
    assert "Traceback" not in err


def test_a_bad_jsonl_line_is_named_by_file_and_line(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    from kit.envs import load_domain

    bad = tmp_path / "tasks.jsonl"
    bad.write_text(load_domain("mock").tasks()[0].model_dump_json() + "\n{not json\n")
    assert main(["eval", "--domain", "mock", "--tasks-file", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}:2: ") and "fix: " in err and "Traceback" not in err, err


def test_debug_shows_the_traceback_and_a_bug_keeps_it(monkeypatch, tmp_path):
    from kit.errors import UnknownName

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnknownName, match="unknown domain 'nosuch'"):  # --debug: the exception itself
        main(["eval", "--domain", "nosuch", "--limit", "1", "--debug"])

    def broken(args):  # a bug in a command (stands in for any command's unexpected error)
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr("kit.cli._cmd_doctor", broken)
    with pytest.raises(ZeroDivisionError):  # not swallowed: Python prints its traceback, status 1
        main(["doctor"])


def test_a_dead_endpoint_is_a_user_error(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = "http://127.0.0.1:9/v1"  # port 9 (discard): nothing listens
    assert main(["eval", "--domain", "mock", "--model", f"openai:{url}#m", "--user-model", f"openai:{url}#m",
                 "--limit", "1", "--trials", "1"]) == 2
    err = capsys.readouterr().err
    assert f"error: {url}" in err and "fix: is the server running" in err and "Traceback" not in err, err


def test_a_failed_stage_knows_every_user_error_by_name_and_kit_errors_imports_nothing_of_the_kit():
    """A notebook's exception reaches `kit run` by its class name only (kit.runner.execute tells a user
    error from a bug by it); kit.errors sits below every module, so it must not import them itself."""
    import ast

    import kit.errors
    from kit.runner.execute import stage_user_error_names

    names = stage_user_error_names()
    assert {"UserError", "BadInput", "BadLine", "EndpointError", "RecipeError", "UnknownName", "NotFound"} <= names
    tree = ast.parse(open(kit.errors.__file__).read())
    kit_imports = [n.lineno for n in ast.walk(tree)
                   if (isinstance(n, ast.Import) and any(a.name.split(".")[0] == "kit" for a in n.names))
                   or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "kit")]
    assert kit_imports == [], f"kit/errors.py imports kit modules at lines {kit_imports}"


def test_verify_of_a_missing_file_is_a_user_error(capsys, tmp_path):
    """Was: a FileNotFoundError traceback and status 1."""
    assert main(["verify", "--domain", "mock", "--input", str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: no simulations file {tmp_path / 'missing.jsonl'}") and "fix: " in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_kit_eval_without_out_writes_a_run_folder_that_view_and_compare_read(capsys, tmp_path, monkeypatch):
    """Was: `kit eval` wrote runs/cli/evaluate, and `kit view runs/cli` / `kit compare` refused it as
    "no manifest.json". The embedded model plays one short mock task (the real evaluation)."""
    monkeypatch.chdir(tmp_path)
    assert main(["eval", "--domain", "mock", "--limit", "1", "--max-messages", "4", "--max-new-tokens", "8",
                 "--user-max-new-tokens", "8"]) == 0
    capsys.readouterr()
    assert main(["view", "runs/cli"]) == 0
    text = capsys.readouterr().out
    assert "create_task_1" in text or "task" in text.lower()
    assert main(["compare", "runs/cli", "runs/cli", "--out", str(tmp_path / "cmp")]) == 0
    assert "comparison: " in capsys.readouterr().out
    # with --out, that folder is the run (a one-stage run named after it): view and compare read it too
    assert main(["eval", "--domain", "mock", "--limit", "1", "--max-messages", "4", "--max-new-tokens", "8",
                 "--user-max-new-tokens", "8", "--out", "evals/one"]) == 0
    capsys.readouterr()
    assert main(["view", "evals/one"]) == 0
    assert main(["compare", "runs/cli", "evals/one", "--out", str(tmp_path / "cmp2")]) == 0
    out = capsys.readouterr().out
    assert "comparison: " in out and "paired:" in out  # the two evaluations share their one task


def test_the_cli_run_folder_records_commit_tau2_and_machine(tmp_path, monkeypatch):
    """runs/cli's manifest says what produced it, as a recipe run's does (`kit results` showed 'commit ?,
    tau2 ?, machine: not recorded' for two `kit eval` folders); the stage entry is a real Stage's."""
    from kit._tau2 import TAU2_VERSION
    from kit.cli import _record_cli_stage
    from kit.files import read_json
    from kit.report.results import results_page
    from kit.runner.manifest import git_info
    from kit.runner.stage import Stage

    monkeypatch.chdir(tmp_path)
    st = Stage("evaluate", {"label": "x"}, {"run_id": "cli", "stage_id": "evaluate", "out_dir": str(tmp_path / "runs/cli/evaluate"),
                                           "run_dir": str(tmp_path / "runs/cli"), "fingerprint": "f" * 16})
    _record_cli_stage(st, None)
    m = read_json(tmp_path / "runs/cli/manifest.json")
    assert m["tau2_version"] == TAU2_VERSION and m["hardware"]["cpus"] and m["updated"]
    assert m["git"]["commit"] == git_info()["commit"] == m["stages"][0]["git_commit"]
    page = results_page([tmp_path / "runs/cli"])
    assert f"tau2 {TAU2_VERSION}" in page and "machine: not recorded" not in page


def test_kit_eval_out_folder_is_a_one_stage_run(tmp_path, monkeypatch):
    """`kit eval --out DIR` makes DIR a run folder of its one stage (kit view / compare / report read it; they
    refused it as "no manifest.json"); `kit synthesize --out` folders keep the engine's own manifest."""
    from kit.cli import _record_cli_stage
    from kit.files import read_json
    from kit.report.run_data import run_folder
    from kit.runner.stage import Stage

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "evals" / "sft"
    st = Stage("evaluate", {"label": "x"}, {"run_id": "cli", "stage_id": "evaluate", "out_dir": str(out),
                                           "run_dir": str(out), "fingerprint": "f" * 16})
    _record_cli_stage(st, str(out), own_run=True)
    m = read_json(out / "manifest.json")
    assert m["run_id"] == "sft" and [(e["stage"], e["dir"]) for e in m["stages"]] == [("evaluate", str(out.resolve()))]
    assert run_folder(out) == out
    engine = tmp_path / "engine"
    _record_cli_stage(Stage("synthesize", {}, {"run_id": "cli", "stage_id": "synthesize", "out_dir": str(engine),
                                               "run_dir": str(engine), "fingerprint": "f" * 16}), str(engine))
    assert not (engine / "manifest.json").exists()


def test_kit_help_lists_every_command():
    """`kit --help` opens with one line per command: none of the parser's commands may be missing there
    (audit, chaos and ablations were)."""
    import argparse

    import kit.cli as cli

    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    listed = {line.split()[1] for line in (cli.__doc__ or "").splitlines() if line.strip().startswith("kit ")}
    assert set(sub.choices) - listed == set(), sorted(set(sub.choices) - listed)
