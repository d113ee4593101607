"""transformers' own size functions (``smart_resize`` ...) without importing the modules that hold them.

Why: the fast path counts with the processor's own resize arithmetic, but the modules that define it import
``image_processing_utils`` / ``processing_utils`` and with them torch: two seconds of every scan's start for a
function of a dozen lines that reads only ``math``. So the function is compiled from the installed transformers
file itself (its ``def`` alone, the module's imports not run), where it is self-contained: no decorator, and no
name read but its own arguments and locals, builtins and ``math``. Anything else is imported the usual way, so a
release that changes the function is followed either way. ``tests/test_hf_functions.py`` checks each compiled
function against the imported one.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import importlib.util
import math
from collections.abc import Callable
from pathlib import Path

__all__ = ["hf_function"]

_ALLOWED = {"math": math}


@functools.cache
def hf_function(module: str, name: str) -> Callable:
    """``module.name`` (a transformers module path), compiled from its source where self-contained (module doc)."""
    compiled = _compiled(module, name)
    if compiled is not None:
        return compiled
    return getattr(importlib.import_module(module), name)


def _source_file(module: str) -> Path | None:
    """The module's file, found from the top package's location without importing any package on the way."""
    top, _, rest = module.partition(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.origin:
        return None
    path = Path(spec.origin).parent.joinpath(*rest.split(".")).with_suffix(".py")
    return path if path.is_file() else None


def _compiled(module: str, name: str) -> Callable | None:
    path = _source_file(module)
    if path is None:
        return None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return None
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    if len(found) != 1 or found[0].decorator_list:
        return None
    definition = found[0]
    for argument in [*definition.args.posonlyargs, *definition.args.args, *definition.args.kwonlyargs,
                     definition.args.vararg, definition.args.kwarg]:  # fmt: skip
        if argument is not None:
            argument.annotation = None  # annotations may name what the module imported; the body never reads them
    definition.returns = None
    if _free_names(definition) - set(_ALLOWED) - set(dir(builtins)):
        return None
    namespace: dict = {"__builtins__": builtins, **_ALLOWED}
    code = compile(ast.Module(body=[definition], type_ignores=[]), filename=str(path), mode="exec")
    exec(code, namespace)  # noqa: S102 - transformers' own installed source, one def, checked above
    return namespace[name]


def _free_names(definition: ast.FunctionDef) -> set[str]:
    """Names the function reads that it does not bind itself (a nested def or class makes it decline)."""
    bound = {a.arg for a in ast.walk(definition.args) if isinstance(a, ast.arg)}
    read: set[str] = set()
    for node in ast.walk(definition):
        if node is not definition and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            return {"<nested scope>"}
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, (ast.Store, ast.Del)) else read).add(node.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            return {"<global>"}
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            return {"<import>"}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    for default in [*definition.args.defaults, *definition.args.kw_defaults]:
        if default is not None:
            read |= {n.id for n in ast.walk(default) if isinstance(n, ast.Name)}
    return read - bound
