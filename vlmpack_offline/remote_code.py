"""vlmpack never runs a processor folder's own Python code unless the config asks, and never asks a keyboard.

A folder may declare its own classes (``auto_map`` in its JSON files, beside ``*.py`` modules).
With ``trust_remote_code`` left unset, transformers asks ``Do you wish to run the custom code? [y/N]``
on stdin; a batch job whose stdin stays open (a scheduler's) then waits forever. So every
``Auto*.from_pretrained`` call vlmpack makes passes the flag explicitly:
``model.processor_kwargs.trust_remote_code`` (default false), and a folder that needs its code
without it is one ``ConfigError`` line naming that setting.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from .errors import ConfigError

__all__ = ["trusted", "load_pretrained", "refuse_fallback_tokenizer"]

T = TypeVar("T")
_SETTING = "model.processor_kwargs.trust_remote_code"


def trusted(processor_kwargs: Mapping[str, Any]) -> bool:
    """Whether the config lets a processor folder's own code run (``trust_remote_code: true``)."""
    return processor_kwargs.get("trust_remote_code") is True


def load_pretrained(load: Callable[..., T], path: str, *, trust_remote_code: bool, **kwargs: Any) -> T:
    """``load(path, trust_remote_code=..., **kwargs)`` (an ``Auto*.from_pretrained``); a folder whose own code is
    needed but not trusted raises one ``ConfigError`` line instead of transformers' prompt or its long error."""
    try:
        return load(path, trust_remote_code=trust_remote_code, **kwargs)
    except ValueError as exc:
        if trust_remote_code or "trust_remote_code" not in str(exc):
            raise
        raise ConfigError(
            f"{path} declares its own Python code (auto_map) that loading it needs; vlmpack does not run it unless "
            f"you set {_SETTING}: true (read that code first)"
        ) from None


def refuse_fallback_tokenizer(path: str, loaded: str) -> None:
    """A folder whose ``tokenizer_config.json`` maps ``AutoTokenizer`` to its own class, loaded untrusted: transformers
    quietly builds a generic tokenizer instead (from ``tokenizer.json``), whose token counts can differ from the
    folder's own. Refused, naming the setting, unless the class loaded is the one declared."""
    try:
        config = json.loads((Path(path) / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return
    auto = (config.get("auto_map") or {}).get("AutoTokenizer") if isinstance(config, dict) else None
    declared = str(config.get("tokenizer_class") or "")
    if not auto or loaded.removesuffix("Fast") == declared.removesuffix("Fast"):
        return
    raise ConfigError(
        f"{path} declares its own tokenizer code ({declared or auto}, auto_map in tokenizer_config.json); without it "
        f"transformers loads a generic {loaded} whose token counts may differ, so vlmpack does not: set {_SETTING}: "
        "true (read that code first)"
    )

