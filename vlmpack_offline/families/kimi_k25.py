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

Video. The template renders ``<|kimi_k25_video_placeholder|>`` (the video pad; the tokenizer's
``video_token`` where it names one); ``Kimi_K25Processor.replace_video_token`` replaces it by one block per
chunk ``i`` of ``temporal_patch_size`` (4) sampled frames (the last chunk may hold fewer)::

    {stamp_i}<|media_begin|>video<|media_content|> <pad> * (H / patch * W / patch / merge**2) <|media_end|>
    stamp_i = HH:MM:SS.mmm of timestamps[4 * i]   (time.strftime("%H:%M:%S", gmtime(s)) + f".{int(s % 1 * 1000):03d}")
    (H, W)  = navit_resize(h, w, patch, merge, video max_patches (4096), video size.max_height) padded size

so a chunk of 4 frames costs one frame's tokens (the vision tower pools them over time). The frames are the
ones the video processor samples itself (``do_sample_frames``): transformers' own
``BaseVideoProcessor.sample_frames`` (Kimi's class does not override it; torchvision-free, imported, not
rewritten) on a ``VideoMetadata(total_num_frames, fps)`` from the container: ``fps`` frames per second,
``int(n_frames / native_fps * fps)`` (at least 1) frames at ``arange(k) * n_frames // k``; a video whose
frame rate is below ``fps`` is refused by that sampler (asks more frames than there are) and dropped as
``unsupported_media``. The first sampled frame is frame 0, so the first stamp is always
``00:00:00.000``: it joins the text before the pad in the tokenizer's pre-split, so the compact text keeps it
in place (``compact_text``); every other stamp and ``video`` lie between special tokens and tokenize alone.
``VideoSampling.resized_*`` is the padded size (what the patches cover); the loader hands the sampled frames
at their decoded size with their ``VideoMetadata`` to the real video processor (``do_sample_frames=False``),
which resizes, pads and cuts them into the same chunks (``video_grid_thw``: one ``[t, H / patch, W / patch]``
row per chunk, ``pixel_values_videos``: their patches). That needs torchvision (``.venv-ref``); the count
does not.

Vision encoder (``Size.encoder_*``): an image's ``h * w`` patches (its grid, padded size / patch) in one attention
block; a video's ``frames * h * w`` patches in one block per chunk of ``temporal_patch_size`` frames (the last may
hold fewer): ``Kimi_K25VisionModel.forward`` (``modeling_kimi_k25.py``) takes ``cu_seqlens`` from
``vision_utils.get_vision_cu_seqlens(merge_temporal=True)``, one ``t * h * w`` block per ``video_grid_thw`` row,
and the video processor writes one row per chunk, ``t`` its frames.

Video settings: ``fps`` from ``video.fps`` of the config, then ``model.processor_kwargs``, then the folder's
video settings, then the class default 2; ``temporal_patch_size`` / ``max_patches`` / ``size`` from
``model.processor_kwargs`` (``from_pretrained`` hands them to both processors), then the video settings,
then the class defaults (4, 4096, 512 x 512 patches; the public Kimi-K2.5 ``media_proc_cfg``'s
temporal_merge_kernel_size, in_patch_limit_each_frame, sample_fps). ``min_frames`` / ``max_frames`` /
``min_pixels`` / ``max_pixels`` / ``total_pixels`` of ``video:`` are not read by Kimi's video processor, so
the scan refuses them (``video_fields``); a ``num_frames`` in the folder is refused (the processor then fails: ``fps`` and ``num_frames`` are
exclusive). Training: the pack's ``pixel_values_videos`` / ``video_grid_thw`` go to HF's own forward
(transformers >= 5.24 pools each chunk and splits by the pooled size).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from ..config import VideoConfig
from ..errors import ConfigError
from ..reasons import DropError, Reason
from .base import Size, SpecialTokens, encoder_blocks, first_setting, tokenizer_token

if TYPE_CHECKING:
    from ..media import VideoInfo, VideoSampling
    from ..tokens.media_info import MediaInfo
    from ..tokens.rules import ModelRules

__all__ = ["KIMI_K25", "KimiK25Family", "navit_resize", "kimi_grid", "chunk_stamp", "VIDEO_DEFAULTS"]

# Kimi_K25ImageProcessor's class defaults (image_processing_kimi_k25.py imports torchvision, so not read from it)
_DEFAULTS = {"patch_size": 14, "merge_size": 2, "max_patches": 16384, "max_side": 512}
# Kimi_K25VideoProcessor's class defaults (video_processing_kimi_k25.py imports torchvision; checked in .venv-ref)
VIDEO_DEFAULTS = {"fps": 2, "temporal_patch_size": 4, "max_patches": 4096, "max_side": 512}
_FIRST_STAMP = "00:00:00.000"  # the stamp of frame 0, which the sampler always picks first
_CHUNK_OPEN, _CHUNK_CONTENT, _CHUNK_CLOSE = "<|media_begin|>", "video<|media_content|>", "<|media_end|>"


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


def chunk_stamp(seconds: float) -> str:
    """``Kimi_K25Processor.replace_video_token``'s text before a chunk: HH:MM:SS.mmm of its first frame."""
    return time.strftime("%H:%M:%S", time.gmtime(seconds)) + f".{int(seconds % 1 * 1000):03d}"


def _side_patches(size, default: int, whose: str, where: str) -> int:
    """``size`` = ``{"max_height": P, "max_width": P}`` in patches (Kimi's processors take one side limit)."""
    if size is None:
        return default
    if not (isinstance(size, dict) and isinstance(size.get("max_height"), int)
            and size.get("max_height") == size.get("max_width")):  # fmt: skip
        raise ConfigError(
            f"{whose} size is {size!r}; it needs "
            '{"max_height": P, "max_width": P} with equal values in patches (e.g. {"max_height": 512, '
            f'"max_width": 512}}). Fix size in {where}'
        )
    return size["max_height"]


class KimiK25Family:
    name = "kimi_k25"
    model_types = frozenset({"kimi_k25"})
    takes_video = True
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
        settings["max_side_patches"] = _side_patches(
            first_setting(sources, "size"), _DEFAULTS["max_side"], f"{path}: the Kimi-K2.5 image processor's",
            "the folder or model.processor_kwargs",
        )  # fmt: skip
        settings.update(self._video_settings(path, kwargs, settings))
        return settings

    def _video_settings(self, path: Path, kwargs: dict, image: dict) -> dict:
        """The video processor's: ``model.processor_kwargs`` (``from_pretrained`` hands them to it too), then
        the folder's video settings, then its class defaults."""
        from ..tokens.rules import processor_settings  # the tokens package imports the families

        sources = (kwargs, processor_settings(path)[1])
        if first_setting(sources, "num_frames") is not None:
            raise ConfigError(
                f"{path}: the Kimi-K2.5 video settings set num_frames; Kimi_K25VideoProcessor samples by fps and "
                "refuses num_frames next to it. Remove num_frames (set video.fps to sample fewer frames)"
            )
        for name in ("patch_size", "merge_size"):  # one vision tower for both
            value = first_setting(sources, name)
            if value is not None and int(value) != image[name]:
                raise ConfigError(
                    f"{path}: the video processor's {name} is {value}, the image processor's {image[name]}; "
                    "Kimi-K2.5's vision tower takes one value for both"
                )
        side = _side_patches(
            first_setting(sources, "size"), VIDEO_DEFAULTS["max_side"], f"{path}: the Kimi-K2.5 video processor's",
            "the folder's video settings or model.processor_kwargs",
        )  # fmt: skip
        tp, max_patches = first_setting(sources, "temporal_patch_size"), first_setting(sources, "max_patches")
        return {
            "temporal_patch_size": int(tp) if tp is not None else VIDEO_DEFAULTS["temporal_patch_size"],
            "video_max_patches": int(max_patches) if max_patches is not None else VIDEO_DEFAULTS["max_patches"],
            "video_max_side_patches": side,
        }

    video_fields = frozenset({"fps", "sampler"})  # Kimi_K25VideoProcessor samples by fps alone

    def video_defaults(self) -> VideoConfig:
        """The video processor's own sampling (fps 2), under the folder's video settings and ``video:``."""
        return VideoConfig(fps=float(VIDEO_DEFAULTS["fps"]), sampler="hf_processor")

    def sample_video(self, rules: ModelRules, info: VideoInfo, video: VideoConfig, *, part: str) -> VideoSampling:
        """The frames ``Kimi_K25VideoProcessor`` samples (``BaseVideoProcessor.sample_frames`` itself, on the
        container's ``VideoMetadata``) and the padded size of each (see the module doc)."""
        from transformers.video_processing_utils import BaseVideoProcessor
        from transformers.video_utils import VideoMetadata

        from ..media import VideoSampling

        metadata = VideoMetadata(
            total_num_frames=info.n_frames, fps=info.native_fps, duration=info.n_frames / info.native_fps
        )
        host = SimpleNamespace(num_frames=None, fps=video.fps)  # what the method reads of the processor
        try:
            indices = [int(i) for i in BaseVideoProcessor.sample_frames(host, metadata)]
        except ValueError as exc:  # fps above the video's own rate: more frames asked than there are
            raise DropError(Reason.UNSUPPORTED_MEDIA, f"{part}: Kimi_K25VideoProcessor cannot sample it at "
                            f"{video.fps} fps ({info.n_frames} frames at {info.native_fps} fps): {exc}; to keep "
                            f"such videos set video.fps at or below their frame rate") from None  # fmt: skip
        if not indices or indices[0] != 0:  # the compact text holds the stamp of frame 0
            raise DropError(Reason.CORRUPT_MEDIA, f"{part}: no frame 0 among the sampled frames {indices[:4]}")
        _, (pad_h, pad_w) = navit_resize(info.height, info.width, rules.patch_size, rules.merge_size,
                                         rules.video_max_patches, rules.video_max_side_patches)  # fmt: skip
        return VideoSampling(
            frame_indices=tuple(indices), resized_height=pad_h, resized_width=pad_w,
            native_fps=info.native_fps, total_frames=info.n_frames,
        )  # fmt: skip

    def special_tokens(self, tokenizer) -> SpecialTokens:
        return SpecialTokens(
            image_pad=tokenizer_token(tokenizer, "image_token", "<|media_pad|>"),
            video_pad=tokenizer_token(tokenizer, "video_token", "<|kimi_k25_video_placeholder|>"),
            vision_start="<|media_begin|>",
            vision_end="<|media_end|>",
        )

    def compact_text(self, text: str, special: SpecialTokens) -> str:
        # an image pad expands to pads only; a video's first stamp joins the text before it (module doc)
        return text.replace(special.video_pad, _FIRST_STAMP + special.video_pad)

    def check(self, rules: ModelRules, media: MediaInfo, *, part: str) -> None:
        return None  # any image size: the processor scales down and pads, never refuses

    def _tokens(self, rules: ModelRules, media: MediaInfo) -> int:
        t, h, w = kimi_grid(rules, media.height, media.width)
        return t * h * w // rules.merge_size**2

    def _chunks(self, rules: ModelRules, media: MediaInfo) -> tuple[list[str], int]:
        """(the stamp of each chunk, video pads per chunk), as ``replace_video_token`` makes them."""
        s = media.sampling
        tp = rules.temporal_patch_size
        stamps = [chunk_stamp(float(seconds)) for seconds in s.timestamps[::tp]]  # each chunk's first frame
        per_chunk = (s.resized_height // rules.patch_size) * (s.resized_width // rules.patch_size) // rules.merge_size**2
        return stamps, per_chunk

    def replacement_text(self, rules: ModelRules, special: SpecialTokens, media: MediaInfo) -> str:
        if media.kind == "video":
            stamps, n = self._chunks(rules, media)
            return "".join(f"{s}{_CHUNK_OPEN}{_CHUNK_CONTENT}{special.video_pad * n}{_CHUNK_CLOSE}" for s in stamps)
        return special.image_pad * self._tokens(rules, media)

    def _video_encoder(self, rules: ModelRules, media: MediaInfo) -> dict[str, int]:
        """``Size``'s encoder fields of a video: one block per chunk of frames (module doc)."""
        s = media.sampling
        frame = (s.resized_height // rules.patch_size) * (s.resized_width // rules.patch_size)
        full, rest = divmod(s.n_frames, rules.temporal_patch_size)
        chunks = encoder_blocks(full, rules.temporal_patch_size * frame)
        last = encoder_blocks(1 if rest else 0, rest * frame)
        return {name: chunks[name] + last[name] for name in chunks}

    def replacement_size(self, rules: ModelRules, media: MediaInfo, count_text: Callable[[str], int]) -> Size:
        if media.kind == "video":  # the first stamp is in the compact text; the others stand alone
            stamps, n = self._chunks(rules, media)
            per_chunk = count_text(_CHUNK_OPEN) + count_text(_CHUNK_CONTENT) + n + count_text(_CHUNK_CLOSE)
            # stamps 2.. in one tokenizer call, split by the special <|media_end|> as in the expanded text
            between = count_text(_CHUNK_CLOSE.join(stamps[1:])) - (len(stamps) - 2) if len(stamps) > 1 else 0
            return Size(tokens=len(stamps) * per_chunk + between, media_tokens=len(stamps) * n,
                        **self._video_encoder(rules, media))  # fmt: skip
        t, h, w = kimi_grid(rules, media.height, media.width)
        n = t * h * w // rules.merge_size**2
        return Size(tokens=n, media_tokens=n, **encoder_blocks(t, h * w))  # one block (t = 1)

    def describe(self, rules: ModelRules) -> str:
        """How ``vlmpack scan`` names the count."""
        return (f"NaViT patch grid from headers: patch {rules.patch_size}, merge {rules.merge_size}, "
                f"max {rules.max_patches} patches, {rules.max_side_patches} per side; videos: "
                f"{rules.video.fps if rules.video else VIDEO_DEFAULTS['fps']} fps, chunks of "
                f"{rules.temporal_patch_size} frames, max {rules.video_max_patches} patches per frame")  # fmt: skip


KIMI_K25 = KimiK25Family()
