"""A full or unwritable disk: `error:` naming the file and the space, exit 2, nothing half written taken
as complete, and a rerun once there is room resumes.

The file systems are real: a tmpfs a few KiB large (full), a read-only bind mount. Mounting needs root
(CAP_SYS_ADMIN); where it is not permitted the tests that need it are skipped, saying so, and the
read-only case falls back to a folder this user may not write (EACCES) when it can make one.
The run tests drive `kit run` on stub stage notebooks (tests/test_runner.py's, plus a model file written
the way torch or safetensors write one: straight into place, not atomically).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.errors import DiskError, disk_error, disk_error_in
from kit.files import append_jsonl, read_jsonl, write_json

ROOT = Path(__file__).resolve().parents[1]


# ----- mounts ----------------------------------------------------------------------------------------


class Mounts:
    """tmpfs and read-only bind mounts made by a test, every one unmounted when it ends."""

    def __init__(self):
        self.made: list[Path] = []

    @staticmethod
    def _run(*cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(cmd), capture_output=True, text=True)

    def tmpfs(self, where: Path, size: str) -> Path:
        where.mkdir(parents=True, exist_ok=True)
        r = self._run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0777", "tmpfs", str(where))
        if r.returncode:
            pytest.skip(f"mounting a tmpfs is not permitted here (needs root / CAP_SYS_ADMIN): {r.stderr.strip()}")
        self.made.append(where)
        return where

    def resize(self, where: Path, size: str) -> None:
        r = self._run("mount", "-o", f"remount,size={size}", str(where))
        assert r.returncode == 0, r.stderr

    def read_only(self, where: Path) -> Path:
        """`where` itself, bind-mounted read-only over itself."""
        r = self._run("mount", "--bind", str(where), str(where))
        if r.returncode:
            pytest.skip(f"bind mounts are not permitted here (needs root / CAP_SYS_ADMIN): {r.stderr.strip()}")
        self.made.append(where)
        r = self._run("mount", "-o", "remount,bind,ro", str(where))
        assert r.returncode == 0, r.stderr
        return where

    def close(self) -> None:
        for where in reversed(self.made):
            if self._run("umount", str(where)).returncode:
                self._run("umount", "-l", str(where))  # busy (a process still in it): detach it now


@pytest.fixture
def mounts():
    m = Mounts()
    try:
        yield m
    finally:
        m.close()


def fill(folder: Path, leave: int = 0) -> Path:
    """A ballast file filling `folder`'s file system (to within `leave` bytes)."""
    ballast = folder / "ballast"
    with open(ballast, "wb", buffering=0) as f:
        free = shutil.disk_usage(folder).free - leave
        try:
            f.write(b"\0" * max(free, 0))
            while leave == 0:
                f.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC
    return ballast


# ----- the kit's writers -----------------------------------------------------------------------------


def test_write_json_on_a_full_disk_names_the_file_the_bytes_it_needed_and_the_free_space(mounts, tmp_path):
    fs = mounts.tmpfs(tmp_path / "fs", "64k")
    write_json(fs / "stage.json", {"status": "old"})
    fill(fs)
    data = {"status": "complete", "outputs": {f"file{i}": "x" * 40 for i in range(200)}}
    with pytest.raises(DiskError) as e:
        write_json(fs / "stage.json", data)
    needed = len(json.dumps(data, indent=1))
    message = str(e.value)
    print(f"\nerror: {message}\nfix: {e.value.hint}")
    assert isinstance(e.value, OSError) and e.value.errno == errno.ENOSPC
    assert message.startswith(f"no space left on device writing {fs / 'stage.json'} (needed {needed:,} bytes, ")
    assert re.search(rf"\d+ bytes free of 64\.0 KiB on {re.escape(str(fs))}\)$", message), message
    assert "free space on" in e.value.hint and "--out" in e.value.hint
    assert json.loads((fs / "stage.json").read_text()) == {"status": "old"}  # the old file, whole
    assert sorted(p.name for p in fs.iterdir()) == ["ballast", "stage.json"]  # no stage.json.tmp left


def test_an_append_a_full_disk_cuts_short_is_cut_back_and_the_file_holds_whole_lines(mounts, tmp_path):
    fs = mounts.tmpfs(tmp_path / "fs", "64k")
    f = fs / "metrics.jsonl"
    append_jsonl(f, {"step": 1})
    ballast = fill(fs)
    with pytest.raises(DiskError, match=r"no space left on device writing .*metrics\.jsonl \(needed 8,0\d\d bytes"):
        append_jsonl(f, {"step": 2, "blob": "x" * 8000})  # more than the slack of the file's last page
    assert f.read_text() == '{"step": 1}\n'
    ballast.unlink()  # space freed: the next append is whole
    append_jsonl(f, {"step": 2})
    assert read_jsonl(f) == [{"step": 1}, {"step": 2}]


def test_a_torn_tail_a_kill_left_does_not_swallow_the_next_appended_line(tmp_path):
    f = tmp_path / "trajectories.jsonl"
    f.write_text('{"step": 1}\n{"step": 2, "blo')  # killed mid-write
    append_jsonl(f, {"step": 3})
    assert read_jsonl(f) == [{"step": 1}, {"step": 3}]


def test_write_json_into_a_read_only_folder_says_read_only_and_names_the_file(mounts, tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    write_json(d / "manifest.json", {"v": 1})
    mounts.read_only(d)
    with pytest.raises(DiskError) as e:
        write_json(d / "manifest.json", {"v": 2})
    print(f"\nerror: {e.value}\nfix: {e.value.hint}")
    assert str(e.value) == f"cannot write {d / 'manifest.json'}: read-only file system ({d})"
    assert e.value.errno == errno.EROFS and "remount it read-write" in e.value.hint
    assert json.loads((d / "manifest.json").read_text()) == {"v": 1}


def test_errors_told_only_as_text_are_recognised():
    """A failed notebook cell keeps only its exception's name and text; safetensors keeps Rust's."""
    e = disk_error_in("[Errno 28] No space left on device: '/runs/x/model/model.safetensors'")
    assert str(e).startswith("no space left on device writing /runs/x/model/model.safetensors (")
    e = disk_error_in("Error while serializing: I/O error: No space left on device (os error 28)", "/runs/x")
    assert str(e).startswith("no space left on device writing /runs/x (")
    assert str(disk_error_in("[Errno 30] Read-only file system: '/m/a'")).startswith("cannot write /m/a: read-only")
    assert disk_error_in("[Errno 2] No such file or directory: 'x'") is None
    assert disk_error_in("PermissionError: [Errno 1] Operation not permitted") is None  # os.kill: no file
    assert str(disk_error_in("[Errno 13] Permission denied: '/m/a'")) == "cannot write /m/a: permission denied (user " \
        f"{__import__('pwd').getpwuid(os.geteuid()).pw_name})"
    # torch.save keeps the OSError only as the context of its RuntimeError
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
    except RuntimeError as wrapped:
        assert str(disk_error(wrapped, where="/runs/x")).startswith("no space left on device writing /runs/x (")


def test_a_grpo_checkpoint_a_full_disk_cut_short_is_never_resumed_from_and_its_space_is_freed(mounts, tmp_path):
    import torch

    from kit.train import checkpoints as ck

    root = mounts.tmpfs(tmp_path / "fs", "256k") / "checkpoints"
    ck.claim(root, "tag")
    tmp = ck.staging(root, 1, create=True)
    ck.save_torch({"w": torch.zeros(1000)}, tmp / "loop-rank0.pt")
    ck.commit(tmp, {"step": 1}, keep=2)
    tmp = ck.staging(root, 2, create=True)
    with pytest.raises(DiskError, match=r"no space left on device writing .*/\.tmp-step-000002/optimizer\.pt"):
        ck.save_torch({"w": torch.zeros(1 << 17)}, tmp / "optimizer.pt")  # 512 KiB
    assert [p.name for p, _ in ck.complete(root)] == ["step-000001"]  # the cut-short step 2 is not a checkpoint
    assert ck.claim(root, "tag") and not tmp.exists()  # a resume gives its space back first
    assert [p.name for p, _ in ck.complete(root)] == ["step-000001"]


# ----- kit run on a full and on a read-only run folder -------------------------------------------------

WEIGHTS = 600_000  # the model file the stub sft_agent writes


def disk_notebooks(where: Path) -> Path:
    """tests/test_runner.py's stub notebooks, sft_agent also writing a model file as torch/safetensors do."""
    import nbformat
    from test_runner import STUB_BODY, stub_notebooks

    stub_notebooks(where)
    nb_path = where / "sft.ipynb"
    nb = nbformat.read(str(nb_path), as_version=4)
    body = nb.cells[1].source
    weights = (f'if st.key == "sft_agent":\n    (st.out_dir / "model").mkdir(exist_ok=True)\n'
               f'    with open(st.out_dir / "model" / "weights.bin", "wb") as f:\n'
               f'        f.write(bytes(range(256)) * {WEIGHTS // 256})\n')
    nb.cells[1].source = body.replace("(st.out_dir / \"out.txt\")", weights + "(st.out_dir / \"out.txt\")", 1)
    assert nb.cells[1].source != body and "STAGE" in body and STUB_BODY.strip()[:20] in body
    nbformat.write(nb, str(nb_path))
    return where


RECIPE = """
name: diskchain
domain: mock
stages:
  - stage: synthesize
    params: {rounds: 1}
  - stage: sft_agent
  - stage: evaluate
    params: {trials: 1}
"""


def kit_run(nbs: Path, recipe: Path, runs: Path, reports: Path, *, user: str | None = None) -> subprocess.CompletedProcess:
    """`kit run` in a process of its own (its stage notebooks: `nbs`), as `user` where given."""
    code = ("import sys; from pathlib import Path; import kit.runner.execute as ex; ex.NOTEBOOKS_DIR = Path(sys.argv[1]); "
            "from kit.cli import main; sys.exit(main(sys.argv[2:]))")
    cmd = [sys.executable, "-c", code, str(nbs), "run", str(recipe), "--runs-dir", str(runs), "--reports-dir", str(reports)]
    if user:
        cmd = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups", *cmd]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(recipe.parent), timeout=300)


def error_lines(r: subprocess.CompletedProcess) -> str:
    return "\n".join(line for line in r.stderr.splitlines() if line.startswith(("error:", "fix:", "  ")))


def results(run_dir: Path) -> dict:
    """What a run left that a rerun trusts, less the times: each stage's status, fingerprint, outputs
    and summary, and every file's bytes except the ones that hold times (stage.json, attempts.json,
    manifest.json, the executed notebooks)."""
    out = {}
    for sj in sorted(run_dir.glob("*/stage.json")):
        info = json.loads(sj.read_text())
        # the resume tag names when the upstream stage ran (kit/runner/execute.py `_resume_tag`)
        summary = {k: v for k, v in info["summary"].items() if k not in ("params", "tag")}
        out[sj.parent.name] = {"status": info["status"], "fingerprint": info["fingerprint"],
                               "outputs": {k: str(Path(v).relative_to(run_dir)) for k, v in info["outputs"].items()},
                               "summary": summary}
    skip = {"stage.json", "attempts.json", "manifest.json", "executions.log"}
    for p in sorted(run_dir.rglob("*")):
        if p.is_file() and p.name not in skip and p.suffix != ".ipynb" and ".jupyter" not in p.parts:
            out[str(p.relative_to(run_dir))] = p.read_bytes()
    return out


@pytest.mark.slow  # three runs of three stub notebooks (~60 s on 2 busy cores)
def test_kit_run_on_a_full_disk_exits_2_naming_the_file_and_the_space_and_resumes_once_there_is_room(mounts, tmp_path):
    nbs = disk_notebooks(tmp_path / "nbs")
    recipe = tmp_path / "diskchain.yaml"
    recipe.write_text(RECIPE)

    roomy = kit_run(nbs, recipe, tmp_path / "roomy", tmp_path / "reports")
    assert roomy.returncode == 0, roomy.stderr[-3000:]
    want = results(tmp_path / "roomy" / "diskchain")
    assert len(want["sft_agent/model/weights.bin"]) == WEIGHTS // 256 * 256

    fs = mounts.tmpfs(tmp_path / "fs", "512k")  # the run's own files fit, the model file does not
    runs = fs / "runs"
    full = kit_run(nbs, recipe, runs, tmp_path / "reports")
    print("\n$ kit run diskchain.yaml --runs-dir <512 KiB tmpfs>/runs\n" + error_lines(full))
    assert full.returncode == 2, full.stderr[-3000:]
    run_dir = runs / "diskchain"
    first = next(line for line in full.stderr.splitlines() if line.startswith("error:"))
    assert first.startswith("error: stage 'sft_agent' failed: DiskError: no space left on device writing "), first
    assert re.search(rf"\(\d+ bytes free of 512\.0 KiB on {re.escape(str(fs))}\)", first), first
    assert str(run_dir / "sft_agent") in first
    assert "Traceback" not in full.stderr
    # nothing half written is taken as complete: the stage has no complete stage.json, no .tmp file is left
    info = json.loads((run_dir / "sft_agent" / "stage.json").read_text()) \
        if (run_dir / "sft_agent" / "stage.json").exists() else {}
    assert info.get("status") != "complete"
    assert json.loads((run_dir / "synthesize" / "stage.json").read_text())["status"] == "complete"
    assert not list(runs.rglob("*.tmp")) and not (run_dir / "evaluate").exists()

    mounts.resize(fs, "4m")  # room again: the same command resumes at sft_agent
    again = kit_run(nbs, recipe, runs, tmp_path / "reports")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "synthesize: complete (fingerprint" in again.stdout and "sft_agent: complete in" in again.stdout
    assert results(run_dir) == want  # the same files, byte for byte, as the run that had room
    assert not list(runs.rglob("*.tmp"))


@pytest.mark.slow  # one run of three stub notebooks, one refused at once (~25 s)
def test_kit_run_in_a_read_only_run_folder_exits_2_naming_the_file_and_writes_nothing(mounts, tmp_path):
    nbs = disk_notebooks(tmp_path / "nbs")
    recipe = tmp_path / "diskchain.yaml"
    recipe.write_text(RECIPE)
    runs = tmp_path / "runs"
    first = kit_run(nbs, recipe, runs, tmp_path / "reports")
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = runs / "diskchain"
    shutil.rmtree(run_dir / "evaluate")  # a stage left to run
    before = {str(p): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}

    user, why = None, "read-only"
    if os.geteuid() != 0:  # no mounts without root: a folder this user may not write
        run_dir.chmod(0o555)
        why = "permission denied"
    else:
        try:
            mounts.read_only(run_dir)
        except pytest.skip.Exception:  # root without CAP_SYS_ADMIN: the run as `nobody`, if it can run this Python
            probe = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                                    sys.executable, "-c", "import kit"], capture_output=True,
                                   env={**os.environ, "PYTHONPATH": str(ROOT)})
            if probe.returncode:
                raise
            user, why = "nobody", "permission denied"
    try:
        r = kit_run(nbs, recipe, runs, tmp_path / "reports", user=user)
    finally:
        if why == "permission denied" and user is None:
            run_dir.chmod(0o755)
    print("\n$ kit run diskchain.yaml   # its run folder read-only\n" + error_lines(r))
    assert r.returncode == 2, r.stderr[-3000:]
    # the first file the run writes (today the kernelspec under .jupyter, then manifest.json)
    assert re.search(rf"^error: cannot (write|open) {re.escape(str(run_dir))}/\S+: {why}", r.stderr, re.M), r.stderr[:2000]
    assert "Traceback" not in r.stderr and "fix: " in r.stderr
    after = {str(p): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}
    assert after == before  # nothing written, nothing half written


def test_a_torch_save_a_full_disk_cut_short_is_told_as_the_full_disk(mounts, tmp_path):
    """transformers saves an SFT checkpoint's optimizer with torch.save, whose zip writer raises a RuntimeError
    without the errno ("unexpected pos"): on a full disk it is the DiskError; on a roomy one it stays a bug."""
    import torch

    from kit.errors import disk_error

    fs = mounts.tmpfs(tmp_path / "fs", "256k")
    fill(fs)
    with pytest.raises(RuntimeError) as e:
        torch.save({"w": torch.zeros(100_000)}, fs / "optimizer.pt")
    err = disk_error(e.value, where=fs)
    assert err is not None and "no space left on device" in str(err) and str(fs) in str(err)
    assert disk_error(RuntimeError("[enforce fail at inline_container.cc:1] . unexpected pos 64 vs 0"),
                      where=tmp_path) is None  # the same text with room to spare: not put down to the disk
