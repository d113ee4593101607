"""The ``model_type`` a config means, from ``model.model_type`` and the processor folder's ``config.json``.

Light on purpose (no transformers, no family module): ``vlmpack write`` / ``verify`` record and check
it in ``vlmpack.json`` without loading a tokenizer. ``tokens.rules.load_model_rules`` validates the
same settings first (unknown names, a folder that contradicts them) and then resolves with this.
"""

from __future__ import annotations

import json
from pathlib import Path

from ._published import QWEN_FROM_FOLDER
from .config import ModelConfig
from .errors import ConfigError

__all__ = ["read_json", "resolved_model_type"]


def read_json(path: Path) -> dict:
    """The JSON object in ``path``; ``{}`` when there is no such file."""
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None


def resolved_model_type(model: ModelConfig) -> str:
    """``model.model_type`` (the published tool's ``qwenvl`` = the folder's), else the folder's, else
    ``text`` for a tokenizer-only model."""
    path = Path(model.processor_path)
    folder_type = read_json(path / "config.json").get("model_type")
    declared = folder_type if model.model_type == QWEN_FROM_FOLDER else model.model_type
    if declared or folder_type:
        return str(declared or folder_type)
    if model.processor_loader == "auto_tokenizer":
        return "text"
    raise ConfigError(f"{path}/config.json has no model_type: set model.model_type (e.g. qwen2_5_vl)")
