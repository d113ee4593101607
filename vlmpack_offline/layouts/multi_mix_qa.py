"""The published tool's ``packed_multi_mix_qa`` layout: prompts and answers per sub-sample.

As its writer emits and its trainer's ``packed_multi_mix_qa`` cooker reads them (LoongForge,
docs/switch.md)::

    {"texts": {"prompts": ["<image>\\nWhat is it?", ["Hi", "And now?"]],     str for one turn,
               "captions": ["A cat.", ["Hello.", "Now a dog."]]},          list[str] for several
     "media_files": [["s000_0.jpg"], []], "media_type": "image", "_meta": {...}}

The trainer builds each sub-sample as user / assistant pairs with no system prompt, so a sample
holds here only when its turns are user, assistant, user, assistant, ... (no system turn); the
published writer kept only the first pair and dropped the rest, vlmpack keeps every pair.
"""

from __future__ import annotations

from ..packed_format import PackedSample
from .base import Layout, Shape, flat_text, media_of, pack_media_type
from .chat_mix import meta_of

__all__ = ["MultiMixQaLayout"]


def _one_or_many(texts: list[str]) -> str | list[str]:
    return texts[0] if len(texts) == 1 else texts


class MultiMixQaLayout(Layout):
    name = "packed_multi_mix_qa"
    holds = "user / assistant turns (one or several pairs, no system prompt) with images or videos"

    def refuses(self, shape: Shape) -> str | None:
        roles = shape.roles
        if "system" in roles:
            return "a system prompt (its trainer builds no system turn)"
        if len(roles) % 2 or roles != ("user", "assistant") * (len(roles) // 2):
            return "turns that are not user / assistant pairs"
        return super().refuses(shape)

    def pack_json(self, pack: PackedSample) -> dict:
        prompts, captions = [], []
        for sub in pack.samples:
            prompts.append(_one_or_many([flat_text(m) for m in sub.messages[0::2]]))
            captions.append(_one_or_many([flat_text(m) for m in sub.messages[1::2]]))
        return {
            "texts": {"prompts": prompts, "captions": captions},
            "media_files": [[part for _, part in media_of(sub.messages)] for sub in pack.samples],
            "media_type": pack_media_type(pack),
            "_meta": meta_of(pack),
        }
