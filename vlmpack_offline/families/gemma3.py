"""Gemma3: every image is a fixed number of soft tokens (SigLIP at 896x896); no video; 1-D positions.

Mirrors transformers' ``Gemma3Processor`` (``processing_gemma3.py``), which replaces each
``boi_token`` (``<start_of_image>``, what the chat template renders for an image) by::

    "\\n\\n" <start_of_image> <image_soft_token> * image_seq_length <end_of_image> "\\n\\n"

whatever the image size (the image processor resizes every image to 896x896). The "\\n\\n"
pieces are plain text and merge with the text around them, so the counter tokenizes the
compact text (each pad already wrapped, without soft tokens) and adds ``image_seq_length``
per image; the soft tokens are special, so nothing else moves.

Settings: ``image_seq_length`` from ``model.processor_kwargs``, else ``processor_config.json``'s
top level, else the image processor settings, else 256 (the processor's default). Pan-and-scan
(``do_pan_and_scan: true``) adds image-dependent crops; it is not counted here and is refused.
(transformers 5.23: ``from_pretrained(..., do_pan_and_scan=True)`` crops with the processor's
defaults 256 / 4 / 1.2, while a folder's ``do_pan_and_scan: true`` alone does not crop in the
processor call and makes the bare image processor fail on the null crop settings: too murky to
mirror, so both are refused.)
A video item is dropped as ``unsupported_media`` (the processor has no video input).

Vision encoder (``Size.encoder_*``): each image is one crop (pan-and-scan is refused) at the image processor's
``size`` (896 x 896), one batch item of the SigLIP tower (``modeling_gemma3.py``: ``get_image_features`` runs
``vision_tower`` on ``pixel_values``; ``modeling_siglip.py`` prepends no class token): one attention block of
``(896 / 14)**2`` = 4096 patches. The patch edge is the model's (``vision_config.patch_size`` of the folder's
``config.json``, else 14, that of every published Gemma3 vision tower: SigLIP so400m/14): the processor
settings do not carry it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .base import Size, SpecialTokens, encoder_blocks, first_setting, tokenizer_token, vision_patch_size

if TYPE_CHECKING:
    from ..tokens.media_info import MediaInfo
    from ..tokens.rules import ModelRules

__all__ = ["GEMMA3", "Gemma3Family"]

_DEFAULT_SEQ_LENGTH = 256  # Gemma3Processor(image_seq_length=256)
_PATCH = 14  # the vision tower's patch edge in the published google/gemma-3-* config.json (SigLIP so400m/14)


class Gemma3Family:
    name = "gemma3"
    model_types = frozenset({"gemma3"})
    takes_video = False
    positions = "1d"

    def settings(self, path: Path, image: dict, kwargs: dict, processor: dict) -> dict:
        pan_and_scan = kwargs.get("do_pan_and_scan", image.get("do_pan_and_scan"))
        if pan_and_scan:
            raise ConfigError(
                f"{path}: do_pan_and_scan is on (processor settings or model.processor_kwargs); vlmpack does not "
                "count Gemma3's pan-and-scan crops yet. Set model.processor_kwargs.do_pan_and_scan: false"
            )
        from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

        size = first_setting((kwargs, image), "size") or dict(Gemma3ImageProcessorPil.size)
        if not (isinstance(size, dict) and isinstance(size.get("height"), int) and isinstance(size.get("width"), int)):
            raise ConfigError(
                f"{path}: the Gemma3 image processor's size is {size!r}; vlmpack counts "
                '{"height": H, "width": W} (e.g. {"height": 896, "width": 896}). Fix size in the folder or '
                "model.processor_kwargs"
            )
        seq = first_setting((kwargs, processor, image), "image_seq_length")
        return {
            "tokens_per_image": int(seq) if seq is not None else _DEFAULT_SEQ_LENGTH,
            "tile_size": (size["height"], size["width"]),  # every image is resized to it: one crop
            "patch_size": vision_patch_size(path, _PATCH),
        }

    def special_tokens(self, tokenizer) -> SpecialTokens:
        boi = tokenizer_token(tokenizer, "boi_token", "<start_of_image>")
        return SpecialTokens(
            image_pad=boi,  # the processor's image_token is the boi token
            vision_start=boi,
            vision_end=tokenizer_token(tokenizer, "eoi_token", "<end_of_image>"),
            image_soft=tokenizer_token(tokenizer, "image_token", "<image_soft_token>"),
        )

    def compact_text(self, text: str, special: SpecialTokens) -> str:
        return text.replace(special.image_pad, f"\n\n{special.image_pad}{special.vision_end}\n\n")

    def check(self, rules: ModelRules, media: MediaInfo, *, part: str) -> None:
        return None  # any image size: the processor resizes to its fixed square

    def replacement_text(self, rules: ModelRules, special: SpecialTokens, media: MediaInfo) -> str:
        soft = special.image_soft * rules.tokens_per_image
        return f"\n\n{special.image_pad}{soft}{special.vision_end}\n\n"

    def replacement_size(self, rules: ModelRules, media: MediaInfo, count_text: Callable[[str], int]) -> Size:
        # the compact text keeps the pad (boi) and eoi; the soft tokens stand after the pad
        height, width = rules.tile_size
        crop = (height // rules.patch_size) * (width // rules.patch_size)
        return Size(tokens=1 + rules.tokens_per_image, media_tokens=rules.tokens_per_image, **encoder_blocks(1, crop))


GEMMA3 = Gemma3Family()
