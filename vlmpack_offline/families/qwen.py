"""Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3.5 (and their MoE variants): pads expand by the patch grid.

Mirrors ``replace_image_token`` / ``replace_video_token`` of transformers'
Qwen2-VL, Qwen2.5-VL and Qwen3-VL processors::

    image: smart_resize(h, w, factor=patch*merge, min_pixels, max_pixels) -> grid (1, H/patch, W/patch)
    video: sampled frames T at (rh, rw)                                 -> grid (T/temporal, rh/patch, rw/patch)
    image (all), video (Qwen2/2.5-VL):   <|image_pad|> -> <|image_pad|> * (t*h*w / merge**2)
    video (Qwen3-VL), one block per temporal patch i of the T/2 patches:
        <|video_pad|> -> "<{ts_i:.1f} seconds>" <|vision_start|> <|video_pad|> * (h*w / merge**2) <|vision_end|>
        ts_i = mean of the timestamps of the first and last frame of patch i

Vision encoder (``Size.encoder_*``): the item's ``t * h * w`` patches (the rows of its ``pixel_values`` /
``pixel_values_videos``), attended in ``t`` blocks of ``h * w``, one per temporal patch: transformers'
``vision_utils.get_vision_cu_seqlens`` (``repeat_interleave(h * w, t)``), which the vision towers of
``modeling_qwen2_vl.py``, ``modeling_qwen2_5_vl.py``, ``modeling_qwen3_vl.py`` and ``modeling_qwen3_5.py`` call
for their ``cu_seqlens``. Qwen2.5-VL attends so in its ``fullatt_block_indexes`` layers only (4 of 32); its
other layers attend within windows of at most ``(window_size / patch)**2`` = 64 patches
(``get_vision_window_index``), which ``encoder_attention`` does not describe.

Settings: patch_size, merge_size, temporal_patch_size, min/max pixels (``tokens/rules.py`` reads them
for every family, since the shared video sampler needs the factor); this module requires them.

Followed: ``cap_pixels_per_frame`` / ``max_video_tokens`` of a Qwen3-VL / Qwen3.5 video processor folder
(transformers' per-frame pixel cap, qwen-vl-utils' rule; ``media/video.py``'s ``hf_processor`` sampler). Unset,
the installed transformers' own default applies (a probe of ``Qwen3VLVideoProcessor.cap_pixels_per_frame``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..hf_functions import hf_function
from ..reasons import DropError, Reason
from . import QWEN3_FAMILIES, QWEN_FAMILIES  # the package's table of types, defined before any module loads
from .base import Size, SpecialTokens, encoder_blocks

if TYPE_CHECKING:
    from ..tokens.media_info import MediaInfo
    from ..tokens.rules import ModelRules

__all__ = ["QWEN", "QWEN_FAMILIES", "QWEN3_FAMILIES", "QwenFamily", "grid_thw", "media_token_count"]



def _smart_resize() -> Callable[..., tuple[int, int]]:
    """transformers' Qwen2-VL ``smart_resize``, compiled from its source without its module, which pulls torch
    (``hf_functions.py``)."""
    return hf_function("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl", "smart_resize")


def grid_thw(rules: ModelRules, media: MediaInfo, *, part: str = "") -> tuple[int, int, int]:
    """The (t, h, w) patch grid the Qwen-VL image/video processor gives for this item."""
    if media.kind == "video":
        s = media.sampling
        return (
            s.n_frames // rules.temporal_patch_size,
            s.resized_height // rules.patch_size,
            s.resized_width // rules.patch_size,
        )
    try:
        return _image_grid(media.height, media.width, rules.factor, rules.min_pixels, rules.max_pixels,
                           rules.patch_size)  # fmt: skip
    except ValueError as exc:  # transformers refuses aspect ratios past 200:1
        raise DropError(
            Reason.UNSUPPORTED_ASPECT, f"{part or 'image'}: {exc} ({media.width}x{media.height})"
        ) from None


@functools.lru_cache(maxsize=4096)  # bounded: a scan meets many sizes; a refusal (ValueError) is not kept
def _image_grid(height: int, width: int, factor: int, min_pixels: int, max_pixels: int,
                patch_size: int) -> tuple[int, int, int]:  # fmt: skip
    """An image's grid, kept: the scan asks for it twice per image (``QwenFamily.check`` at probe time, then
    ``replacement_size`` when counting), and ``smart_resize`` depends on these numbers alone."""
    height, width = _smart_resize()(height, width, factor=factor, min_pixels=min_pixels, max_pixels=max_pixels)
    return 1, height // patch_size, width // patch_size


def media_token_count(rules: ModelRules, media: MediaInfo) -> int:
    """Visual (pad) tokens of one item: t * h * w / merge_size**2."""
    t, h, w = grid_thw(rules, media)
    return t * h * w // (rules.merge_size**2)


class QwenFamily:
    name = "qwen-vl"
    model_types = QWEN_FAMILIES
    takes_video = True
    positions = "mrope"

    def settings(self, path: Path, image: dict, kwargs: dict, processor: dict) -> dict:
        if not image:
            raise ConfigError(
                f"{path} has no preprocessor_config.json and no image_processor in processor_config.json: "
                f"the Qwen-VL image settings are needed"
            )
        return {}

    def special_tokens(self, tokenizer) -> SpecialTokens:
        return SpecialTokens.of(tokenizer)

    def compact_text(self, text: str, special: SpecialTokens) -> str:
        return text  # a pad expands to pads (and special markers) only

    def check(self, rules: ModelRules, media: MediaInfo, *, part: str) -> None:
        grid_thw(rules, media, part=part)  # the 200:1 aspect limit, recorded at probe time

    def _qwen3_video_blocks(self, rules: ModelRules, media: MediaInfo) -> tuple[list[float], int]:
        t, h, w = grid_thw(rules, media)
        s = media.sampling
        from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

        # transformers' own timestamp rule (averages first/last frame of each temporal patch)
        stamps = Qwen3VLProcessor._calculate_timestamps(
            None, list(s.frame_indices), s.native_fps, rules.temporal_patch_size
        )
        return stamps[:t], h * w // rules.merge_size**2

    def replacement_text(self, rules: ModelRules, special: SpecialTokens, media: MediaInfo) -> str:
        if media.kind == "video" and rules.qwen3:
            stamps, per_frame = self._qwen3_video_blocks(rules, media)
            return "".join(
                f"<{ts:.1f} seconds>{special.vision_start}{special.video_pad * per_frame}{special.vision_end}"
                for ts in stamps
            )
        pad = special.video_pad if media.kind == "video" else special.image_pad
        return pad * media_token_count(rules, media)

    def replacement_size(self, rules: ModelRules, media: MediaInfo, count_text: Callable[[str], int]) -> Size:
        t, h, w = grid_thw(rules, media)
        encoder = encoder_blocks(t, h * w)  # one attention block per temporal patch (cu_seqlens, module doc)
        if media.kind == "video" and rules.qwen3:
            stamps, per_frame = self._qwen3_video_blocks(rules, media)
            text = sum(count_text(f"<{ts:.1f} seconds>") for ts in stamps)
            return Size(tokens=text + len(stamps) * (per_frame + 2), media_tokens=len(stamps) * per_frame, **encoder)
        n = t * h * w // rules.merge_size**2
        return Size(tokens=n, media_tokens=n, **encoder)


QWEN = QwenFamily()
