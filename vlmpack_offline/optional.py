"""Which pip extra brings each optional package, so a missing one is one line that names the fix.

    require("ray", "process.executor: ray")  ->  the module, or
    ConfigError: process.executor: ray needs the `ray` package: pip install 'vlmpack-offline[ray]'
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import ConfigError

__all__ = ["BY_HAND", "EXTRAS", "require", "missing_module_line"]

# import name (a package, or a dotted module of a shared namespace) -> the extra of pyproject.toml that installs it
EXTRAS: dict[str, str] = {
    "megatron.core": "megatron",
    "ray": "ray",
    "datasets": "hf",
    "pyarrow": "hf",
    "torchvision": "ref",
    "qwen_vl_utils": "ref",
    "mkdocs": "docs",
    "accelerate": "trainer",
}

# packages no extra of ours installs (the user's own training stack), and how to get them
BY_HAND: dict[str, str] = {
    "trl": "pip install trl",
    # it pins another transformers than ours; its collaters need only torch (docs/training/automodel.md)
    "nemo_automodel": "pip install --no-deps nemo-automodel==0.7.0",
}


def missing_module_line(name: str, needed_for: str | None = None) -> str:
    """One line for a package that is not installed: its extra, or (a core dependency) a reinstall."""
    parts = name.split(".")
    top = next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in EXTRAS), parts[0])
    what = f"{needed_for} needs" if needed_for else "vlmpack needs"
    if top in BY_HAND:
        return f"{what} the `{top}` package, which is not installed: {BY_HAND[top]}"
    if top in EXTRAS:
        return f"{what} the `{top}` package, which is not installed: pip install 'vlmpack-offline[{EXTRAS[top]}]'"
    return (f"{what} the `{top}` package, a dependency of vlmpack that is not installed: reinstall vlmpack "
            "(make install, or pip install vlmpack-offline; docs/install.md)")


def require(name: str, needed_for: str) -> ModuleType:
    """Import an optional module, or raise one ``ConfigError`` line naming the extra that installs it."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or not (name == exc.name or name.startswith(exc.name + ".")):
            raise  # the module is there but one of its own imports is missing: not ours to explain
        raise ConfigError(missing_module_line(name, needed_for)) from None
