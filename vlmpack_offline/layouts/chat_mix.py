"""The published tool's ``packed_chat_mix`` layout: whole conversations, one entry per sub-sample.

As its WDS-native writer emits and its trainer's ``packed_chat_mix`` cooker reads them (LoongForge
``tools/data_preprocess/vlm/offline_packing/wds_pack/io/webdataset_writer.py``,
``loongforge/data/multimodal/base/task_encoder.py``; docs/switch.md)::

    {"messages": [{"messages": [{"role": "system", "content": "..."},
                                {"role": "user", "content": "<image>\\nWhat is it?"},
                                {"role": "assistant", "content": "A cat."}, ...]}, ...],
     "media_files": [["s000_0.jpg"], [], ...],          one group per sub-sample, placeholder order
     "media_type": "image",                             image | video | text: one kind per pack
     "_meta": {"pack_id": "pack_00000017", "sample_ids": [...], "token_lens": [...], "total_token_len": N}}

Each media item becomes an ``<image>`` / ``<video>`` placeholder at its position in the turn's text.
Holds system prompts and any number of turns; refuses a sample with both images and videos, media
outside user turns, or a literal placeholder in its text.
"""

from __future__ import annotations

from ..packed_format import PackedSample, pack_key
from .base import Layout, Shape, flat_text, media_of, pack_media_type

__all__ = ["ChatMixLayout", "meta_of"]


def meta_of(pack: PackedSample) -> dict:
    """The ``_meta`` block the published writer adds (its trainer ignores it)."""
    lens = [sub.token_len for sub in pack.samples]
    return {"pack_id": pack_key(pack.pack_id), "sample_ids": [sub.id for sub in pack.samples], "token_lens": lens,
            "total_token_len": sum(lens)}  # fmt: skip


class ChatMixLayout(Layout):
    name = "packed_chat_mix"
    holds = "whole conversations (a leading system prompt, multi-turn) with images or videos in user turns"

    def refuses(self, shape: Shape) -> str | None:
        # the trainer lifts the system message out of the list and puts it first (LoongForge _parse_messages)
        if "system" in shape.roles[1:]:
            return "a system turn that is not the first (its trainer moves it to the front)"
        return super().refuses(shape)

    def pack_json(self, pack: PackedSample) -> dict:
        return {
            "messages": [{"messages": [{"role": m["role"], "content": flat_text(m)} for m in sub.messages]}
                         for sub in pack.samples],
            "media_files": [[part for _, part in media_of(sub.messages)] for sub in pack.samples],
            "media_type": pack_media_type(pack),
            "_meta": meta_of(pack),
        }  # fmt: skip
