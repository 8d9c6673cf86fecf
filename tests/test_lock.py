"""One writer per run folder (kit/runner/lock.py), with real processes: a second writer is refused at once
naming the holder, `--wait` waits its turn, a lock left by a killed process is taken over (saying so), and
`kit run` neither starts in a run folder in use nor executes a stage whose folder another process writes."""

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

from kit.runner.lock import LOCK_NAME, FolderBusy, FolderLock, holder

ROOT = Path(__file__).resolve().parents[1]
KIT = [sys.executable, "-m", "kit.cli"]


def _hold(folder: Path, seconds: float = 120, command: str = "holder process") -> subprocess.Popen:
    """A real process that takes `folder`'s lock, says so on stdout, then sleeps `seconds` and exits."""
    code = textwrap.dedent(f"""
        import sys, time
        from kit.runner.lock import FolderLock
        FolderLock({str(folder)!r}, command={command!r}).acquire()
        print("held", flush=True)
        time.sleep({seconds})
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert p.stdout.readline().strip() == "held"
    return p


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.kill()
    p.wait()


def test_a_second_writer_is_refused_at_once_naming_the_holder(tmp_path):
    out = tmp_path / "eval"
    p = _hold(out, command="kit eval --out " + str(out))
    try:
        t0 = time.perf_counter()
        r = subprocess.run([*KIT, "eval", "--domain", "mock", "--model", "embedded", "--limit", "1", "--trials", "1",
                            "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=120)
        took = time.perf_counter() - t0
        assert r.returncode == 2, r.stderr
        assert f"error: {out} is in use: `kit eval --out {out}` (pid {p.pid} on host " in r.stderr
        assert f"kill {p.pid}" in r.stderr and "--wait" in r.stderr and "another --out" in r.stderr
        assert took < 60  # refused before any model is loaded or episode played
        assert sorted(x.name for x in out.iterdir()) == [LOCK_NAME]  # the refused process wrote nothing
        assert holder(out)["pid"] == p.pid
    finally:
        _stop(p)


def test_wait_takes_the_folder_when_the_holder_lets_go(tmp_path):
    said = []
    p = _hold(tmp_path, seconds=2)
    try:
        with pytest.raises(FolderBusy):
            FolderLock(tmp_path).acquire()
        t0 = time.perf_counter()
        lock = FolderLock(tmp_path, wait=True, say=said.append).acquire()
        assert time.perf_counter() - t0 > 0.5 and p.wait(timeout=30) == 0
        assert "waiting for it (--wait)" in said[0] and f"pid {p.pid}" in said[0]
        assert not any("took over" in s for s in said)  # it let go cleanly: nothing to take over
        assert holder(tmp_path)["pid"] == os.getpid()
        lock.release()
        assert holder(tmp_path) is None and not (tmp_path / LOCK_NAME).exists()  # a clean release removes it
    finally:
        _stop(p)


def test_a_lock_left_by_a_killed_process_is_taken_over_saying_so(tmp_path):
    p = _hold(tmp_path)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert holder(tmp_path) is None  # the kernel dropped the flock with the process
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == p.pid  # but the file still names it
    said = []
    with FolderLock(tmp_path, say=said.append) as lock:
        assert lock.took_over["pid"] == p.pid
        assert f"took over the lock of {tmp_path} left by `holder process` (pid {p.pid}" in said[0]
        assert "that process is gone" in said[0]
        with FolderLock(tmp_path) as again:  # the same process again (`kit eval --out` and its stage): counted
            assert again.took_over is None
        assert holder(tmp_path)["pid"] == os.getpid()  # still held after the inner release
    assert holder(tmp_path) is None


def test_a_lock_held_by_a_child_of_a_dead_process_says_so(tmp_path):
    """A killed parent whose child inherited the open lock file (a forked worker): the recorded pid is gone,
    the lock is still held; the message says what to look for instead of blaming a dead pid."""
    code = textwrap.dedent(f"""
        import os, sys, time
        from kit.runner.lock import FolderLock
        FolderLock({str(tmp_path)!r}, command="parent").acquire()
        if os.fork() == 0:
            time.sleep(120); os._exit(0)
        print("held", flush=True); time.sleep(120)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert p.stdout.readline().strip() == "held"
        p.kill()
        p.wait()
        with pytest.raises(FolderBusy) as e:
            FolderLock(tmp_path).acquire()
        assert f"pid {p.pid} is gone, so a process it started still holds the file open" in str(e.value)
        assert "fuser" in str(e.value)
    finally:
        subprocess.run(["pkill", "-KILL", "-f", f"FolderLock\\({str(tmp_path)!r}"], check=False)
        _stop(p)


def test_kit_run_refuses_a_run_folder_in_use_before_writing_anything(tmp_path):
    from kit.runner import load_recipe
    from kit.runner.execute import Runner

    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: busy\ndomain: mock\nstages:\n  - stage: evaluate\n    params: {trials: 1, limit: 1}\n")
    run_dir = tmp_path / "runs" / "busy"
    p = _hold(run_dir, command="kit run r.yaml")
    try:
        with pytest.raises(FolderBusy) as e:
            Runner(load_recipe(recipe), None, tmp_path / "runs", tmp_path / "reports", stream=open(os.devnull, "w")).run()
        assert f"`kit run r.yaml` (pid {p.pid}" in str(e.value) and "--run-id" in e.value.hint
        assert sorted(x.name for x in run_dir.iterdir()) == [LOCK_NAME]  # no manifest, no kernelspec, no stage
    finally:
        _stop(p)


def test_kit_run_does_not_execute_a_stage_another_process_writes(tmp_path):
    """A stage notebook run by hand into the run's stage folder (or a kernel a killed `kit run` left): the
    runner stops at that stage with the holder's name, records it in the manifest, and runs nothing there."""
    from kit.runner import load_recipe
    from kit.runner.execute import Runner

    recipe = tmp_path / "r.yaml"
    recipe.write_text("name: busy\ndomain: mock\nstages:\n  - stage: evaluate\n    params: {trials: 1, limit: 1}\n")
    run_dir = tmp_path / "runs" / "busy"
    p = _hold(run_dir / "evaluate", command="a notebook kernel")
    try:
        with pytest.raises(FolderBusy) as e:
            Runner(load_recipe(recipe), None, tmp_path / "runs", tmp_path / "reports", stream=open(os.devnull, "w")).run()
        assert "`a notebook kernel`" in str(e.value)
        m = json.loads((run_dir / "manifest.json").read_text())
        assert m["status"] == "failed" and m["failed_stage"] == "evaluate"
        assert "is in use" in m["stages"][0]["error"]
        assert sorted(x.name for x in (run_dir / "evaluate").iterdir()) == [LOCK_NAME]
        assert holder(run_dir) is None and not (run_dir / LOCK_NAME).exists()  # let go on its way out
    finally:
        _stop(p)


@pytest.mark.slow  # two real evaluations of the embedded model (~40 s)
def test_two_evaluations_into_one_folder_give_one_writer_and_no_duplicate_episodes(tmp_path):
    """The reported case: `kit eval ... --out DIR` twice, the second started while the first runs. Before:
    both ran, 4 episodes for 2 tasks x 1 trial. Now the second is refused, and with --wait it runs after the
    first and resumes its finished episodes: one episode per task and trial."""
    out = tmp_path / "eval"
    argv = [*KIT, "eval", "--domain", "mock", "--model", "embedded", "--limit", "2", "--trials", "1",
            "--max-new-tokens", "16", "--user-max-new-tokens", "16", "--max-messages", "4", "--out", str(out)]
    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        for _ in range(600):
            if holder(out):
                break
            time.sleep(0.1)
        second = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert second.returncode == 2 and f"(pid {first.pid} on host" in second.stderr
        waited = subprocess.run(argv + ["--wait"], capture_output=True, text=True, cwd=ROOT, timeout=600)
        assert first.wait(timeout=600) == 0, first.stderr.read()
        assert waited.returncode == 0, waited.stderr
    finally:
        _stop(first)
    lines = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines() if x.strip()]
    keys = [(x.get("task_id"), x.get("trial")) for x in lines]
    assert len(keys) == 2 and len(set(keys)) == 2, keys
