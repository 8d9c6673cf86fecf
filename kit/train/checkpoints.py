"""In-stage checkpoints: what a training stage resumes from after a crash (DESIGN.md: "Long training
survives a crash"). GRPO writes its own (kit/train/grpo.py); SFT uses transformers' Trainer's.

    claim(root, tag)                    # checkpoints another run left in `root` are removed first
    tmp = staging(root, step)           # GRPO: write the files into tmp (main process: the shared ones)...
    commit(tmp, meta, keep)             # ...then meta.json and a rename make it a checkpoint
    for path, meta in complete(root):   # GRPO: the complete checkpoints, newest first
    last = trl_checkpoint(root)         # SFT: the newest complete checkpoint-N of transformers' Trainer

The folder, `<stage>/checkpoints/`:
  owner.json            {"tag": ...}: whose checkpoints these are (the stage's fingerprint)
  step-000010/          GRPO after 10 steps; meta.json (written last) lists every file and its size:
    trainable.safetensors   the trained parameters (with LoRA the adapters alone, else every weight)
    optimizer.pt            AdamW's state
    loop-rank<r>.pt         process r's loop state: step, task draws, RNG streams, named parts
  checkpoint-25/        SFT: transformers' own (weights, optimizer, scheduler, RNG per process,
                        trainer_state.json written last; kit token counts beside the RNG files)
A stage removes the folder once it has written its final model: a complete stage is never
resumed (kit run skips it, or moves it aside when its inputs changed).

Why a tag: `kit run` moves a *completed* stage folder aside when its inputs changed, but a stage
that crashed is rerun in the same folder whatever changed since; its checkpoints must then not be
used. Why a rename: a kill or a full disk while writing leaves a `.tmp-step-N` folder, never read
(and removed by the next write, or by `claim` when training resumes: its space given back), so a
half-written checkpoint is never loaded. A file shorter or longer than meta.json says (a disk that
lost a write) makes the checkpoint incomplete; one that cannot be
read is skipped by the trainer, which then tries the next older checkpoint (`keep_checkpoints` > 1)
or starts over, saying so. Sizes only, no checksums: hashing a 7B model's optimizer state at every
save would cost a minute.

Under `accelerate launch` the stage folder must be one folder every process sees (one machine, or
a shared file system): each process writes and reads its own loop-rank<r>.pt there.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any, Optional

from kit.files import atomic_write, disk_errors, read_json, write_json

log = logging.getLogger(__name__)

OWNER = "owner.json"
META = "meta.json"
_STEP = re.compile(r"^step-(\d+)$")
_TRL = re.compile(r"^checkpoint-(\d+)$")


def claim(root: str | Path, tag: str) -> bool:
    """Make `root` the checkpoints folder of `tag` (call it on the main process only, before training
    resumes). True when what it holds is `tag`'s (or it holds nothing); False when it held another
    tag's checkpoints, now removed. Staging folders of a save cut short are removed either way."""
    root = Path(root)
    for left in root.glob(".tmp-*"):  # a save cut short (a kill, a full disk): never read, its space given back
        shutil.rmtree(left, ignore_errors=True)
    owner = read_json(root / OWNER) or {}
    if owner.get("tag") == tag:
        return True
    stale = root.is_dir() and any(p.name != OWNER for p in root.iterdir())
    if stale:
        log.warning("%s: checkpoints of another run (tag %r; this run: %r) removed: training starts at step 0",
                    root, owner.get("tag"), tag)
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    write_json(root / OWNER, {"tag": tag})
    return not stale


# ----- GRPO's own checkpoints ---------------------------------------------------------------------


def step_name(step: int) -> str:
    return f"step-{step:06d}"


def staging(root: str | Path, step: int, create: bool) -> Path:
    """The folder a checkpoint of `step` is written in before it is renamed into place; `create`
    (the main process): made fresh and empty."""
    tmp = Path(root) / f".tmp-{step_name(step)}"
    if create:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    return tmp


def fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def commit(tmp: Path, meta: dict, keep: int) -> Path:
    """Make the staged folder `tmp` a checkpoint (main process): its files synced, meta.json (with
    every file's size) written last, renamed to step-N; then only the newest `keep` checkpoints stay,
    and leftover staging folders go."""
    files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}
    for name in files:
        fsync(tmp / name)
    final = tmp.with_name(tmp.name.removeprefix(".tmp-"))
    atomic_write(tmp / META, json.dumps({**meta, "files": files}, indent=1, default=str))  # fsync'd
    if final.exists():  # the same step saved again (a resumed run that died before its next save)
        shutil.rmtree(final)
    os.replace(tmp, final)
    fsync(final.parent)
    steps = sorted(_steps(final.parent), reverse=True)
    for _, old in steps[keep:]:
        shutil.rmtree(old, ignore_errors=True)
    for left in final.parent.glob(".tmp-*"):
        shutil.rmtree(left, ignore_errors=True)
    return final


def _steps(root: Path) -> list[tuple[int, Path]]:
    if not root.is_dir():
        return []
    return [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP.match(p.name))]


def problem(path: Path) -> Optional[str]:
    """Why the checkpoint folder `path` is not complete (None: it is)."""
    meta = read_json(path / META)
    if not isinstance(meta, dict) or not isinstance(meta.get("files"), dict):
        return f"no readable {META}"
    for name, size in meta["files"].items():
        f = path / name
        if not f.is_file():
            return f"{name} is missing"
        if f.stat().st_size != size:
            return f"{name} holds {f.stat().st_size} bytes, {META} says {size}"
    return None


def complete(root: str | Path) -> list[tuple[Path, dict]]:
    """(folder, meta) of every complete GRPO checkpoint under `root`, newest first; incomplete ones
    are skipped with a warning (staging folders are never looked at)."""
    out = []
    for _, path in sorted(_steps(Path(root)), reverse=True):
        why = problem(path)
        if why:
            log.warning("checkpoint %s is incomplete (%s): skipped", path, why)
            continue
        out.append((path, read_json(path / META)))
    return out


def save_trainable(model: Any, path: Path) -> None:
    """The parameters that train (requires_grad), by name, as safetensors: with LoRA the adapters
    (the frozen base comes from the start model again), else every weight (tied ones once)."""
    from safetensors.torch import save_file

    with disk_errors(path):  # a full disk: DiskError naming the file (safetensors tells it as text)
        save_file({n: p.detach().to("cpu").contiguous() for n, p in model.named_parameters() if p.requires_grad},
                  str(path))


def save_torch(obj: Any, path: Path) -> None:
    """torch.save into a file opened here: a full disk is then a DiskError naming `path` (torch.save
    given the name reports it as "unexpected pos ...", the OSError lost)."""
    import torch

    with disk_errors(path), open(path, "wb") as f:
        torch.save(obj, f)


def read_trainable(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def load_trainable(model: Any, tensors: dict, where: Path) -> None:
    """Copy `tensors` into the model's trainable parameters in place (the optimizer keeps its
    references to them); a different set of names is a checkpoint of another model."""
    import torch

    from kit.errors import BadInput

    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if set(params) != set(tensors):
        extra, missing = sorted(set(tensors) - set(params)), sorted(set(params) - set(tensors))
        raise BadInput(f"{where}: its trainable parameters are not this model's (only in the checkpoint: "
                       f"{extra[:3]}, only in the model: {missing[:3]})",
                       f"remove {where.parent} to start over, or resume with the model and lora settings it was "
                       "written with")
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(tensors[n])


def rng_state() -> dict:
    """This process's global RNG states (python, torch CPU, every CUDA device): dropout and anything
    else that draws from them between steps."""
    import torch

    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import torch

    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ----- transformers' checkpoints (SFT) ------------------------------------------------------------


def trl_checkpoint(root: str | Path, clean: bool = False) -> Optional[Path]:
    """The newest complete checkpoint-N transformers' Trainer wrote in `root` (its trainer_state.json,
    written last, reads back with global_step N), or None. `clean` (the main process): incomplete
    ones (a kill while saving) are removed, so that the Trainer neither resumes from them nor counts
    them among the ones it keeps."""
    root = Path(root)
    found = sorted(((int(m.group(1)), p) for p in (root.iterdir() if root.is_dir() else ())
                    if p.is_dir() and (m := _TRL.match(p.name))), reverse=True)
    best = None
    for step, path in found:
        state = read_json(path / "trainer_state.json")
        if isinstance(state, dict) and state.get("global_step") == step:
            best = best or path
            continue
        log.warning("checkpoint %s is incomplete (no readable trainer_state.json): %s", path,
                    "removed" if clean else "skipped")
        if clean:
            shutil.rmtree(path, ignore_errors=True)
    return best
