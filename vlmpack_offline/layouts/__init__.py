"""Packed layouts, one module each, chosen by ``sample.sample_type`` (``base.py`` holds the interface)::

    vlmpack.py        vlmpack_packed (default): vlmpack's own PackedSample
    chat_mix.py       packed_chat_mix: the published tool's whole-conversation layout
    multi_mix_qa.py   packed_multi_mix_qa: its prompts / captions per sub-sample
    single_image.py   packed_captioning, packed_vqa: one image, one prompt, one answer per sub-sample
"""

from __future__ import annotations

import functools

from ..artifacts import canonical_json
from .base import Layout, Shape, media_of, shape_of
from .chat_mix import ChatMixLayout
from .multi_mix_qa import MultiMixQaLayout
from .single_image import CaptioningLayout, VqaLayout
from .vlmpack import VlmpackLayout

__all__ = ["LAYOUTS", "LAYOUT_NAMES", "Layout", "layout_for", "layouts_unfit", "media_of"]

LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (VlmpackLayout(), ChatMixLayout(), MultiMixQaLayout(), CaptioningLayout(), VqaLayout())
}
LAYOUT_NAMES = tuple(LAYOUTS)


def layout_for(sample_type: str) -> Layout:
    """The layout of a ``sample.sample_type`` value (the config already refused any other)."""
    return LAYOUTS[sample_type]


def layouts_unfit(messages: tuple[dict, ...]) -> str:
    """JSON ``{sample_type: why}`` of every published layout that cannot hold this sample ('' when all can).

    The scan records it per sample, so ``bucket`` drops what the configured layout cannot hold
    (``layout_unfit``) without reading any conversation again, and a new ``sample.sample_type`` needs no rescan.
    The answer depends on the sample's ``Shape`` alone: worked out once per shape."""
    return _unfit(shape_of(messages))


_PUBLISHED = tuple((name, layout) for name, layout in LAYOUTS.items() if layout.published)


@functools.lru_cache(maxsize=4096)  # a scan meets a handful of shapes; a bound for one that meets many
def _unfit(shape: Shape) -> str:
    found = {name: why for name, layout in _PUBLISHED if (why := layout.refuses(shape)) is not None}
    return canonical_json(found) if found else ""
