"""What the token count needs to know about one media item, and its patch grid.

``probe_media`` reads bytes into a small record (header size for an image,
container metadata + the shared frame sampling for a video); ``grid_thw`` turns it
into the (t, h, w) patch grid the Qwen-VL processors produce::

    image: smart_resize(h, w, factor=patch*merge, min_pixels, max_pixels) -> (1, H/patch, W/patch)
    video: sampled frames T at (rh, rw)                                 -> (T/temporal, rh/patch, rw/patch)
    tokens = t * h * w / merge**2
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

from ..config import VideoConfig
from ..media import VideoSampling, image_size, probe_video, sample_video
from ..reasons import DropError, Reason
from .rules import ModelRules, resolve_video

__all__ = ["ImageMedia", "VideoMedia", "MediaInfo", "probe_media", "grid_thw", "media_token_count"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageMedia:
    width: int  # header width in pixels (no EXIF transpose)
    height: int  # header height in pixels


@dataclass(frozen=True, slots=True, kw_only=True)
class VideoMedia:
    sampling: VideoSampling  # the frames the loader will decode, and their size


MediaInfo = ImageMedia | VideoMedia


def probe_media(
    kind: str, data: bytes, *, rules: ModelRules, video: VideoConfig | None, part: str = "", check_grid: bool = True
) -> MediaInfo:
    """Read one media part's facts (no pixel decode for images); raises ``DropError`` with a drop reason.

    ``video`` is the config's ``video:`` section: its set fields win over ``rules.video`` (the
    processor folder's settings over the family recipe).
    ``check_grid=False`` skips the Qwen-VL grid (and its 200:1 aspect limit): the slow path
    leaves such limits to the family's own processor.
    """
    part = part or kind
    if kind == "image":
        size = image_size(data, part=part)
        media: MediaInfo = ImageMedia(width=size.width, height=size.height)
    elif kind == "video":
        info = probe_video(data, part=part)
        settings = resolve_video(video, rules.video, factor=rules.factor)  # config > folder > recipe
        sampling = sample_video(
            info, settings, factor=rules.factor, temporal_factor=rules.temporal_patch_size, part=part
        )
        media = VideoMedia(sampling=sampling)
    else:
        raise ValueError(f"unknown media kind {kind!r}")
    if check_grid:  # Qwen-VL aspect-ratio check now, so the drop is recorded at probe time
        grid_thw(rules, media, part=part)
    return media


def grid_thw(rules: ModelRules, media: MediaInfo, *, part: str = "") -> tuple[int, int, int]:
    """The (t, h, w) patch grid the Qwen-VL image/video processor gives for this item."""
    if isinstance(media, VideoMedia):
        s = media.sampling
        return (
            s.n_frames // rules.temporal_patch_size,
            s.resized_height // rules.patch_size,
            s.resized_width // rules.patch_size,
        )
    try:
        height, width = smart_resize(
            media.height,
            media.width,
            factor=rules.factor,
            min_pixels=rules.min_pixels,
            max_pixels=rules.max_pixels,
        )
    except ValueError as exc:  # transformers refuses aspect ratios past 200:1
        raise DropError(
            Reason.UNSUPPORTED_ASPECT, f"{part or 'image'}: {exc} ({media.width}x{media.height})"
        ) from None
    return 1, height // rules.patch_size, width // rules.patch_size


def media_token_count(rules: ModelRules, media: MediaInfo) -> int:
    """Visual (pad) tokens of one item: t * h * w / merge_size**2."""
    t, h, w = grid_thw(rules, media)
    return t * h * w // (rules.merge_size**2)
