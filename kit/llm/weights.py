"""A model reference's files as digests: two references are the same model when the files a backend reads from
their folders are byte for byte the same, whatever the folders are called.

    model_folder("hf:/runs/x/grpo/model_best")      # Path("/runs/x/grpo/model_best"); None for an endpoint
    weights_digest("hf:/runs/x/grpo/model_best")    # sha256 over the files a backend loads; None for an endpoint

GRPO's model_best/ when its curve never rose, and the model/ of a GRPO whose every step was skipped, hold their
start's weights under another name: the ablation page compares referees this way (kit.report.ablations.same_model)
and an evaluation of such weights is reused rather than rerun (kit.eval.memo).
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

# what a backend reads from a model folder (weights, architecture, tokenizer, chat template); not what a training
# stage writes beside them (loss curves, metrics, its config)
READ_FILES = ("*.safetensors", "pytorch_model*.bin", "config.json", "generation_config.json", "tokenizer*.json",
              "special_tokens_map.json", "chat_template.jinja", "vocab.json", "merges.txt", "tokenizer.model")
DIGESTS = ".kit-digests.json"  # {file name: [size, mtime_ns, sha256]} beside the weights (_folder_digests)


def model_folder(ref: Any) -> Optional[Path]:
    """The local folder a model reference names ("hf:/x", "vllm:/x", a bare folder, "embedded"); None for an
    endpoint or anything that does not parse."""
    if not ref:
        return None
    from kit.llm.spec import ModelSpec

    try:
        spec = ModelSpec.parse(str(ref), folder_kind="hf")
    except ValueError:
        return None
    if not spec.local:
        return None
    if spec.embedded:
        from kit.llm.embedded import embedded_model_path

        return embedded_model_path()
    return Path(spec.path)


@lru_cache(maxsize=64)
def _digest(path: str, mtime_ns: int, size: int) -> str:
    from kit.runner.manifest import sha256_file

    return sha256_file(Path(path))


def _folder_digests(folder: Path, files: list[Path]) -> list[str]:
    """Each file's sha256, read from the folder's DIGESTS record where its size and mtime still match (a 60 GB
    checkpoint is hashed once, not by every stage that asks) and written back there when the folder is writable."""
    import os

    from kit.files import read_json, write_json

    rec_path = folder / DIGESTS
    rec = read_json(rec_path)
    rec = rec if isinstance(rec, dict) else {}
    out, changed = [], False
    for f in files:
        st = f.stat()
        version = [st.st_size, st.st_mtime_ns]
        old = rec.get(f.name)
        if isinstance(old, list) and len(old) == 3 and old[:2] == version:
            out.append(old[2])
            continue
        d = _digest(str(f), st.st_mtime_ns, st.st_size)
        rec[f.name], changed = version + [d], True
        out.append(d)
    if changed and os.access(folder, os.W_OK):
        try:
            write_json(rec_path, rec)
        except OSError:
            pass
    return out


def weights_digest(ref: Any) -> Optional[str]:
    """sha256 over the names and contents of the files a backend reads from the reference's folder (READ_FILES);
    None for an endpoint, a missing folder, or a folder with none of those files."""
    folder = model_folder(ref)
    if folder is None or not folder.is_dir():
        return None
    files = sorted({f for pattern in READ_FILES for f in folder.glob(pattern) if f.is_file()})
    if not files:
        return None
    h = hashlib.sha256()
    for f, d in zip(files, _folder_digests(folder, files)):
        h.update(f"{f.name}\0{d}\n".encode())
    return h.hexdigest()
