"""Model families: how each VLM's processor expands media into tokens, keyed by HF ``model_type``.

::

    base.py    Family (the interface), SpecialTokens, Size
    qwen.py    qwen2_vl, qwen2_5_vl, qwen3_vl(_moe), qwen3_5(_moe): patch grid from smart_resize, mRoPE
    gemma3.py  gemma3: image_seq_length soft tokens per image, no video, 1-D positions
    internvl.py internvl: image_seq_length <IMG_CONTEXT> per tile (image tiles from its size; a video frame each), 1-D
    glm4v.py   glm4v, glm4v_moe, glm46v: <|image|> grid from GLM's smart_resize, video blocks per temporal patch, mRoPE
    pixtral.py mistral3: Pixtral's [IMG] rows + [IMG_BREAK] / [IMG_END] from the resized size, no video, 1-D
    llava_onevision.py llava_onevision: anyres <image> count (lone image) or 730 (multi-image), pooled video frames, 1-D
    kimi_k25.py kimi_k25: <|media_pad|> grid from Kimi's navit_resize, video chunks of 4 frames, 1-D positions
    generic.py  any other model_type whose processor says how a size expands (generic_fields.py, video_rules.py):
                its own replace_image_token / replace_video_token on fields built from sizes, proven per folder

Each module is imported when its ``model_type`` is first asked for (``family_for``; ``FAMILIES`` is a mapping
that imports on access, ``FAST_FAMILIES`` names the types without importing), so a stage pays for its own
family's imports only. A ``model_type`` with a module here is counted from image headers and video
metadata (the fast path); any other is counted by the generic fast path where its folder passes the
proof (``tokens/proof.py``), else by running its HF processor (``tokens/slow.py``). Adding a family is one
module here plus its tests, or none where the generic path serves it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from .base import Family, Size, SpecialTokens

if TYPE_CHECKING:
    from ..tokens.rules import ModelRules

__all__ = [
    "Family", "Size", "SpecialTokens", "FAMILIES", "FAST_FAMILIES", "QWEN_FAMILIES", "QWEN3_FAMILIES",
    "family_for", "family_of",
]  # fmt: skip

# Qwen3VLProcessor: per-temporal-patch timestamps around video tokens; video sampled by the HF processor.
QWEN3_FAMILIES = frozenset({"qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"})
QWEN_FAMILIES = frozenset({"qwen2_vl", "qwen2_5_vl"}) | QWEN3_FAMILIES

# model_type -> (module of this package, its family object). A module is imported when its type is first asked
# for: a scan imports its own family only, never another's transformers imports (glm4v's pull torch).
# tests/test_lazy_imports.py checks this table against each module's ``model_types``.
_MODULES: dict[str, tuple[str, str]] = {
    **dict.fromkeys(QWEN_FAMILIES, ("qwen", "QWEN")),
    "gemma3": ("gemma3", "GEMMA3"),
    "internvl": ("internvl", "INTERNVL"),
    "glm4v": ("glm4v", "GLM4V"),
    "glm4v_moe": ("glm4v", "GLM4V"),
    "glm46v": ("glm4v", "GLM46V"),
    "mistral3": ("pixtral", "MISTRAL3"),
    "kimi_k25": ("kimi_k25", "KIMI_K25"),
    "llava_onevision": ("llava_onevision", "LLAVA_ONEVISION"),
}

FAST_FAMILIES = frozenset(_MODULES)  # model types counted from sizes (fast path); naming them imports nothing


class _Families(Mapping[str, Family]):
    """``model_type -> Family`` for every type with a module here, each module imported on first access."""

    def __getitem__(self, model_type: str) -> Family:
        found = _LOADED.get(model_type)
        if found is None:  # the first ask: every later one is a dict lookup (media_info asks once per media item)
            module, name = _MODULES[model_type]
            found = _LOADED[model_type] = getattr(importlib.import_module(f".{module}", __name__), name)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(_MODULES)

    def __len__(self) -> int:
        return len(_MODULES)

    def __contains__(self, model_type: object) -> bool:
        return model_type in _MODULES


_LOADED: dict[str, Family] = {}  # model_type -> its family object, once its module is imported
FAMILIES: Mapping[str, Family] = _Families()


def family_for(model_type: str) -> Family | None:
    """The family module for ``model_type``, or None (the generic path or the slow path)."""
    return FAMILIES[model_type] if model_type in _MODULES else None


def family_of(rules: ModelRules) -> Family | None:
    """The family that counts ``rules``' folder: its module, else the generic family where the folder passed the
    generic path's proof (``rules.generic``), else None (the slow path)."""
    module = family_for(rules.model_type)
    if module is not None or rules.generic is None:
        return module
    from .generic import generic_family

    return generic_family(rules)
