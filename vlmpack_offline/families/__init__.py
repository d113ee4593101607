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

A ``model_type`` with a module here is counted from image headers and video
metadata (the fast path); any other is counted by running its HF processor
(``tokens/slow.py``). Adding a family is one module here plus its tests.
"""

from __future__ import annotations

from .base import Family, Size, SpecialTokens
from .gemma3 import GEMMA3
from .glm4v import GLM4V, GLM46V
from .internvl import INTERNVL
from .kimi_k25 import KIMI_K25
from .llava_onevision import LLAVA_ONEVISION
from .pixtral import MISTRAL3
from .qwen import QWEN, QWEN3_FAMILIES, QWEN_FAMILIES

__all__ = [
    "Family", "Size", "SpecialTokens", "FAMILIES", "FAST_FAMILIES", "QWEN_FAMILIES", "QWEN3_FAMILIES",
    "family_for",
]  # fmt: skip

FAMILIES: dict[str, Family] = {model_type: family for family in (QWEN, GEMMA3, INTERNVL, GLM4V, GLM46V, MISTRAL3, KIMI_K25, LLAVA_ONEVISION) for model_type in family.model_types}
FAST_FAMILIES = frozenset(FAMILIES)  # model types counted from sizes (fast path)


def family_for(model_type: str) -> Family | None:
    """The family module for ``model_type``, or None (counted by the slow path)."""
    return FAMILIES.get(model_type)
