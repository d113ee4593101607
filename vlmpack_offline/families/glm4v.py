"""GLM-4.1V / GLM-4.5V (``glm4v``): an image's ``<|image|>`` expands by the patch grid, as in Qwen-VL.

Mirrors transformers' ``Glm4vProcessor.replace_image_token`` (``processing_glm4v.py``) with the
``Glm4vImageProcessorPil`` (``image_processing_pil_glm4v.py``). The chat template renders
``<|begin_of_image|><|image|><|end_of_image|>`` per image; the processor replaces the one
``<|image|>`` (the pad) by::

    <|image|> * (t * h * w / merge_size**2)     grid (1, H / patch, W / patch)
    (H, W) = smart_resize(num_frames=temporal_patch_size, h, w, temporal_factor=temporal_patch_size,
                          factor=patch * merge, min_pixels=size.shortest_edge, max_pixels=size.longest_edge)

``smart_resize`` is GLM's own (imported from transformers, not rewritten): unlike Qwen's it bounds
``temporal_patch_size * H * W`` (an image counts as two frames), scales tiny images up to the factor
first, and refuses aspect ratios over 200 (dropped here as ``unsupported_aspect``, where the processor
raises). ``<|begin_of_image|>`` / ``<|end_of_image|>`` come from the template; all three are special
tokens, so the compact text is the rendered text and an image adds ``n - 1`` tokens.

Settings: ``patch_size`` / ``merge_size`` / ``temporal_patch_size`` and ``size`` (``shortest_edge`` /
``longest_edge`` in pixels) from ``model.processor_kwargs`` over the image settings (either layout),
else the image processor's defaults (14, 2, 2, 112*112 .. 28*28*15000). ``Glm4vImageProcessorPil``
reads the pixel bounds from ``size`` only, so top-level ``min_pixels`` / ``max_pixels`` (which Qwen's
processors take) are not read here. Positions: mRoPE from ``Glm4vModel.get_rope_index``.

Video: ``Glm4vVideoProcessor`` needs torchvision (and writes one
``<|begin_of_image|>...<|end_of_image|>{second}`` block per temporal patch from the video metadata);
the counts are not checked against it here, so a video item is dropped as ``unsupported_media``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil, smart_resize

from ..errors import ConfigError
from ..reasons import DropError, Reason
from .base import Size, SpecialTokens

if TYPE_CHECKING:
    from ..tokens.media_info import MediaInfo
    from ..tokens.rules import ModelRules

__all__ = ["GLM4V", "Glm4vFamily", "glm4v_grid"]


def glm4v_grid(rules: ModelRules, height: int, width: int, *, part: str = "") -> tuple[int, int, int]:
    """The (t, h, w) patch grid ``Glm4vImageProcessorPil`` gives a ``height`` x ``width`` image."""
    try:
        resized_h, resized_w = smart_resize(
            num_frames=rules.temporal_patch_size,
            height=height,
            width=width,
            temporal_factor=rules.temporal_patch_size,
            factor=rules.factor,
            min_pixels=rules.min_pixels,
            max_pixels=rules.max_pixels,
        )
    except ValueError as exc:  # aspect ratios past 200:1
        raise DropError(Reason.UNSUPPORTED_ASPECT, f"{part or 'image'}: {exc} ({width}x{height})") from None
    return 1, resized_h // rules.patch_size, resized_w // rules.patch_size


def _first(sources: tuple[dict, ...], name: str):
    return next((source[name] for source in sources if source.get(name) is not None), None)


class Glm4vFamily:
    name = "glm4v"
    model_types = frozenset({"glm4v"})
    takes_video = False
    no_video_reason = (
        "vlmpack does not count GLM-4V videos yet: transformers' Glm4vVideoProcessor needs torchvision, so its "
        "expansion (one <|begin_of_image|>...<|end_of_image|>{second} block per temporal patch) is not verified"
    )
    positions = "mrope"

    def settings(self, path: Path, image: dict, kwargs: dict, processor: dict) -> dict:
        sources = (kwargs, image)
        settings = {}
        for name in ("patch_size", "merge_size", "temporal_patch_size"):
            value = _first(sources, name)
            settings[name] = int(value) if value is not None else int(getattr(Glm4vImageProcessorPil, name))
        size = _first(sources, "size")
        if size is None:
            size = dict(Glm4vImageProcessorPil.size)
        if not (isinstance(size, dict) and isinstance(size.get("shortest_edge"), int)
                and isinstance(size.get("longest_edge"), int)):  # fmt: skip
            raise ConfigError(
                f"{path}: the GLM-4V image processor's size is {size!r}; it needs "
                '{"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS} (e.g. {"shortest_edge": 12544, '
                '"longest_edge": 9633792}). Fix size in the folder or model.processor_kwargs'
            )
        settings["min_pixels"], settings["max_pixels"] = size["shortest_edge"], size["longest_edge"]
        return settings

    def special_tokens(self, tokenizer) -> SpecialTokens:
        def named(attribute: str, default: str) -> str:
            value = getattr(tokenizer, attribute, None)  # Glm4vProcessor: the tokenizer's, else its default
            return value if isinstance(value, str) and value else default

        return SpecialTokens(
            image_pad=named("image_token", "<|image|>"),
            video_pad=named("video_token", "<|video|>"),
            vision_start="<|begin_of_image|>",
            vision_end="<|end_of_image|>",
        )

    def compact_text(self, text: str, special: SpecialTokens) -> str:
        return text  # a pad expands to pads only; begin/end of image are in the template

    def check(self, rules: ModelRules, media: MediaInfo, *, part: str) -> None:
        glm4v_grid(rules, media.height, media.width, part=part)  # the 200:1 aspect limit, at probe time

    def _tokens(self, rules: ModelRules, media: MediaInfo) -> int:
        t, h, w = glm4v_grid(rules, media.height, media.width)
        return t * h * w // rules.merge_size**2

    def replacement_text(self, rules: ModelRules, special: SpecialTokens, media: MediaInfo) -> str:
        return special.image_pad * self._tokens(rules, media)

    def replacement_size(self, rules: ModelRules, media: MediaInfo, count_text: Callable[[str], int]) -> Size:
        n = self._tokens(rules, media)
        return Size(tokens=n, media_tokens=n)

    def describe(self, rules: ModelRules) -> str:
        """How ``vlmpack scan`` names the count."""
        return (f"patch grid from headers: patch {rules.patch_size}, merge {rules.merge_size}, "
                f"{rules.temporal_patch_size} * pixels in {rules.min_pixels}..{rules.max_pixels}")  # fmt: skip


GLM4V = Glm4vFamily()
