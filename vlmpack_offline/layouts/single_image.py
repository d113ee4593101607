"""The published tool's ``packed_captioning`` and ``packed_vqa`` layouts: one image, one prompt, one answer.

As its trainer's ``packed_captioning`` / ``packed_vqa`` cookers read them (LoongForge, docs/switch.md)::

    {"prompts": ["<image>\\nDescribe it.", ...], "captions": ["A cat.", ...], "images": ["img0.jpg", ...]}
    members img0.jpg, img1.jpg, ...: sub-sample i's image (bytes unchanged)

The cookers look up exactly ``img{i}.jpg``, so every image is named ``.jpg`` whatever its format (the
image decoders read the bytes, not the name; the published writer kept the source suffix, which its
own cookers then miss). A sample holds here only as one user turn with exactly one image and one
assistant answer, no system prompt, no video. ``packed_captioning`` trains on the caption alone
(its trainer ignores the prompt); ``packed_vqa`` on the answer to the prompt.
"""

from __future__ import annotations

from ..packed_format import PackedSample
from .base import Layout, Shape, flat_text, media_of

__all__ = ["CaptioningLayout", "VqaLayout"]


class _SingleImageLayout(Layout):
    holds = "one user turn with exactly one image, and one answer"

    def media_part(self, *, sub_index: int, index_in_pack: int, index_in_sub: int, source_part: str, kind: str) -> str:
        return f"img{sub_index}.jpg"

    def refuses(self, shape: Shape) -> str | None:
        if shape.roles != ("user", "assistant"):
            return "not one user turn and one answer (system prompt or several turns)"
        if shape.kinds != ("image",):
            return "not exactly one image"
        return super().refuses(shape)

    def pack_json(self, pack: PackedSample) -> dict:
        return {
            "prompts": [flat_text(sub.messages[0]) for sub in pack.samples],
            "captions": [flat_text(sub.messages[1]) for sub in pack.samples],
            "images": [media_of(sub.messages)[0][1] for sub in pack.samples],
        }


class CaptioningLayout(_SingleImageLayout):
    name = "packed_captioning"
    holds = "one user turn holding one image and no text, and its caption"

    def refuses(self, shape: Shape) -> str | None:
        if (why := super().refuses(shape)) is not None:
            return why
        if shape.prompt:
            return "a prompt (its trainer trains on the caption alone and drops the prompt)"
        return None


class VqaLayout(_SingleImageLayout):
    name = "packed_vqa"
