"""Static screen of model-written checker source: the first wall of the sandbox.

    reason = screen(source)     # None when the source may run, else "rule: what (line N)"

Nothing here executes the source; it is parsed (`ast.parse`, no compile) and walked
iteratively. The rules close the known ways out of a restricted-builtins `exec`:

- imports, `global`/`nonlocal`, class definitions (no `__build_class__` in the sandbox
  anyway), async code;
- any identifier that starts with `_` (dunders, private names: `__class__`, `__globals__`,
  `__builtins__`, `__subclasses__`, ...) wherever an identifier can appear, including the
  attribute names of class patterns in `match` (they are looked up with getattr);
- names of dangerous builtins (eval, exec, open, getattr, type, ...), even where the code
  only rebinds them, so the reason is clear;
- introspection attributes that do not start with `_`: frames, code and tracebacks
  (`gi_frame`, `f_back`, `f_globals`, `tb_frame`, `co_code`, ...), `mro`, and
  `format`/`format_map`, whose format strings reach attributes at run time
  (`"{0.__class__}".format(x)`) where no AST can see them. f-strings are fine: their
  fields are ordinary expressions in the AST and pass through the same rules.

Identifiers are NFKC-normalised by the parser, so a fullwidth `＿＿class＿＿` is seen as
`__class__`. The screen is deliberately strict: a checker only needs plain Python over
JSON data.
"""

from __future__ import annotations

import ast
from functools import lru_cache

MAX_SOURCE_BYTES = 20_000

FORBIDDEN_NAMES = frozenset({
    "eval", "exec", "compile", "open", "getattr", "setattr", "delattr", "hasattr", "globals",
    "locals", "vars", "dir", "input", "breakpoint", "memoryview", "type", "help", "exit",
    "quit", "format", "object", "super", "classmethod", "staticmethod", "property", "id",
    "print", "bytearray", "copyright", "credits", "license",
})

FORBIDDEN_ATTRS = frozenset({
    "format", "format_map", "mro", "with_traceback", "func_globals", "func_code", "im_func",
    "im_self", "im_class",
})
# generator/coroutine/async-generator frames and code, frame and traceback and code fields
FORBIDDEN_ATTR_PREFIXES = ("gi_", "cr_", "ag_", "f_", "tb_", "co_")

_REJECTED_NODES = {
    ast.Import: "import", ast.ImportFrom: "import", ast.Global: "global statement",
    ast.Nonlocal: "nonlocal statement", ast.ClassDef: "class definition",
    ast.AsyncFunctionDef: "async code", ast.Await: "async code", ast.AsyncFor: "async code",
    ast.AsyncWith: "async code",
}


def _identifiers(node: ast.AST) -> list[tuple[str, str]]:
    """(kind, identifier) pairs a node introduces or reads."""
    if isinstance(node, ast.Name):
        return [("name", node.id)]
    if isinstance(node, ast.Attribute):
        return [("attribute", node.attr)]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [("name", node.name)]
    if isinstance(node, ast.arg):
        return [("name", node.arg)]
    if isinstance(node, ast.keyword):
        return [("keyword", node.arg)] if node.arg else []
    if isinstance(node, ast.ExceptHandler):
        return [("name", node.name)] if node.name else []
    if isinstance(node, ast.alias):
        return [("name", node.name)] + ([("name", node.asname)] if node.asname else [])
    if isinstance(node, (ast.MatchAs, ast.MatchStar)):
        return [("name", node.name)] if node.name else []
    if isinstance(node, ast.MatchMapping):
        return [("name", node.rest)] if node.rest else []
    if isinstance(node, ast.MatchClass):
        return [("attribute", a) for a in node.kwd_attrs]
    return []


def _check_identifier(kind: str, ident: str) -> str | None:
    if ident.startswith("_"):
        return f"underscore identifier: {kind} {ident!r} (dunder/private access is not allowed)"
    if kind == "name" and ident in FORBIDDEN_NAMES:
        return f"forbidden builtin: {ident!r}"
    if kind == "attribute" and (ident in FORBIDDEN_ATTRS or ident.startswith(FORBIDDEN_ATTR_PREFIXES)):
        return f"forbidden attribute: {ident!r} (introspection/format-string access)"
    return None


@lru_cache(maxsize=1024)  # the RL loop runs the same checker source many times
def screen(source: str, max_bytes: int = MAX_SOURCE_BYTES) -> str | None:
    """Reason the source is rejected, or None when it may run in the sandbox."""
    if not isinstance(source, str):
        return f"source: expected str, got {type(source).__name__}"
    size = len(source.encode("utf-8", "replace"))
    if size > max_bytes:
        return f"source size: {size} bytes over the {max_bytes}-byte limit"
    if "\x00" in source:
        return "source: contains a NUL byte"
    try:
        tree = ast.parse(source, filename="<checker>", mode="exec")
    except SyntaxError as e:
        return f"syntax error: {e.msg} (line {e.lineno})"
    except (RecursionError, MemoryError, ValueError, OverflowError) as e:
        return f"syntax error: source too complex to parse ({type(e).__name__})"
    has_check = False
    for node in ast.walk(tree):  # iterative: deep trees cannot overflow the screen's stack
        line = getattr(node, "lineno", None)
        at = f" (line {line})" if line else ""
        for cls, what in _REJECTED_NODES.items():
            if isinstance(node, cls):
                return f"forbidden statement: {what}{at}"
        for kind, ident in _identifiers(node):
            reason = _check_identifier(kind, ident)
            if reason:
                return reason + at
        if isinstance(node, ast.FunctionDef) and node.name == "check" and node in tree.body:
            has_check = True
    if not has_check:
        return "missing entry point: no top-level `def check(state, trajectory)`"
    return None
