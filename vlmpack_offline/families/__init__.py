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

A ``model_type`` with a module here is counted from image headers and video
metadata (the fast path); any other is counted by the generic fast path where its folder passes the
proof (``tokens/proof.py``), else by running its HF processor (``tokens/slow.py``). Adding a family is one
module here plus its tests, or none where the generic path serves it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Family, Size, SpecialTokens
from .gemma3 import GEMMA3
from .glm4v import GLM4V, GLM46V
from .internvl import INTERNVL
from .kimi_k25 import KIMI_K25
from .llava_onevision import LLAVA_ONEVISION
from .pixtral import MISTRAL3
from .qwen import QWEN, QWEN3_FAMILIES, QWEN_FAMILIES

if TYPE_CHECKING:
    from ..tokens.rules import ModelRules

__all__ = [
    "Family", "Size", "SpecialTokens", "FAMILIES", "FAST_FAMILIES", "QWEN_FAMILIES", "QWEN3_FAMILIES",
    "family_for", "family_of",
]  # fmt: skip

FAMILIES: dict[str, Family] = {model_type: family for family in (QWEN, GEMMA3, INTERNVL, GLM4V, GLM46V, MISTRAL3, KIMI_K25, LLAVA_ONEVISION) for model_type in family.model_types}
FAST_FAMILIES = frozenset(FAMILIES)  # model types counted from sizes (fast path)


def family_for(model_type: str) -> Family | None:
    """The family module for ``model_type``, or None (the generic path or the slow path)."""
    return FAMILIES.get(model_type)


def family_of(rules: ModelRules) -> Family | None:
    """The family that counts ``rules``' folder: its module, else the generic family where the folder passed the
    generic path's proof (``rules.generic``), else None (the slow path)."""
    module = FAMILIES.get(rules.model_type)
    if module is not None or rules.generic is None:
        return module
    from .generic import generic_family

    return generic_family(rules)
