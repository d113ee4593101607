"""GLM-4.1V (``glm4v``), GLM-4.5V (``glm4v_moe``) and GLM-4.6V (``glm46v``): ``<|image|>`` grids, as in Qwen-VL.

Mirrors transformers' ``Glm4vProcessor`` (GLM-4.1V and GLM-4.5V: ``processing_glm4v.py``) and
``Glm46VProcessor`` (``processing_glm46v.py``) with their PIL image processors (``Glm4vImageProcessorPil``;
``Glm46VImageProcessorPil`` is the same code) and video processors (``Glm4vVideoProcessor``,
``Glm46VVideoProcessor``).

Images. The chat template renders ``<|begin_of_image|><|image|><|end_of_image|>`` per image; the
processor replaces the one ``<|image|>`` (the pad) by::

    <|image|> * (t * h * w / merge_size**2)     grid (1, H / patch, W / patch)
    (H, W) = smart_resize(num_frames=temporal_patch_size, h, w, temporal_factor=temporal_patch_size,
                          factor=patch * merge, min_pixels=size.shortest_edge, max_pixels=size.longest_edge)

``smart_resize`` is GLM's own (imported from transformers, not rewritten): unlike Qwen's it bounds
``temporal_patch_size * H * W`` (an image counts as two frames), scales tiny images up to the factor
first, and refuses aspect ratios over 200 (dropped here as ``unsupported_aspect``, where the processor
raises).

Videos. The template renders ``<|begin_of_video|><|video|><|end_of_video|>``; the processor replaces
the one ``<|video|>`` by one block per temporal patch ``i`` of the sampled frames::

    <|begin_of_image|> <|image|> * (h * w / merge_size**2) <|end_of_image|> {stamp_i}
    stamp_i = int(s_i)                 (GLM-4.1V / 4.5V: whole seconds, e.g. "3")
              f"{s_i:.1f} seconds"     (GLM-4.6V)
    s_i     = frames_indices[2 * i] / fps      (VideoMetadata.timestamps[::2])

The frames are the ones the family's video processor samples (``sample_frames`` from a
``VideoMetadata(total_num_frames, fps, duration=total_num_frames / fps)``, as transformers' video
loaders fill it), from the container's frame count and rate (``media.probe_video``)::

    GLM-4.1V / 4.5V   Glm4vVideoProcessor.sample_frames itself (models/glm4v/video_processing_glm4v.py,
                      torchvision-free): ``fps`` frames per second over videos up to ``max_duration``
                      (300 s), else max_duration * fps frames spread over the video; duplicates removed,
                      the last frame repeated to an even count
    GLM-4.6V          Glm46VVideoProcessor.sample_frames, written out below (its module imports
                      torchvision): 3 / 1 / 0.5 frames per second for videos up to 30 s / 300 s / longer,
                      at most 640 frames

and sized by GLM's ``smart_resize(num_frames=T, h, w)`` with the video processor's ``size`` bounding
``T * H * W``: ``VideoSampling.frame_indices`` / ``resized_*`` hold exactly these, and the loader hands
those frames (undecoded size) with their ``VideoMetadata`` to the real video processor
(``do_sample_frames=False``), which resizes them to the same size.
All of this runs without torchvision, so GLM videos are counted by the fast path in either environment.
``video.fps`` / ``min_pixels`` / ``max_pixels`` of the config, then ``model.processor_kwargs`` ``size`` /
``fps`` (``from_pretrained`` hands them to the video processor too), then the folder's video settings
(``fps``, ``size``, ``max_duration``), then the video processor's class defaults (fps 2, 300 s,
12544..47040000) apply as in the processor; ``min_frames`` / ``max_frames`` / ``total_pixels`` are not
read by GLM's processors, and GLM-4.6V ignores ``fps`` (its rates are fixed). A video GLM-4.6V samples no
frame from (under 1/6 s) is dropped as ``corrupt_media``: its processor fails on it.

Vision encoder (``Size.encoder_*``): an item's ``t * h * w`` patches (its rows of ``pixel_values`` /
``pixel_values_videos``; a video's ``t`` is its temporal patches, the last padded), attended in ``t`` blocks
of ``h * w``: ``Glm4vVisionModel.forward`` (``modeling_glm4v.py``; ``glm4v_moe`` and ``glm46v`` use it) takes
``cu_seqlens`` from ``vision_utils.get_vision_cu_seqlens`` (one block per temporal patch), and
``get_video_features`` hands it a video as ``t`` grids of ``[1, h, w]``.

Training: HF's GLM-4V forward finds video placeholders with the image token (``get_placeholder_mask``),
so one forward takes images or videos, not both; packs group by media type by default.

All the markers are special tokens, so the compact text is the rendered text; each stamp sits between
two special tokens and is tokenized alone.

Settings: ``patch_size`` / ``merge_size`` / ``temporal_patch_size`` and ``size`` (``shortest_edge`` /
``longest_edge`` in pixels) from ``model.processor_kwargs`` over the image settings (either layout),
else the image processor's defaults (14, 2, 2, 112*112 .. 28*28*15000). ``Glm4vImageProcessorPil``
reads the pixel bounds from ``size`` only, so top-level ``min_pixels`` / ``max_pixels`` (which Qwen's
processors take) are not read here. Positions: mRoPE from the model's ``get_rope_index``, where the
``<|image|>`` tokens between ``<|begin_of_video|>`` and ``<|end_of_video|>`` are video tokens.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

from ..config import VideoConfig
from ..errors import ConfigError
from ..hf_functions import hf_function
from ..reasons import DropError, Reason
from .base import Size, SpecialTokens, encoder_blocks, first_setting, tokenizer_token

if TYPE_CHECKING:
    from ..media import VideoInfo, VideoSampling
    from ..tokens.media_info import MediaInfo
    from ..tokens.rules import ModelRules

__all__ = ["GLM4V", "GLM46V", "Glm4vFamily", "glm4v_grid", "glm46v_sample_frames"]


@functools.cache
def _transformers() -> SimpleNamespace:
    """GLM-4V's image and video processors, imported on first use: their modules pull ``processing_utils``,
    ``modeling_utils`` and torch, which no other family's scan and no no-op rerun needs."""
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil
    from transformers.models.glm4v.video_processing_glm4v import Glm4vVideoProcessor

    return SimpleNamespace(image=Glm4vImageProcessorPil, video=Glm4vVideoProcessor)


def _smart_resize():
    """transformers' GLM-4V ``smart_resize``, compiled from its source without its module (``hf_functions.py``)."""
    return hf_function("transformers.models.glm4v.image_processing_pil_glm4v", "smart_resize")


def glm4v_grid(rules: ModelRules, height: int, width: int, *, part: str = "") -> tuple[int, int, int]:
    """The (t, h, w) patch grid ``Glm4vImageProcessorPil`` gives a ``height`` x ``width`` image."""
    try:
        resized_h, resized_w = _smart_resize()(
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


def glm46v_sample_frames(metadata, *, temporal_patch_size: int) -> np.ndarray:
    """``Glm46VVideoProcessor.sample_frames`` (transformers 5.x ``video_processing_glm46v.py``), line for line:
    its module imports torchvision at the top, so it cannot be imported without it. It reads no ``fps``."""
    total_frames = metadata.total_num_frames
    max_frame_idx = total_frames - 1
    duration = metadata.duration or round(max_frame_idx / metadata.fps) + 1
    dynamic_fps_thres = {30: 3, 300: 1, 2400: 0.5}
    max_frame_count_dynamic, max_duration = 640, 2400
    effective_duration = min(duration, max_duration)
    if effective_duration <= 30:
        target_fps = dynamic_fps_thres[30]
    elif effective_duration <= 300:
        target_fps = dynamic_fps_thres[300]
    else:
        target_fps = dynamic_fps_thres[2400]
    extract_t = int(effective_duration * target_fps * temporal_patch_size)
    extract_t = min(extract_t, max_frame_count_dynamic)
    duration_per_frame = 1 / metadata.fps
    timestamps = [i * duration_per_frame for i in range(total_frames)]
    max_second = int(duration)
    if total_frames < extract_t:
        frame_indices = np.linspace(0, total_frames - 1, extract_t, dtype=int).tolist()
    else:
        frame_indices = []
        current_second = 0
        inv_fps = 1 / (temporal_patch_size * target_fps)
        for frame_index in range(total_frames):
            if timestamps[frame_index] >= current_second:
                current_second += inv_fps
                frame_indices.append(frame_index)
                if current_second >= max_second:
                    break
    if len(frame_indices) < extract_t:
        if len(frame_indices) == 0:
            start, end = 0, max(total_frames - 1, 0)
        else:
            start, end = frame_indices[0], frame_indices[-1]
        frame_indices = np.linspace(start, end, extract_t, dtype=int).tolist()
    elif len(frame_indices) > extract_t:
        frame_indices = np.linspace(0, total_frames - 1, extract_t, dtype=int).tolist()
    seen, uniq = set(), []
    for idx in frame_indices:
        if idx not in seen:
            seen.add(idx)
            uniq.append(idx)
    if len(uniq) & 1:
        uniq.append(uniq[-1])
    return np.array(uniq, dtype=int)


def _size_bounds(path: Path, size, what: str) -> tuple[int, int]:
    if not (isinstance(size, dict) and isinstance(size.get("shortest_edge"), int)
            and isinstance(size.get("longest_edge"), int)):  # fmt: skip
        raise ConfigError(
            f"{path}: the GLM-4V {what} processor's size is {size!r}; it needs "
            '{"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS} (e.g. {"shortest_edge": 12544, '
            '"longest_edge": 9633792}). Fix size in the folder or model.processor_kwargs'
        )
    return size["shortest_edge"], size["longest_edge"]


class Glm4vFamily:
    """One GLM-V generation: ``stamp`` formats a frame block's seconds; ``glm46v`` picks GLM-4.6V's sampling."""

    takes_video = True
    positions = "mrope"
    # GLM's templates write nothing after an answer; the model ends its turn by emitting the next role token
    # (its generation config's eos_token_id: <|endoftext|>, <|user|>, <|observation|>)
    turn_end_tokens = ("<|user|>", "<|observation|>")

    def __init__(self, name: str, model_types: frozenset[str], *, glm46v: bool) -> None:
        self.name = name
        self.model_types = model_types
        self.glm46v = glm46v
        # the video: fields its sampler reads (GLM-4.6V's picks its own rate from the duration)
        self.video_fields = frozenset({"min_pixels", "max_pixels", "sampler"} | (set() if glm46v else {"fps"}))

    def stamp(self, seconds: float) -> str:
        """``replace_frame_token_id``'s text after a frame block's ``<|end_of_image|>``."""
        return f"{seconds:.1f} seconds" if self.glm46v else f"{int(seconds)}"

    def settings(self, path: Path, image: dict, kwargs: dict, processor: dict) -> dict:
        sources = (kwargs, image)
        Glm4vImageProcessorPil, Glm4vVideoProcessor = _transformers().image, _transformers().video  # noqa: N806
        settings = {}
        for name in ("patch_size", "merge_size", "temporal_patch_size"):
            value = first_setting(sources, name)
            settings[name] = int(value) if value is not None else int(getattr(Glm4vImageProcessorPil, name))
        size = first_setting(sources, "size")
        settings["min_pixels"], settings["max_pixels"] = _size_bounds(
            path, dict(Glm4vImageProcessorPil.size) if size is None else size, "image"
        )
        from ..tokens.rules import processor_settings  # the tokens package imports the families

        video = processor_settings(path)[1]
        for name in ("patch_size", "merge_size", "temporal_patch_size"):  # one vision tower for both
            if video.get(name) is not None and int(video[name]) != settings[name]:
                raise ConfigError(
                    f"{path}: the video processor's {name} is {video[name]}, the image processor's "
                    f"{settings[name]}; GLM-4V's vision tower takes one value for both"
                )
        settings["max_duration"] = int(video.get("max_duration") or Glm4vVideoProcessor.max_duration)
        return settings

    def video_defaults(self) -> VideoConfig:
        """The video processor's own defaults (``Glm4vVideoProcessor``; GLM-4.6V's class has the same),
        under the folder's video settings and the config's ``video:``."""
        Glm4vVideoProcessor = _transformers().video  # noqa: N806
        size = Glm4vVideoProcessor.size
        return VideoConfig(
            fps=float(Glm4vVideoProcessor.fps), min_pixels=size["shortest_edge"], max_pixels=size["longest_edge"],
            sampler="hf_processor",
        )  # fmt: skip

    def sample_video(self, rules: ModelRules, info: VideoInfo, video: VideoConfig, *, part: str) -> VideoSampling:
        """The frames and size the family's video processor gives this video (see the module doc)."""
        from transformers.video_utils import VideoMetadata

        from ..media import VideoSampling

        metadata = VideoMetadata(
            total_num_frames=info.n_frames, fps=info.native_fps, duration=info.n_frames / info.native_fps
        )
        if self.glm46v:
            indices = glm46v_sample_frames(metadata, temporal_patch_size=rules.temporal_patch_size)
        else:  # the real method: it reads self.fps (unless given) and self.max_duration only
            host = SimpleNamespace(fps=video.fps, max_duration=rules.max_duration)
            indices = _transformers().video.sample_frames(host, metadata, fps=video.fps)
        indices = [int(i) for i in indices]
        if not indices:  # GLM-4.6V under 1/6 s: its extract_t is 0 and the processor then fails
            raise DropError(Reason.CORRUPT_MEDIA, f"{part}: {self.name}'s video processor samples no frame from this "
                            f"{info.n_frames / info.native_fps:.3f} s video ({info.n_frames} frames at {info.native_fps} fps)")  # fmt: skip
        try:
            height, width = _smart_resize()(
                num_frames=len(indices), height=info.height, width=info.width,
                temporal_factor=rules.temporal_patch_size, factor=rules.factor,
                min_pixels=video.min_pixels, max_pixels=video.max_pixels,
            )  # fmt: skip
        except ValueError as exc:
            reason = Reason.UNSUPPORTED_ASPECT if "aspect" in str(exc) else Reason.CORRUPT_MEDIA
            raise DropError(reason, f"{part}: {exc} ({info.width}x{info.height}, {len(indices)} frames)") from None
        return VideoSampling(
            frame_indices=tuple(indices), resized_height=int(height), resized_width=int(width),
            native_fps=info.native_fps, total_frames=info.n_frames,
        )  # fmt: skip

    def special_tokens(self, tokenizer) -> SpecialTokens:
        return SpecialTokens(
            image_pad=tokenizer_token(tokenizer, "image_token", "<|image|>"),
            video_pad=tokenizer_token(tokenizer, "video_token", "<|video|>"),
            vision_start="<|begin_of_image|>",
            vision_end="<|end_of_image|>",
        )

    def compact_text(self, text: str, special: SpecialTokens) -> str:
        return text  # a pad expands to pads and special markers; the stamps tokenize alone between them

    def check(self, rules: ModelRules, media: MediaInfo, *, part: str) -> None:
        if media.kind == "image":
            glm4v_grid(rules, media.height, media.width, part=part)  # the 200:1 aspect limit, at probe time

    def _video_grid(self, rules: ModelRules, media: MediaInfo) -> tuple[int, int, int]:
        """The (t, h, w) patch grid the video processor gives this video (frames padded to temporal patches)."""
        s = media.sampling
        t = -(-s.n_frames // rules.temporal_patch_size)
        return t, s.resized_height // rules.patch_size, s.resized_width // rules.patch_size

    def _video_blocks(self, rules: ModelRules, media: MediaInfo) -> tuple[list[str], int]:
        """(the stamp of each temporal patch, image tokens per block), as ``replace_video_token`` makes them."""
        s = media.sampling
        grid_t, h, w = self._video_grid(rules, media)
        per_block = h * w // rules.merge_size**2
        seconds = [index / s.native_fps for index in s.frame_indices][::2][:grid_t]  # timestamps[::2]
        seconds += [seconds[-1] if seconds else 0] * (grid_t - len(seconds))
        return [self.stamp(value) for value in seconds], per_block

    def _tokens(self, rules: ModelRules, media: MediaInfo) -> int:
        t, h, w = glm4v_grid(rules, media.height, media.width)
        return t * h * w // rules.merge_size**2

    def replacement_text(self, rules: ModelRules, special: SpecialTokens, media: MediaInfo) -> str:
        if media.kind == "video":
            stamps, n = self._video_blocks(rules, media)
            return "".join(f"{special.vision_start}{special.image_pad * n}{special.vision_end}{s}" for s in stamps)
        return special.image_pad * self._tokens(rules, media)

    def replacement_size(self, rules: ModelRules, media: MediaInfo, count_text: Callable[[str], int]) -> Size:
        if media.kind == "video":
            t, h, w = self._video_grid(rules, media)
            stamps, n = self._video_blocks(rules, media)
            text = sum(count_text(s) for s in stamps)
            return Size(tokens=text + len(stamps) * (n + 2), media_tokens=len(stamps) * n, **encoder_blocks(t, h * w))
        t, h, w = glm4v_grid(rules, media.height, media.width)
        n = t * h * w // rules.merge_size**2
        return Size(tokens=n, media_tokens=n, **encoder_blocks(t, h * w))  # one block per temporal patch (module doc)

    def describe(self, rules: ModelRules) -> str:
        """How ``vlmpack scan`` names the count."""
        return (f"patch grid from headers: patch {rules.patch_size}, merge {rules.merge_size}, "
                f"{rules.temporal_patch_size} * pixels in {rules.min_pixels}..{rules.max_pixels}")  # fmt: skip


GLM4V = Glm4vFamily("glm4v", frozenset({"glm4v", "glm4v_moe"}), glm46v=False)  # Glm4vProcessor
GLM46V = Glm4vFamily("glm46v", frozenset({"glm46v"}), glm46v=True)  # Glm46VProcessor
