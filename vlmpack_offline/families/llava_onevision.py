"""LLaVA-OneVision (``llava_onevision``): anyres tiles for a sample's one image, one square for each image of a
multi-image sample, pooled frames for a video; 1-D positions.

Mirrors transformers' ``LlavaOnevisionProcessor`` (``processing_llava_onevision.py``) with the
``LlavaOnevisionImageProcessorPil``. The chat template renders one ``<image>`` / ``<video>`` per item (the
pads); the processor repeats each pad ``n`` times, where ``n`` depends on the image size AND on how
many images its sample holds (``batch_num_images``: the image processor tiles an image only when it
is alone in its sample; the model's ``get_image_features`` reads the same counts)::

    one image in the sample (anyres)   base (num_image_tokens, 729) + the unpadded tile-grid features
                                       + one newline per grid row, the grid shrunk when its area passes
                                       anyres_max_N tiles (``_get_number_of_features``)
        384 x 384 (h x w), grid 1 x 1  729 + 27*27 + 27 = 1485
        300 x 1000, grid 1 x 3         729 + 25*81 + 25 = 2779 (27 rows unpadded to the image's aspect: 25)
        2000 x 3000, grid 4 x 6        108 x 162 features past 9 tiles, shrunk by 1.63: 729 + 66*99 + 66 = 7329
    k >= 2 images in the sample        num_image_tokens + 1 (newline) each, whatever the size: 730
    a video of F frames                F * ceil(sqrt(729) / 2) ** 2 + 1 = F * 196 + 1

``vision_feature_select_strategy: default`` takes one token off each image (not off a video), as the
processor does. The anyres arithmetic is transformers' own (``LlavaOnevisionProcessor._get_number_of_features``
called on these settings), not a copy. Because the count of an image depends on its sample, the family
implements the optional ``in_sample`` hook (``base.py``): it tags each image with whether it is its
sample's only image before ``replacement_size`` / ``replacement_text`` see it.

Vision encoder (``Size.encoder_*``): ``LlavaOnevisionModel.get_image_features`` (``modeling_llava_onevision.py``)
runs the vision tower on each image's tiles, ``image_size_to_num_patches`` of them (the grid's tiles + the base
image; called here, not rewritten) for a sample's only image and 1 for each image of a multi-image sample;
``get_video_features`` on each frame. Every tile or frame is one batch item of the tower: one attention block
of ``num_image_tokens`` patches (729 = (384 / 14)**2 for SigLIP, which prepends no class token). The anyres
shrinking past ``anyres_max_N`` happens after the encoder, so every tile is encoded.

Settings, first found wins: ``num_image_tokens`` / ``vision_aspect_ratio`` / ``vision_feature_select_strategy``
from ``model.processor_kwargs``, then ``processor_config.json``'s top level (both layouts), else the
processor's defaults (``num_image_tokens`` has none: refused); ``image_grid_pinpoints`` / ``size`` /
``crop_size`` / ``do_center_crop`` from ``model.processor_kwargs``, then the image settings, else
``LlavaOnevisionImageProcessorPil``'s defaults. The grid is counted against the processed tile size
(``size``, or ``crop_size`` when center-cropping), as ``replace_image_token`` reads it off ``pixel_values``.

Video: ``LlavaOnevisionVideoProcessor`` (``do_sample_frames: false``) takes every frame it is given and
resizes each to the tile size, so the count is a function of the frame count alone; the frames are the
ones the shared sampler (``video:``) picks, any count (no temporal pairing: ``temporal_patch_size`` 1), at
their decoded size (``sample_video``: no Qwen-style resize, so no 200:1 refusal). The family's own recipe
(``video_defaults``, under the folder's settings and ``video:``) is LLaVA-OneVision's: 32 frames spread
evenly over the video (``frames_upbound`` 32 in its training scripts); a video of fewer frames gets 32
too, some repeated, as their ``force_sample`` does. Whenever ``min_frames >= max_frames`` (a fixed
count) every video gets ``max_frames`` this way: the model takes a pack's videos as one
``[videos, frames, ...]`` tensor, so they must share a frame count. A pack whose videos still differ
(a ``video:`` with ``min_frames < max_frames``) is refused by the loader (``concat_vision_inputs``),
not padded.

Where the folder's video settings (or ``model.processor_kwargs``) say ``do_sample_frames: true``, the frames
are the ones the video processor samples itself instead: ``BaseVideoProcessor.sample_frames`` (transformers
5.24 ``video_processing_utils.py``; ``video_processing_llava_onevision.py`` does not override it), called on
the container's ``VideoMetadata`` (``processor_frames.py``)::

    k = num_frames, else max(1, int(n_frames / native_fps * fps)), else every frame;  indices = arange(k) * n_frames // k
    10 frames at 5 fps, fps 2: frames 0 2 5 7

A video with fewer frames than ``k`` is dropped as ``unsupported_media`` naming the rule; a folder with both
``num_frames`` and ``fps`` (refused by the processor for every video) and any ``video:`` field but ``sampler`` /
``reader`` are config errors (``video.sampler: qwen_vl_utils`` keeps the recipe above). With ``fps``, videos of
other lengths get other frame counts, which the loader refuses in one pack (above).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..config import VideoConfig
from ..errors import ConfigError
from .base import Size, SpecialTokens, encoder_blocks, first_setting, tokenizer_token
from .processor_frames import frame_rule

if TYPE_CHECKING:
    from ..media import VideoInfo, VideoSampling
    from ..tokens.media_info import MediaInfo
    from ..tokens.rules import ModelRules

__all__ = ["LLAVA_ONEVISION", "LlavaOnevisionFamily", "SampleImage", "image_tiles", "image_tokens", "video_tokens"]

_DEFAULT_ASPECT = "anyres_max_9"  # LlavaOnevisionProcessor(vision_aspect_ratio="anyres_max_9")


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleImage:
    """An image as the processor sees it within its sample (what ``in_sample`` hands on)."""

    kind: ClassVar[str] = "image"
    width: int  # header width in pixels
    height: int  # header height in pixels
    alone: bool  # the sample's only image: tiled (anyres); else one padded square


@functools.lru_cache(maxsize=65536)
def image_tokens(
    height: int, width: int, *, tile: tuple[int, int], pinpoints: tuple[tuple[int, int], ...], base: int,
    aspect: str, default_strategy: bool, alone: bool,
) -> int:  # fmt: skip
    """``<image>`` tokens ``LlavaOnevisionProcessor.replace_image_token`` puts in place of one image."""
    from transformers import LlavaOnevisionProcessor

    if not alone:
        count = base + 1  # + image_newline
    else:  # transformers' own arithmetic, on these settings instead of a loaded processor
        owner = SimpleNamespace(
            image_processor=SimpleNamespace(image_grid_pinpoints=[list(p) for p in pinpoints]),
            num_image_tokens=base, vision_aspect_ratio=aspect,
        )  # fmt: skip
        owner._get_unpadded_features = functools.partial(LlavaOnevisionProcessor._get_unpadded_features, owner)
        count = LlavaOnevisionProcessor._get_number_of_features(owner, height, width, tile[0], tile[1])
    return count - 1 if default_strategy else count


@functools.lru_cache(maxsize=65536)
def image_tiles(height: int, width: int, *, tile: int, pinpoints: tuple[tuple[int, int], ...], alone: bool) -> int:
    """Tiles of one image the vision tower runs (``get_image_features``): the model's own
    ``image_size_to_num_patches`` for a sample's only image, 1 for each image of a multi-image sample."""
    from transformers.models.llava_onevision.modeling_llava_onevision import image_size_to_num_patches

    if not alone:
        return 1
    return image_size_to_num_patches(image_size=(height, width), grid_pinpoints=[list(p) for p in pinpoints],
                                     patch_size=tile)  # fmt: skip


def video_tokens(n_frames: int, *, base: int) -> int:
    """``<video>`` tokens of ``n_frames`` frames (``replace_video_token``): 2x2-pooled features + one newline."""
    pooled = math.ceil(int(math.sqrt(base)) / 2)
    return n_frames * pooled * pooled + 1


def _square(path: Path, name: str, value) -> tuple[int, int]:
    if isinstance(value, dict) and isinstance(value.get("height"), int) and isinstance(value.get("width"), int):
        return value["height"], value["width"]
    if isinstance(value, dict) and isinstance(value.get("shortest_edge"), int):  # square tiles, as the processor
        return value["shortest_edge"], value["shortest_edge"]
    raise ConfigError(
        f"{path}: the LLaVA-OneVision image processor's {name} is {value!r}; vlmpack counts "
        '{"height": H, "width": W} or {"shortest_edge": S}. Fix it in the folder or model.processor_kwargs'
    )


class LlavaOnevisionFamily:
    name = "llava_onevision"
    model_types = frozenset({"llava_onevision"})
    takes_video = True
    # every frame is resized to the tile size by the processor: only the frame choice is ours
    video_fields = frozenset({"fps", "min_frames", "max_frames", "sampler"})
    positions = "1d"
    images_per_sample = True  # the loader runs a sub-sample's images through one processor call (batch_num_images)

    def settings(self, path: Path, image: dict, kwargs: dict, processor: dict) -> dict:
        from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
            LlavaOnevisionImageProcessorPil as Defaults,
        )

        base = first_setting((kwargs, processor), "num_image_tokens")
        if base is None:
            raise ConfigError(
                f"{path}: no num_image_tokens in processor_config.json or model.processor_kwargs; "
                "LlavaOnevisionProcessor cannot expand an image without it (729 for the SigLIP-384 checkpoints): "
                "set model.processor_kwargs.num_image_tokens"
            )
        aspect = str(first_setting((kwargs, processor), "vision_aspect_ratio") or _DEFAULT_ASPECT)
        if not aspect.strip("anyres_max_").isdigit():  # noqa: B005 (the processor does int(aspect.strip("anyres_max_")))
            raise ConfigError(f"{path}: vision_aspect_ratio is {aspect!r}; the processor reads anyres_max_N")
        pinpoints = first_setting((kwargs, image), "image_grid_pinpoints") or Defaults.image_grid_pinpoints
        size = _square(path, "size", first_setting((kwargs, image), "size") or Defaults.size)
        if first_setting((kwargs, image), "do_center_crop"):
            size = _square(path, "crop_size", first_setting((kwargs, image), "crop_size"))
        return {
            "tokens_per_image": int(base),
            "tile_size": size,
            "grid_pinpoints": tuple((int(h), int(w)) for h, w in pinpoints),
            "vision_aspect_ratio": aspect,
            "feature_select_strategy": str(first_setting((kwargs, processor), "vision_feature_select_strategy") or ""),
            "temporal_patch_size": 1,  # the video processor takes any frame count
            # LlavaOnevisionVideoProcessor's own sampling where its settings say do_sample_frames: true (module doc)
            "frame_rule": frame_rule(path, kwargs, processor="LLaVA-OneVision", internvl=False),
        }

    def special_tokens(self, tokenizer) -> SpecialTokens:
        image, video = tokenizer_token(tokenizer, "image_token", "<image>"), tokenizer_token(tokenizer, "video_token", "<video>")
        return SpecialTokens(image_pad=image, video_pad=video, vision_start="", vision_end="", image_soft=image)

    def compact_text(self, text: str, special: SpecialTokens) -> str:
        return text  # pads expand to pads alone

    def check(self, rules: ModelRules, media: MediaInfo, *, part: str) -> None:
        return None  # any image size and frame count: the processors resize to the tile size

    def sample_video(self, rules: ModelRules, info: VideoInfo, settings: VideoConfig, *, part: str) -> VideoSampling:
        """The shared sampler's frames (``video:``; they depend on the frame count and rate alone), where the video
        processor does not sample its own (``sample_for`` takes ``rules.frame_rule`` first). The size it picks is not
        used: the video processor resizes every frame to the tile size and the loader hands it the frames as
        decoded. So the sampler is asked about a tile-sized frame, and a video past 200:1 is not refused for a
        resize that never happens."""
        from ..media import sample_video

        height, width = rules.tile_size
        tile = dataclasses.replace(info, height=height, width=width)
        sampling = sample_video(tile, settings, factor=rules.factor, temporal_factor=rules.temporal_patch_size, part=part)
        fixed = settings.max_frames if settings.min_frames >= settings.max_frames else 0
        if sampling.n_frames < fixed:  # a short video: LLaVA-NeXT's force_sample, frames repeat to the fixed count
            indices = np.linspace(0, info.n_frames - 1, fixed).round().astype(np.int64)
            sampling = dataclasses.replace(sampling, frame_indices=tuple(int(i) for i in indices))
        return sampling

    def video_defaults(self) -> VideoConfig:
        """LLaVA-OneVision's recipe: 32 evenly spread frames whatever the length (see the module doc)."""
        return VideoConfig(min_frames=32, max_frames=32)

    def in_sample(self, rules: ModelRules, media: Sequence[MediaInfo]) -> tuple:
        """The sample's items, each image tagged with whether it is the sample's only image."""
        alone = sum(item.kind == "image" for item in media) == 1
        return tuple(
            SampleImage(width=item.width, height=item.height, alone=alone) if item.kind == "image" else item
            for item in media
        )

    def _tokens(self, rules: ModelRules, media) -> int:
        if media.kind == "video":
            return video_tokens(media.sampling.n_frames, base=rules.tokens_per_image)
        return image_tokens(
            media.height, media.width, tile=rules.tile_size, pinpoints=rules.grid_pinpoints,
            base=rules.tokens_per_image, aspect=rules.vision_aspect_ratio,
            default_strategy=rules.feature_select_strategy == "default", alone=getattr(media, "alone", True),
        )  # fmt: skip

    def replacement_text(self, rules: ModelRules, special: SpecialTokens, media: MediaInfo) -> str:
        pad = special.video_pad if media.kind == "video" else special.image_pad
        return pad * self._tokens(rules, media)

    def replacement_size(self, rules: ModelRules, media: MediaInfo, count_text: Callable[[str], int]) -> Size:
        n = self._tokens(rules, media)
        if media.kind == "video":
            tiles = media.sampling.n_frames  # each frame is one tile-sized batch item of the tower
        else:
            tiles = image_tiles(media.height, media.width, tile=rules.tile_size[0], pinpoints=rules.grid_pinpoints,
                                alone=getattr(media, "alone", True))  # fmt: skip
        return Size(tokens=n, media_tokens=n, **encoder_blocks(tiles, rules.tokens_per_image))  # a block per tile

    def describe(self, rules: ModelRules) -> str:
        """How ``vlmpack scan`` names the count."""
        height, width = rules.tile_size
        multi = rules.tokens_per_image + 1 - (rules.feature_select_strategy == "default")
        return (f"{rules.tokens_per_image} tokens per {height}x{width} tile, {rules.vision_aspect_ratio} "
                f"over {len(rules.grid_pinpoints)} grids for a lone image, {multi} per image "
                "of a multi-image sample")  # fmt: skip


LLAVA_ONEVISION = LlavaOnevisionFamily()
