"""Model-family rules for counting visual tokens, read from the processor directory.

::

    preprocessor_config.json   patch_size, merge_size, temporal_patch_size,
                               min_pixels / max_pixels (Qwen2/2.5-VL) or
                               size.shortest_edge / size.longest_edge (Qwen3-VL)
    config.json                model_type (unless model.model_type is set)
    model.processor_kwargs     min_pixels / max_pixels / size override the directory's,
                               as they would in ``from_pretrained``

For the Qwen-VL families (``FAST_FAMILIES``) tokens are computed from sizes; any
other family is counted by running its HF processor (the slow path).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from ..config import ModelConfig
from ..errors import ConfigError

__all__ = ["FAST_FAMILIES", "QWEN3_FAMILIES", "ModelRules", "load_model_rules"]

log = logging.getLogger(__name__)

# Families whose processor expands <|image_pad|>/<|video_pad|> by the smart_resize grid.
QWEN3_FAMILIES = frozenset({"qwen3_vl", "qwen3_vl_moe"})
FAST_FAMILIES = frozenset({"qwen2_vl", "qwen2_5_vl"}) | QWEN3_FAMILIES


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelRules:
    model_type: str  # HF model_type, e.g. "qwen2_5_vl"
    processor_path: str  # the local processor/tokenizer directory
    text_only: bool  # model.processor_loader == "auto_tokenizer": media samples cannot be counted
    patch_size: int = 14  # vision patch edge in pixels
    merge_size: int = 2  # spatial merge: merge_size**2 patches become one LLM token
    temporal_patch_size: int = 2  # frames per temporal patch (an image counts as one)
    min_pixels: int = 56 * 56  # smart_resize lower bound for images
    max_pixels: int = 28 * 28 * 1280  # smart_resize upper bound for images

    @property
    def fast(self) -> bool:
        """True when tokens are computed from sizes (Qwen-VL families), False for the slow path."""
        return self.model_type in FAST_FAMILIES

    @property
    def qwen3(self) -> bool:
        """Qwen3-VL prompts carry per-temporal-patch timestamps around video tokens."""
        return self.model_type in QWEN3_FAMILIES

    @property
    def factor(self) -> int:
        """smart_resize factor: sizes are multiples of patch_size * merge_size."""
        return self.patch_size * self.merge_size


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None


def load_model_rules(model: ModelConfig) -> ModelRules:
    """Read the rules for ``model`` (see module doc); raises ``ConfigError`` naming what is missing."""
    path = Path(model.processor_path)
    if not path.is_dir():
        raise ConfigError(
            f"model.processor_kwargs.pretrained_model_name_or_path = {str(path)!r} is not a directory: "
            "point it at a local processor/tokenizer folder"
        )
    text_only = model.processor_loader == "auto_tokenizer"
    model_type = model.model_type or _read_json(path / "config.json").get("model_type")
    if not model_type:
        if text_only:
            model_type = "text"
        else:
            raise ConfigError(f"{path}/config.json has no model_type: set model.model_type (e.g. qwen2_5_vl)")
    pre = _read_json(path / "preprocessor_config.json")
    # from_pretrained merges kwargs over the file; min/max_pixels then win over size (Qwen2VLImageProcessor)
    merged = {**pre, **model.processor_kwargs}
    settings: dict = {}
    for name in ("patch_size", "merge_size", "temporal_patch_size"):
        if merged.get(name) is not None:
            settings[name] = int(merged[name])
    size = dict(merged.get("size") or {})
    for name, edge in (("min_pixels", "shortest_edge"), ("max_pixels", "longest_edge")):
        value = merged.get(name) if merged.get(name) is not None else size.get(edge)
        if value is not None:
            settings[name] = int(value)
    rules = ModelRules(model_type=str(model_type), processor_path=str(path), text_only=text_only, **settings)
    if not text_only and rules.fast and not pre:
        raise ConfigError(
            f"{path} has no preprocessor_config.json: the {model_type} image settings are needed"
        )
    return rules
