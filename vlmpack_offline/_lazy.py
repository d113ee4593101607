"""A package's names imported on first use (PEP 562 ``__getattr__``): importing the package costs nothing.

Why: ``loader`` and ``tokens`` name pieces that import torch or transformers; the scan, a no-op rerun and the
CLI import a module of theirs without wanting those.

    __getattr__ = lazy_names(__name__, globals(), {"PackEncoder": "encoder", ...})
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

__all__ = ["lazy_names"]


def lazy_names(package: str, namespace: dict, where: dict[str, str]) -> Callable[[str], object]:
    """The package's ``__getattr__``: ``name`` from its submodule ``where[name]``, kept in ``namespace`` once read."""

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__
