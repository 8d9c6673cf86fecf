"""Ctrl-C stops a stage cleanly: recorded as interrupted (not failed), the run folder's and the stage's locks
let go, the servers the run started stopped, and the same command again resumes. Two ways in: `kit run` in a
terminal (SIGINT to its whole process group, as a terminal sends it) and a stage notebook's kernel
interrupted by hand (JupyterLab's stop button)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kit.runner.lock import LOCK_NAME, holder

ROOT = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"exited with {proc.returncode} before {path} appeared"
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow  # papermill kernels and a real `transformers serve` of the embedded model (~60 s)
def test_ctrl_c_on_kit_run_records_the_stage_interrupted_stops_servers_and_a_rerun_resumes(tmp_path):
    pytest.importorskip("fastapi")
    from kit.llm.embedded import ensure_embedded_model
    from kit.llm.openai_backend import served_models
    from _serving import free_port
    from test_runner import stub_notebooks

    nbs = stub_notebooks(tmp_path / "nbs")
    port = free_port()
    recipe = tmp_path / "ctrlc.yaml"
    recipe.write_text(textwrap.dedent(f"""
        name: ctrlc
        domain: mock
        servers:
          - {{id: srv, engine: transformers, model: {ensure_embedded_model()}, port: {port}, args: [--device, cpu],
             start_timeout_s: 300}}
        stages:
          - stage: synthesize
            params: {{rounds: 1}}
          - stage: evaluate
            params: {{trials: 1, user_model: "server:srv"}}
          - stage: report
    """))
    # `kit run` as a user types it, its notebooks the stubs of tests/test_runner.py (no model in the stages)
    argv = [sys.executable, str(TESTS / "_kit_with_notebooks.py"), str(nbs), "run", str(recipe),
            "--runs-dir", str(tmp_path / "runs"), "--reports-dir", str(tmp_path / "reports")]
    run_dir = tmp_path / "runs" / "ctrlc"
    env = {**os.environ, "KIT_TEST_SLEEP": "evaluate", "PYTHONPATH": f"{TESTS}{os.pathsep}{ROOT}"}
    # a terminal's process takes SIGINT; a pytest-xdist worker ignores it, and an ignored signal stays ignored
    # across exec (Python then installs no KeyboardInterrupt handler): give the child the terminal's disposition
    p = subprocess.Popen(argv, cwd=ROOT, env=env, start_new_session=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(run_dir / "evaluate" / "sleeping", p)
        assert served_models(f"http://127.0.0.1:{port}/v1") is not None  # the run's server is up
        server_pid = json.loads((run_dir / "manifest.json").read_text())["servers"]["srv"]["pid"]
        assert holder(run_dir)["pid"] == p.pid and holder(run_dir / "evaluate") is not None
        os.killpg(p.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert p.returncode == 130, err
    assert "interrupted: run the same command again to resume" in err
    assert "evaluate: interrupted after" in out
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["failed_stage"] == "evaluate"
    assert {s["key"]: s["status"] for s in m["stages"]} == {"synthesize": "complete", "evaluate": "interrupted"}
    assert json.loads((run_dir / "evaluate" / "stage.json").read_text())["status"] == "interrupted"
    assert json.loads((run_dir / "evaluate" / "attempts.json").read_text())[-1]["how"] == "interrupted"
    assert served_models(f"http://127.0.0.1:{port}/v1") is None  # the server the run started is stopped
    assert not _alive(server_pid)
    assert holder(run_dir) is None and holder(run_dir / "evaluate") is None

    env.pop("KIT_TEST_SLEEP")
    r = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "synthesize: complete (fingerprint" in r.stdout and "evaluate: complete in" in r.stdout
    m = json.loads((run_dir / "manifest.json").read_text())
    assert m["status"] == "complete" and [s["status"] for s in m["stages"]] == ["complete"] * 3
    tries = json.loads((run_dir / "evaluate" / "attempts.json").read_text())
    assert [a["how"] for a in tries] == ["interrupted", "complete"]
    assert served_models(f"http://127.0.0.1:{port}/v1") is None
    assert not (run_dir / LOCK_NAME).exists()


def test_an_interrupted_notebook_kernel_records_the_stage_and_lets_go_of_its_folder(tmp_path):
    """A stage notebook run by hand, stopped with the kernel's interrupt: stage.json says interrupted, the
    stage folder's lock is let go (`kit run` or a rerun of the cell can write there), and running the cell
    again in the same kernel takes the folder again and completes."""
    jupyter_client = pytest.importorskip("jupyter_client")
    from jupyter_client.manager import start_new_kernel

    from kit.runner.execute import install_kernelspec

    spec_dir = install_kernelspec(tmp_path / ".jupyter")
    os.environ["JUPYTER_PATH"] = f"{spec_dir}{os.pathsep}{os.environ.get('JUPYTER_PATH', '')}"
    out = tmp_path / "runs" / "notebook" / "evaluate"
    km, kc = start_new_kernel(kernel_name="python3", cwd=str(ROOT))
    try:
        def run(code: str, timeout: float = 120, ok: bool = True) -> dict:
            msg_id = kc.execute(code)
            reply = kc.get_shell_msg(timeout=timeout)
            while reply["parent_header"].get("msg_id") != msg_id:
                reply = kc.get_shell_msg(timeout=timeout)
            assert reply["content"]["status"] == "ok" or not ok, reply["content"]
            return reply["content"]

        assert run(f"from kit.runner.stage import begin\nout_dir = {str(out)!r}\nrun_id = 'notebook'\ndomain = 'mock'\n"
                   "st = begin('evaluate', globals())")["status"] == "ok"
        assert holder(out) is not None
        msg_id = kc.execute("import time\nfor _ in range(600): time.sleep(0.1)")
        time.sleep(2)
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=60)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=60)
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
        info = json.loads((out / "stage.json").read_text())
        assert info["status"] == "interrupted" and info["id"] == "evaluate" and "Ctrl-C" in info["error"]
        assert holder(out) is None  # let go: another process may write there now
        assert run("st = begin('evaluate', globals())\nst.finish({})")["status"] == "ok"  # the same cell again
        assert json.loads((out / "stage.json").read_text())["status"] == "complete"
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
