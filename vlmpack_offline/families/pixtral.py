"""Mistral3 (Mistral-Small-3.1 / 3.2, Magistral): Pixtral's image rows of ``[IMG]``, no video, 1-D positions.

Mirrors transformers' ``PixtralProcessor`` (``processing_pixtral.py``; ``mistral3`` has no processor of
its own) with the ``PixtralImageProcessorPil`` resize (``image_processing_pil_pixtral.py``). The chat
template renders one ``[IMG]`` per image (the pad); the processor resizes the image so it fits in
``size.longest_edge`` (aspect kept, floored, never up), rounds each side *up* to a multiple of
``patch = patch_size * spatial_merge_size`` (the processor hands that product to the image processor as
its patch size), and replaces the pad by one row of tokens per ``patch`` pixels of height::

    [IMG] * cols [IMG_BREAK]   (rows - 1 times)
    [IMG] * cols [IMG_END]     (the last row)
    rows, cols = H / patch, W / patch of the resized image      -> rows * (cols + 1) tokens

    500 x 300 (w x h), longest_edge 1540, patch 14 * 2 = 28    -> 308 x 504 -> 11 rows, 18 cols -> 209 tokens

The size arithmetic is transformers' own ``get_resize_output_image_size`` (imported, not rewritten), run
on the header size. All three tokens are special, so the compact text is the rendered text and an image
adds ``rows * (cols + 1) - 1`` tokens where its pad stands.

``media_tokens`` counts all three, ``[IMG]``, ``[IMG_BREAK]`` and ``[IMG_END]``: they are the processor's
``image_token_ids`` (what its ``mm_token_type_ids`` marks as image and what the slow path counts), so
``media_tokens == rows * (cols + 1)``. The vision tower's own features are the ``rows * cols`` ``[IMG]``.

Vision encoder (``Size.encoder_*``): the resized image's ``(H / patch_size) * (W / patch_size)`` patches
(``rows * cols * spatial_merge_size**2``; ``image_sizes`` is that resized size), one attention block per image:
``PixtralVisionModel.forward`` (``modeling_pixtral.py``) cuts each image's patches by its ``image_sizes`` and
attends within each image (``generate_block_attention_mask``, or ``cu_seqlens`` under flash attention).

An image so thin that one side floors to 0 pixels in the resize (5000 x 1 with longest_edge 1540) makes
the processor raise; it is dropped as ``unsupported_aspect``.

Settings, first found wins: ``patch_size`` / ``spatial_merge_size`` from ``model.processor_kwargs``, then
``processor_config.json``'s top level (both layouts keep the processor's attributes there), else the
processor's defaults 16 / 1 (the image processor's own ``patch_size`` is not used: the processor overrides
it); ``size`` (``longest_edge``, or ``height`` / ``width``) from ``model.processor_kwargs``, then the image
settings (``preprocessor_config.json`` or ``processor_config.json["image_processor"]``), else the image
processor's default ``{"longest_edge": 1024}``. ``do_resize: false`` is refused (the processor then floors
the image size to rows and columns that no longer match its pixels).

Which folders: ``model_type`` ``mistral3`` only. Pixtral-12B folders (``mistral-community/pixtral-12b``) say
``model_type: llava``, as LLaVA-1.5 folders do, and a model_type picks a family here; they stay on the
slow path, which runs their PixtralProcessor and counts the same three tokens as media.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..reasons import DropError, Reason
from .base import Size, SpecialTokens, encoder_blocks, first_setting

if TYPE_CHECKING:
    from ..tokens.media_info import MediaInfo
    from ..tokens.rules import ModelRules

__all__ = ["MISTRAL3", "PixtralFamily", "pixtral_grid"]

_DEFAULT_PATCH, _DEFAULT_MERGE = 16, 1  # PixtralProcessor(patch_size=16, spatial_merge_size=1)


@functools.cache
def _transformers() -> SimpleNamespace:
    """Pixtral's PIL image processor and its resize, imported on first use: their modules pull torch."""
    from transformers.image_utils import ChannelDimension
    from transformers.models.pixtral.image_processing_pil_pixtral import (
        PixtralImageProcessorPil,
        get_resize_output_image_size,
    )

    return SimpleNamespace(channels_last=ChannelDimension.LAST, image=PixtralImageProcessorPil,
                           resize=get_resize_output_image_size)  # fmt: skip


def pixtral_grid(rules: ModelRules, height: int, width: int, *, part: str = "") -> tuple[int, int]:
    """(rows, cols) of ``[IMG]`` the processor gives a ``height`` x ``width`` image."""
    patch = rules.patch_size * rules.merge_size
    shape = SimpleNamespace(shape=(height, width, 3))  # what get_image_size reads: no pixels needed
    hf = _transformers()
    resized_h, resized_w = hf.resize(shape, size=rules.max_size, patch_size=(patch, patch),
                                     input_data_format=hf.channels_last)  # fmt: skip
    if resized_h <= 0 or resized_w <= 0:  # a side floored to 0 px: the image processor raises
        raise DropError(
            Reason.UNSUPPORTED_ASPECT,
            f"{part or 'image'}: {width}x{height} resized to fit {rules.max_size[1]}x{rules.max_size[0]} "
            "leaves a side of 0 pixels, which the Pixtral image processor refuses",
        )
    return resized_h // patch, resized_w // patch


class PixtralFamily:
    name = "mistral3"
    model_types = frozenset({"mistral3"})
    takes_video = False
    no_video_reason = "PixtralProcessor has no video processor"
    positions = "1d"

    def settings(self, path: Path, image: dict, kwargs: dict, processor: dict) -> dict:
        patch, merge = first_setting((kwargs, processor), "patch_size"), first_setting((kwargs, processor), "spatial_merge_size")
        for name, value in (("patch_size", patch), ("spatial_merge_size", merge)):
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise ConfigError(
                    f"{path}: the Pixtral processor's {name} is {value!r}; vlmpack counts a positive integer "
                    f"(e.g. 14 and 2 for Mistral-Small-3.1). Fix it in processor_config.json or model.processor_kwargs"
                )
        for name, token in (("image_token", "[IMG]"), ("image_break_token", "[IMG_BREAK]"), ("image_end_token", "[IMG_END]")):
            if first_setting((kwargs, processor), name) not in (None, token):
                raise ConfigError(
                    f"{path}: the Pixtral processor's {name} is {first_setting((kwargs, processor), name)!r}; vlmpack counts "
                    f"PixtralProcessor's own {token}. Use a folder with the published token names"
                )
        if first_setting((kwargs, image), "do_resize") is False:
            raise ConfigError(
                f"{path}: do_resize is false; vlmpack counts Pixtral images resized to size.longest_edge. "
                "Set do_resize: true (or remove it)"
            )
        size = first_setting((kwargs, image), "size") or dict(_transformers().image.size)
        if isinstance(size, dict) and isinstance(size.get("longest_edge"), int):
            bound = (size["longest_edge"], size["longest_edge"])
        elif isinstance(size, dict) and isinstance(size.get("height"), int) and isinstance(size.get("width"), int):
            bound = (size["height"], size["width"])  # the image processor's resize takes these too
        else:
            raise ConfigError(
                f"{path}: the Pixtral image processor's size is {size!r}; vlmpack counts "
                '{"longest_edge": N} (e.g. {"longest_edge": 1540}). Fix size in the folder or model.processor_kwargs'
            )
        return {
            "patch_size": patch if patch is not None else _DEFAULT_PATCH,
            "merge_size": merge if merge is not None else _DEFAULT_MERGE,
            "max_size": bound,
        }

    def special_tokens(self, tokenizer) -> SpecialTokens:
        # PixtralProcessor's own names (processor_config.json may rename them; the tokenizer does not carry them)
        return SpecialTokens(image_pad="[IMG]", video_pad="[VIDEO]", vision_start="[IMG_BREAK]",
                             vision_end="[IMG_END]", image_soft="[IMG]")  # fmt: skip

    def compact_text(self, text: str, special: SpecialTokens) -> str:
        return text  # every replacement token is special: only the pad's place changes

    def check(self, rules: ModelRules, media: MediaInfo, *, part: str) -> None:
        pixtral_grid(rules, media.height, media.width, part=part)  # a side floored to 0: dropped at probe time

    def replacement_text(self, rules: ModelRules, special: SpecialTokens, media: MediaInfo) -> str:
        rows, cols = pixtral_grid(rules, media.height, media.width)
        row = special.image_soft * cols
        return (row + special.vision_start) * (rows - 1) + row + special.vision_end

    def replacement_size(self, rules: ModelRules, media: MediaInfo, count_text: Callable[[str], int]) -> Size:
        rows, cols = pixtral_grid(rules, media.height, media.width)
        n = rows * (cols + 1)
        patches = rows * cols * rules.merge_size**2  # the vision tower's patches before the spatial merge
        return Size(tokens=n, media_tokens=n, **encoder_blocks(1, patches))  # one block per image

    def describe(self, rules: ModelRules) -> str:
        """How ``vlmpack scan`` names the count."""
        height, width = rules.max_size
        bound = f"longest edge {height}" if height == width else f"within {width}x{height}"
        return (f"[IMG] rows from headers: {bound}, patch {rules.patch_size} x merge {rules.merge_size}, "
                "[IMG_BREAK] / [IMG_END] per row")  # fmt: skip


MISTRAL3 = PixtralFamily()
