"""A stage under `accelerate launch`: what `kit run` starts for a recipe stage with `launch:`.

    - stage: sft_agent
      launch: {num_processes: 2, cpu: true}          # or {num_processes: 8, config_file: accelerate.yaml}

`kit run` then writes <stage folder>/<id>.launch.json (the parameters and the command) and runs

    python -m accelerate.commands.launch --num_processes N [...] -m kit.runner.launch <id>.launch.json

in the stage folder, its output into <id>.log. Every process reads the same parameters (exactly what
papermill would inject into the stage notebook's parameters cell: the resolved params and the
runner's fields), builds the same stage Config through kit.runner.stage.begin and calls the same
`kit.stages.<module>.run(config, st)`; `st.finish` writes stage.json from the main process only.
The notebook stays the single-process driver of the same code; a launched stage has no executed
notebook, its log instead.

A process that fails writes <id>.failure.json in the stage folder (`LaunchFailure`: the exception's
class, its first line, whether it is a user error; the first process to fail writes it), and prints
a `[kit.runner.launch] FAILED` line into the log for people; the runner reads the JSON.

What a stage's run(config, st) must keep to run under launch:
  - every process calls it with the same config and takes part in the collective work (training);
  - files under st.out_dir are written by the main process only (`st.is_main`, env RANK 0),
    including what its trainer saves, and nothing is read back that another process writes
    without a barrier (accelerate's wait_for_everyone) in between;
  - the Outputs it returns on the main process is what stage.json records (the other processes'
    are dropped); its numbers are over all processes (reduce them) where they differ per process;
  - `st.warn` and `st.log` may be called on every process: only the main one prints / logs to W&B.

How the flags are chosen (`command`): without a config file, N > 1 processes get `--multi_gpu`
(torchrun) and a free port; `cpu: true` hides CUDA and sets ACCELERATE_USE_CPU, so the same torchrun
start gives N CPU processes on gloo (accelerate's own `--cpu` starts one process only; it is passed
for N = 1). With a config file, it decides the distributed type (DeepSpeed, FSDP, multi-GPU, ...);
no config file: accelerate's default config (`accelerate config`), if any, fills in the rest.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import traceback
from pathlib import Path
from typing import Optional

from pydantic import BaseModel

# the line a failing process prints last, for people reading the log (the runner reads <id>.failure.json)
FAILED = "[kit.runner.launch] FAILED"
KIT_ROOT = Path(__file__).resolve().parents[2]


class LaunchFailure(BaseModel):
    """How a process of a launched stage failed, as it wrote it (<id>.failure.json)."""

    error: str                # the exception's class name
    message: str              # its first line
    user_error: bool          # a kit.errors user error (a bad input, a missing file): `kit run` exits 2
    rank: int = 0
    world: int = 1

    def text(self) -> str:
        return f"process {self.rank} of {self.world}: {self.error}: {self.message}"

    @classmethod
    def of(cls, e: BaseException, rank: int = 0, world: int = 1) -> "LaunchFailure":
        from kit.errors import disk_error, is_user_error

        e = disk_error(e, writing=False) or e  # a write the disk refused: a user error (cwd: the stage folder)
        return cls(error=type(e).__name__, message=(str(e).strip().splitlines() or [""])[0],
                   user_error=is_user_error(e), rank=rank, world=world)

    def write(self, path: Path) -> bool:
        """Write to `path` unless a failure is there already (the first process to fail tells why
        the launch failed: the others often fail because it did). True when written."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(self.model_dump_json(indent=1), encoding="utf-8")
        try:
            os.link(tmp, path)  # atomic, and refuses an existing file
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    @classmethod
    def read(cls, path: Path) -> Optional["LaunchFailure"]:
        """The failure a launched process wrote, or None (none failed, or one died without writing)."""
        try:
            return cls.model_validate_json(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None


def failure_file(spec_file: str | Path) -> Path:
    """<stage folder>/<id>.failure.json for <stage folder>/<id>.launch.json."""
    spec = Path(spec_file)
    return spec.with_name(spec.name.removesuffix(".launch.json").removesuffix(".json") + ".failure.json")


LOOPBACK = ("127.0.0.1", "localhost", "::1")


def command(launch: dict, spec_file: str | Path, machine_rank: int = 0) -> tuple[list[str], dict[str, str]]:
    """(argv, environment variables to set) of `accelerate launch` for a recipe's `launch:` dict; with
    `num_machines` > 1, machine `machine_rank`'s (num_processes / num_machines processes on it, every
    machine meeting at main_process_ip:main_process_port, static rendezvous: `--same_network`)."""
    n = int(launch["num_processes"])
    machines = int(launch.get("num_machines") or 1)
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(n)]
    env: dict[str, str] = {}
    if launch.get("config_file"):
        cmd += ["--config_file", str(launch["config_file"])]
    elif n > 1 or machines > 1:
        cmd += ["--multi_gpu"]
    if machines > 1:
        cmd += ["--num_machines", str(machines), "--machine_rank", str(machine_rank), "--same_network",
                "--main_process_ip", str(launch.get("main_process_ip") or LOOPBACK[0]),
                "--main_process_port", str(launch.get("main_process_port") or 29500)]
    elif n > 1 and not launch.get("config_file"):
        cmd += ["--num_machines", "1", "--main_process_port", "0"]  # 0: a free port
    if launch.get("cpu"):
        env.update(ACCELERATE_USE_CPU="true", CUDA_VISIBLE_DEVICES="")
        if n == 1:
            cmd.append("--cpu")
    cmd += [str(a) for a in launch.get("extra_args") or []]
    cmd += ["-m", "kit.runner.launch", str(spec_file)]
    # the processes import this kit, wherever the runner was started from
    path = [str(KIT_ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(KIT_ROOT)]
    env["PYTHONPATH"] = os.pathsep.join(path)
    return cmd, env


def node_commands(launch: dict, spec_file: str | Path) -> list[str]:
    """One shell line per machine rank (`cd` into the stage folder, the environment, the command): what
    `kit run` writes to <id>.nodes.sh for a launch over several machines."""
    folder = shlex.quote(str(Path(spec_file).parent))
    lines = []
    for r in range(int(launch.get("num_machines") or 1)):
        cmd, env = command(launch, spec_file, r)
        lines.append(f"cd {folder} && " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " "
                     + " ".join(shlex.quote(a) for a in cmd))
    return lines


def sbatch_script(launch: dict, spec_file: str | Path, job_name: str) -> str:
    """A Slurm batch script that runs the stage on `num_machines` nodes (one `accelerate launch` per
    node, its rank from SLURM_NODEID, the first node of the allocation as the main one). The run
    folder must be on a file system every node sees; rerun `kit run` afterwards: the stage is then
    complete (its stage.json, written by the main process, carries the same fingerprint)."""
    machines = int(launch.get("num_machines") or 1)
    spec = Path(spec_file)
    port = launch.get("main_process_port") or 29500
    cmd, env = command({**launch, "main_process_ip": "__MAIN__", "main_process_port": port}, spec, 0)
    # inside srun's `bash -c "..."`: $MAIN is this script's (the same for every node), \\$SLURM_NODEID each task's own
    argv = " ".join("\\$SLURM_NODEID" if a == "0" and cmd[i - 1] == "--machine_rank" else
                    ("$MAIN" if a == "__MAIN__" else shlex.quote(a)) for i, a in enumerate(cmd))
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    return (f"#!/bin/bash\n#SBATCH --job-name={job_name}\n#SBATCH --nodes={machines}\n#SBATCH --ntasks-per-node=1\n"
            f"#SBATCH --output={spec.with_name(spec.name.removesuffix('.launch.json') + '.slurm-%j.log')}\n"
            f"# {machines} machines x {int(launch['num_processes']) // machines} processes; written by `kit run`\n"
            f"set -euo pipefail\nMAIN=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n{exports}"
            f"cd {shlex.quote(str(spec.parent))}\n"
            f"srun --ntasks-per-node=1 bash -c \"{argv}\"\n")


def main(argv: Optional[list[str]] = None) -> int:
    """One process of a launched stage: begin -> kit.stages.<module>.run -> finish."""
    from kit.runner.stage import process_rank

    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: accelerate launch ... -m kit.runner.launch <stage folder>/<id>.launch.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    params = dict(spec["params"])
    stage = params["stage"]
    rank, world = process_rank()
    print(f"[kit.runner.launch] process {rank} of {world} (local rank {os.environ.get('LOCAL_RANK', 0)}, host "
          f"{socket.gethostname()}, pid {os.getpid()}): stage {stage} -> {params.get('out_dir')}", flush=True)
    try:
        from kit.runner.stage import begin
        from kit.stages import module

        st = begin(stage, params)
        out = module(stage).run(st.config, st)
        st.finish(out)
    except BaseException as e:  # the others are stopped by the launcher (torchrun) when this one exits
        traceback.print_exc()
        failure = LaunchFailure.of(e, rank, world)
        try:
            failure.write(failure_file(argv[0]))
        except Exception as why:  # the log line below still tells people
            print(f"[kit.runner.launch] could not write {failure_file(argv[0])}: {why}", file=sys.stderr)
        print(f"{FAILED} {failure.text()}", file=sys.stderr, flush=True)
        return 1
    _close_process_group()
    return 0


def _close_process_group() -> None:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # pragma: no cover -- closing is a courtesy
        pass


if __name__ == "__main__":
    sys.exit(main())
