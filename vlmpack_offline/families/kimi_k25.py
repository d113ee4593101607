"""Kimi-K2.5 (``kimi_k25``): an image's ``<|media_pad|>`` expands by its patch grid after NaViT resizing.

Mirrors transformers' ``Kimi_K25Processor.replace_image_token`` (``processing_kimi_k25.py``) with the
``Kimi_K25ImageProcessor`` (``image_processing_kimi_k25.py``). The chat template renders
``<|media_begin|>image<|media_content|><|media_pad|><|media_end|>`` per image; the processor replaces the
one ``<|media_pad|>`` (the pad; the tokenizer's ``image_token`` where it names one) by::

    <|media_pad|> * (1 * H / patch * W / patch / merge**2)
    (H, W) = the padded size from navit_resize(h, w, patch, merge, max_patches, size.max_height)

``navit_resize`` lives only in the torchvision-importing image processor module, so ``navit_resize``
below writes its arithmetic out (tested against transformers' own in ``.venv-ref``): scale down (never
up) so that (h // patch) * (w // patch) <= max_patches and each side <= max_height patches, truncate,
then pad each side up to a multiple of patch * merge. The media markers are special tokens, so the
compact text is the rendered text and an image adds ``n - 1`` tokens where its pad stands.

Settings: ``patch_size`` / ``merge_size`` / ``max_patches`` / ``size`` (``{"max_height": P, "max_width": P}``,
in patches) from ``model.processor_kwargs`` over the image settings (either layout), else the image
processor's defaults (14, 2, 16384, 512: the public Kimi-K2.5 ``media_proc_cfg``'s in_patch_limit and
patch_limit_on_one_side). A folder with only the remote-code ``media_proc_cfg`` is refused: transformers'
processor does not read it. Positions: 1-D (``Kimi_K25Model`` passes ``position_ids`` to its DeepSeek-V3
text model unchanged; no rope index from the grids).

Video: ``Kimi_K25VideoProcessor`` needs torchvision and samples its own frames (fps 2, chunks of
``temporal_patch_size`` 4 frames, one ``HH:MM:SS.mmm<|media_begin|>video<|media_content|>...<|media_end|>``
block per chunk from the frame timestamps); the counts are not checked against it here, so a video item
is dropped as ``unsupported_media``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .base import Size, SpecialTokens, first_setting, tokenizer_token

if TYPE_CHECKING:
    from ..tokens.media_info import MediaInfo
    from ..tokens.rules import ModelRules

__all__ = ["KIMI_K25", "KimiK25Family", "navit_resize", "kimi_grid"]

# Kimi_K25ImageProcessor's class defaults (image_processing_kimi_k25.py imports torchvision, so not read from it)
_DEFAULTS = {"patch_size": 14, "merge_size": 2, "max_patches": 16384, "max_side": 512}


def navit_resize(height: int, width: int, patch_size: int, merge_kernel_size: int, max_patches: int,
                 max_size_per_side: int) -> tuple[tuple[int, int], tuple[int, int]]:  # fmt: skip
    """((resized h, w), (padded h, w)): transformers' ``navit_resize`` in
    ``models/kimi_k25/image_processing_kimi_k25.py`` (same float steps), which imports torchvision."""
    num_patches_h = max(1.0, height // patch_size)
    num_patches_w = max(1.0, width // patch_size)
    scale_for_total_patches = math.sqrt(max_patches / (num_patches_h * num_patches_w))
    scale_for_height_patches = (max_size_per_side * patch_size) / height
    scale_for_width_patches = (max_size_per_side * patch_size) / width
    scale = min(1.0, scale_for_total_patches, scale_for_height_patches, scale_for_width_patches)
    new_height, new_width = max(1, int(height * scale)), max(1, int(width * scale))
    new_height = min(new_height, max_size_per_side * patch_size)
    new_width = min(new_width, max_size_per_side * patch_size)
    factor = merge_kernel_size * patch_size
    pad_height = (factor - new_height % factor) % factor + new_height
    pad_width = (factor - new_width % factor) % factor + new_width
    return (new_height, new_width), (pad_height, pad_width)


def kimi_grid(rules: ModelRules, height: int, width: int) -> tuple[int, int, int]:
    """The (t, h, w) patch grid ``Kimi_K25ImageProcessor`` gives a ``height`` x ``width`` image."""
    _, (pad_h, pad_w) = navit_resize(height, width, rules.patch_size, rules.merge_size, rules.max_patches,
                                     rules.max_side_patches)  # fmt: skip
    return 1, pad_h // rules.patch_size, pad_w // rules.patch_size


class KimiK25Family:
    name = "kimi_k25"
    model_types = frozenset({"kimi_k25"})
    takes_video = False
    no_video_reason = (
        "vlmpack does not count Kimi-K2.5 videos yet: transformers' Kimi_K25VideoProcessor needs torchvision and "
        "samples its own frames, writing one timestamped <|media_begin|>video...<|media_end|> block per 4-frame "
        "chunk; that expansion is not verified"
    )
    positions = "1d"

    def settings(self, path: Path, image: dict, kwargs: dict, processor: dict) -> dict:
        sources = (kwargs, image)
        if "media_proc_cfg" in image and first_setting(sources, "max_patches") is None:
            raise ConfigError(
                f"{path}: the image settings hold the remote-code Kimi-K2.5 media_proc_cfg, which transformers' "
                "Kimi_K25ImageProcessor does not read; vlmpack counts the transformers processor. Write its keys "
                'in the folder or model.processor_kwargs: max_patches (in_patch_limit), size {"max_height": P, '
                '"max_width": P} (patch_limit_on_one_side), patch_size, merge_size'
            )
        if first_setting(sources, "do_resize") is False:
            raise ConfigError(
                f"{path}: do_resize is false (processor settings or model.processor_kwargs); vlmpack counts Kimi-K2.5 "
                "images as the processor resizes and pads them. Set model.processor_kwargs.do_resize: true"
            )
        settings = {}
        for name in ("patch_size", "merge_size", "max_patches"):
            value = first_setting(sources, name)
            settings[name] = int(value) if value is not None else _DEFAULTS[name]
        size = first_setting(sources, "size")
        if size is None:
            size = {"max_height": _DEFAULTS["max_side"], "max_width": _DEFAULTS["max_side"]}
        if not (isinstance(size, dict) and isinstance(size.get("max_height"), int)
                and size.get("max_height") == size.get("max_width")):  # fmt: skip
            raise ConfigError(
                f"{path}: the Kimi-K2.5 image processor's size is {size!r}; it needs "
                '{"max_height": P, "max_width": P} with equal values in patches (e.g. {"max_height": 512, '
                '"max_width": 512}). Fix size in the folder or model.processor_kwargs'
            )
        settings["max_side_patches"] = size["max_height"]
        return settings

    def special_tokens(self, tokenizer) -> SpecialTokens:
        return SpecialTokens(
            image_pad=tokenizer_token(tokenizer, "image_token", "<|media_pad|>"),
            video_pad=tokenizer_token(tokenizer, "video_token", "<|kimi_k25_video_placeholder|>"),
            vision_start="<|media_begin|>",
            vision_end="<|media_end|>",
        )

    def compact_text(self, text: str, special: SpecialTokens) -> str:
        return text  # a pad expands to pads only; the media markers are in the template

    def check(self, rules: ModelRules, media: MediaInfo, *, part: str) -> None:
        return None  # any image size: the processor scales down and pads, never refuses

    def _tokens(self, rules: ModelRules, media: MediaInfo) -> int:
        t, h, w = kimi_grid(rules, media.height, media.width)
        return t * h * w // rules.merge_size**2

    def replacement_text(self, rules: ModelRules, special: SpecialTokens, media: MediaInfo) -> str:
        return special.image_pad * self._tokens(rules, media)

    def replacement_size(self, rules: ModelRules, media: MediaInfo, count_text: Callable[[str], int]) -> Size:
        n = self._tokens(rules, media)
        return Size(tokens=n, media_tokens=n)

    def describe(self, rules: ModelRules) -> str:
        """How ``vlmpack scan`` names the count."""
        return (f"NaViT patch grid from headers: patch {rules.patch_size}, merge {rules.merge_size}, "
                f"max {rules.max_patches} patches, {rules.max_side_patches} per side")  # fmt: skip


KIMI_K25 = KimiK25Family()
