"""What kit code a stage runs, as one hash: part of the stage fingerprint.

    code_fingerprint(["kit.engine", "kit.runner.stage"])   # sha256 over the sources it reaches

A stage's notebook imports a few kit modules; those import others, at module level or inside
functions. `kit_closure` follows every `import kit...` / `from kit... import ...` statement found
by parsing the sources (no module is imported, so nothing runs), from the notebook's imports to
the fixed point, and `code_fingerprint` hashes the sources of that closure. Change
kit/train/grpo.py and the GRPO stage (which reaches it) gets a new fingerprint and reruns; the
engine stage, which never reaches it, keeps its fingerprint and is skipped.

Simplifications: dynamic imports (importlib with a computed name) are not followed, and data
files the code reads (prompt templates, kit/data) count only where listed in DATA_FILES.
"""

from __future__ import annotations

import ast
import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Iterable

KIT_DIR = Path(__file__).resolve().parents[1]
# data a module reads at run time, hashed with it: {module: [paths relative to kit/]}
DATA_FILES = {
    "kit.engine.prompts": ["engine/templates"],
    "kit.envs.domain": ["data"],
    "kit.report.browser": ["report/browser.js"],
}


def module_file(name: str, root: Path = KIT_DIR) -> Path | None:
    """kit.a.b -> kit/a/b.py or kit/a/b/__init__.py (None when neither exists)."""
    parts = name.split(".")[1:]
    base = root.joinpath(*parts) if parts else root
    for p in (base.with_suffix(".py") if parts else None, base / "__init__.py"):
        if p is not None and p.is_file():
            return p
    return None


def _imports(path: Path) -> set[str]:
    """kit module names imported anywhere in `path` (a `from kit.x import y` names kit.x and, when
    y is a submodule, kit.x.y)."""
    return set(_imports_of(str(path), path.stat().st_mtime_ns))


@lru_cache(maxsize=4096)  # one parse per file version: a plan fingerprints every stage over the same closure
def _imports_of(path: str, mtime_ns: int) -> frozenset[str]:
    tree = ast.parse(Path(path).read_text(encoding="utf-8"), filename=path)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name == "kit" or a.name.startswith("kit.")}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                (node.module == "kit" or node.module.startswith("kit.")):
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return frozenset(out)


def notebook_imports(source: str) -> set[str]:
    """kit modules imported by notebook code (the code of a .ipynb's cells, or a script)."""
    try:
        cells = json.loads(source)["cells"]
        code = "\n".join("".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                         for c in cells if c.get("cell_type") == "code")
    except (ValueError, KeyError, TypeError):
        code = source
    code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))
    tree = ast.parse(code)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("kit")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kit"):
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in out if m == "kit" or m.startswith("kit.")}


def kit_closure(modules: Iterable[str], root: Path = KIT_DIR) -> dict[str, Path]:
    """{module name: source file} of every kit module reachable from `modules` (package
    __init__ files of each module's parents included: importing kit.a.b runs kit/a/__init__.py)."""
    todo = list(modules)
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            if prefix in seen:
                continue
            path = module_file(prefix, root)
            if path is None:  # `from kit.x import some_function`: not a module
                continue
            seen[prefix] = path
            todo.extend(_imports(path))
    return seen


@lru_cache(maxsize=4096)
def _file_sha(path: str, mtime_ns: int) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _data_paths(module: str, root: Path) -> list[Path]:
    out: list[Path] = []
    for rel in DATA_FILES.get(module, []):
        p = root / rel
        out += sorted(x for x in p.rglob("*") if x.is_file() and "__pycache__" not in x.parts) if p.is_dir() else [p]
    return out


def code_fingerprint(modules: Iterable[str], root: Path = KIT_DIR) -> str:
    """sha256 over the (relative path, content hash) of every file in the closure of `modules`."""
    files: set[Path] = set()
    for name, path in kit_closure(modules, root).items():
        files.add(path)
        files |= set(_data_paths(name, root))
    h = hashlib.sha256()
    for p in sorted(files):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0" + _file_sha(str(p), p.stat().st_mtime_ns).encode() + b"\n")
    return h.hexdigest()
