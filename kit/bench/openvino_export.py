"""An OpenVINO export of an HF model folder, for the `openvino` arms of `kit bench rollout`.

The exporter, optimum-intel, does not install beside the kit's pins (its releases cap transformers
below 5.6; the kit pins 5.24), so it runs from a side venv of its own, as a subprocess:

    python3.11 -m venv /work/ov-export-venv
    /work/ov-export-venv/bin/pip install "optimum-intel[openvino]"
    kit bench export-openvino --python /work/ov-export-venv/bin/python --out /work/ov-smollm2-fp32

`export_openvino` runs `optimum-cli export openvino --task text-generation-with-past --weight-format
fp32` there on the model folder (default: the embedded model, kit.llm.embedded), with the tokenizer
and detokenizer IR (openvino-tokenizers) beside the model, into a scratch folder renamed to `out`
once it checks out: the files are there, the weights are not compressed (no f16/int8/int4 constants
in the IR), and, where this venv has openvino_genai (the `openvino` extra), the export's greedy
tokens agree with transformers' on the source folder. `kit-export.json` in the folder records the
source, the weight format and the side venv's package versions. Nothing is written into the source
folder (the kit hashes model folders).

Running the export needs no network: the model is a local folder (HF_HUB_OFFLINE=1).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REQUIRED = ("config.json", "openvino_model.xml", "openvino_model.bin", "openvino_tokenizer.xml",
            "openvino_detokenizer.xml")
"""What the openvino arm reads from an export (the tokenizer IRs: ContinuousBatchingPipeline loads them)."""

SIDE_PACKAGES = ("optimum-intel", "optimum", "transformers", "torch", "openvino", "openvino-tokenizers", "nncf")
"""The side venv's packages recorded in kit-export.json."""

COMPRESSED = {"f16", "bf16", "u8", "i8", "u4", "i4", "nf4", "f8e4m3", "f8e5m2"}
"""Constant element types of compressed weights (an fp32 export has none)."""

MANIFEST = "kit-export.json"
SIDE_VENV_HINT = ("python3.11 -m venv /work/ov-export-venv && /work/ov-export-venv/bin/pip install "
                  "'optimum-intel[openvino]'; then --python /work/ov-export-venv/bin/python")


def import_genai() -> Any:
    """openvino_genai, or Unavailable naming the extra to install."""
    try:
        import openvino_genai
    except ImportError as e:
        from kit.errors import Unavailable

        raise Unavailable(f"openvino_genai is not installed in this venv ({e}): pip install -e '.[openvino]'",
                          "pip install -e '.[openvino]' (openvino-genai with its openvino and openvino-tokenizers)") from e
    return openvino_genai


def check_export(folder: str | Path) -> Path:
    """`folder` as a Path if it holds an OpenVINO export the arm can load, else NotFound naming what is missing."""
    from kit.errors import NotFound

    path = Path(folder).expanduser()
    if not path.is_dir():
        raise NotFound(f"no OpenVINO export folder at {path}: make one with `kit bench export-openvino "
                       f"--python SIDE_VENV/bin/python --out {path}`", SIDE_VENV_HINT)
    missing = [f for f in REQUIRED if not (path / f).is_file()]
    if missing:
        raise NotFound(f"{path} is not a complete OpenVINO export (missing {', '.join(missing)}): redo it with "
                       f"`kit bench export-openvino --python SIDE_VENV/bin/python --out {path} --force`", SIDE_VENV_HINT)
    return path


def compressed_constants(xml: str | Path) -> dict[str, int]:
    """How many Const layers of each compressed element type the IR holds ({} for fp32 weights)."""
    counts: dict[str, int] = {}
    layer = re.compile(r'<layer [^>]*type="Const"[^>]*>\s*<data [^>]*element_type="(\w+)"')
    for kind in layer.findall(Path(xml).read_text(encoding="utf-8", errors="replace")):
        if kind in COMPRESSED:
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def side_versions(python: str | Path) -> dict[str, str | None]:
    """The side venv's versions of SIDE_PACKAGES (None: not installed); Unavailable if it cannot run
    or has no optimum-intel / openvino-tokenizers."""
    from kit.errors import Unavailable

    probe = ("import importlib.metadata as m, json\n"
             "def v(p):\n"
             "    try:\n        return m.version(p)\n"
             "    except m.PackageNotFoundError:\n        return None\n"
             f"print(json.dumps({{p: v(p) for p in {list(SIDE_PACKAGES)!r}}}))")
    if not Path(python).exists():
        raise Unavailable(f"no python at {python} (the exporter's side venv)", SIDE_VENV_HINT)
    try:
        out = subprocess.run([str(python), "-I", "-c", probe], capture_output=True, text=True, timeout=120, check=True,
                             cwd=tempfile.gettempdir())
        versions = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        raise Unavailable(f"cannot run {python}: {e}", SIDE_VENV_HINT) from e
    lacking = [p for p in ("optimum-intel", "openvino-tokenizers") if not versions.get(p)]
    if lacking:
        raise Unavailable(f"{python} has no {', '.join(lacking)} (the exporter)", SIDE_VENV_HINT)
    return versions


def source_folder(model: str) -> Path:
    """The HF folder to export: the embedded model's ("embedded"), or `model` as a folder."""
    if model == "embedded":
        from kit.llm.embedded import ensure_embedded_model

        return Path(ensure_embedded_model())
    path = Path(model).expanduser()
    if not (path / "config.json").is_file():
        from kit.errors import NotFound

        raise NotFound(f"no HF model folder at {path} (config.json missing)", "give a local folder or 'embedded'")
    return path


def export_openvino(python: str | Path, out: str | Path, model: str = "embedded", weight_format: str = "fp32",
                    force: bool = False, check: bool = True, log: Callable[[str], None] | None = print,
                    timeout: float = 1800) -> dict[str, Any]:
    """Export `model` (an HF folder, or "embedded") to `out` with the side venv's `python` (see the
    module doc); returns what kit-export.json records. An `out` already holding a complete export is
    kept unless `force`."""
    from kit.errors import BadInput, Unavailable

    out = Path(out).expanduser().resolve()
    if out.exists() and not force:
        if all((out / f).is_file() for f in REQUIRED):
            info = json.loads((out / MANIFEST).read_text()) if (out / MANIFEST).is_file() else {"out": str(out)}
            if log:
                log(f"{out} already holds an OpenVINO export (--force to redo it)")
            return info
        if not out.is_dir() or any(out.iterdir()):
            raise BadInput(f"{out} exists and is not an OpenVINO export: give another --out, or --force to replace it")
    src = source_folder(model)
    versions = side_versions(python)
    scratch = out.parent / f".{out.name}.partial"
    shutil.rmtree(scratch, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    # -I and a neutral working folder: only the side venv's packages (a checkout's own folders, such as
    # this repository's accelerate/, would shadow packages of the same name)
    cmd = [str(python), "-I", "-m", "optimum.commands.optimum_cli", "export", "openvino", "--model", str(src),
           "--task", "text-generation-with-past", "--weight-format", weight_format, str(scratch)]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if log:
        log(f"exporting {src} with {python} (optimum-intel {versions['optimum-intel']}, transformers "
            f"{versions['transformers']}, openvino {versions['openvino']}) ...")
    t0 = time.perf_counter()
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False,
                             cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired as e:
        shutil.rmtree(scratch, ignore_errors=True)
        raise Unavailable(f"the export ran over {timeout:.0f} s") from e
    seconds = time.perf_counter() - t0
    if run.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        tail = "\n".join((run.stdout + run.stderr).strip().splitlines()[-15:])
        raise Unavailable(f"optimum-cli export openvino failed (exit {run.returncode}):\n{tail}", SIDE_VENV_HINT)
    try:
        check_export(scratch)
        compressed = compressed_constants(scratch / "openvino_model.xml")
        if weight_format == "fp32" and compressed:
            raise Unavailable(f"the fp32 export holds compressed weights: {compressed}")
        info: dict[str, Any] = {"source": str(src), "out": str(out), "weight_format": weight_format,
                                "task": "text-generation-with-past", "export_s": round(seconds, 1),
                                "side_python": str(python), "side_versions": versions}
        (scratch / MANIFEST).write_text(json.dumps(info, indent=1) + "\n")
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out)
    scratch.rename(out)
    if log:
        log(f"exported to {out} in {seconds:.0f} s")
    if check:
        info["greedy_check"] = greedy_check(src, out, log=log)
        (out / MANIFEST).write_text(json.dumps(info, indent=1) + "\n")
    return info


def greedy_check(src: str | Path, export: str | Path, max_new_tokens: int = 16,
                 log: Callable[[str], None] | None = print) -> str:
    """Greedy tokens of the export (OpenVINO GenAI, float32) vs transformers on `src`, for one short
    chat: "agree on N of M tokens"; "skipped: ..." where this venv has no openvino_genai. The first
    token differing raises: the export does not compute the source model."""
    from kit.errors import Unavailable

    try:
        import_genai()
    except Unavailable as e:
        msg = f"skipped: {e}"
        if log:
            log(f"greedy check {msg}")
        return msg
    from kit.bench.engines import openvino_backend
    from kit.llm.hf import HFBackend

    hf = HFBackend(str(src), device="cpu", prefix_cache_min_tokens=0, pack_weights=False)
    ov = openvino_backend(hf, export, threads=1)
    try:
        msgs = [{"role": "user", "content": "Name three colors of the rainbow."}]
        params = {"temperature": 0.0, "max_new_tokens": max_new_tokens}
        a = hf.chat(msgs, params=params)[0].token_ids or []
        b = ov.chat(msgs, params=params)[0].token_ids or []
    finally:
        ov.close()
    same = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    if same == 0:
        raise Unavailable(f"the export's first greedy token differs from transformers' ({b[:1]} vs {a[:1]}): "
                          f"{export} does not compute {src}")
    msg = f"openvino and transformers agree on the first {same} of {max(len(a), len(b))} greedy tokens"
    if log:
        log(f"greedy check: {msg}")
    return msg
