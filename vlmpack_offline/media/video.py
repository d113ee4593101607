"""Video container metadata and the one frame-sampling policy shared by scan and loader.

``sample_video`` follows qwen-vl-utils (``smart_nframes`` + ``fetch_video``), with
the numbers taken from the resolved ``video:`` settings (``tokens/rules.py``: config, then
processor folder, then the family recipe ``recipe_video(factor)``)::

    nframes = clamp(n_frames / native_fps * video.fps,
                    ceil2(video.min_frames), floor2(min(video.max_frames, n_frames)))
              rounded down to a multiple of the temporal factor (2)
    frame_indices = round(linspace(0, n_frames - 1, nframes))
    limit = max(min(768 * factor**2, video.total_pixels / nframes * 2), int(1.05 * min_pixels))
    per-frame pixels in [video.min_pixels, min(video.max_pixels, limit)]
        (fetch_video's order: its own frame limit first, the item's max_pixels only below it; a
         max_pixels above the limit is capped there, as qwen-vl-utils warns)
    (resized_height, resized_width) = transformers' smart_resize(h, w, factor=patch*merge, ...)

Scan counts tokens from the returned ``VideoSampling`` without decoding a pixel; the loader calls
``decode_frames`` with the same ``VideoSampling``, so both see the same frames at the same size.
The frame count, rate and size are those of ``video.reader`` (``video_meta``: torchcodec by default, the
reader transformers and qwen-vl-utils decode with). Frames are decoded by decord where it numbers the
frames as that reader does, else by PyAV (decord 0.6 also fails on some valid streams, e.g. 48x48 H.264).
"""

from __future__ import annotations

import functools
import io
import math
from dataclasses import dataclass

import numpy as np

from ..config import VideoConfig
from ..disk_cache import installed_fact
from ..hf_functions import hf_function
from ..reasons import DropError, Reason
from .video_meta import DEFAULT_READER, VideoInfo, checked, decord_reader, probe_video

__all__ = ["VideoInfo", "VideoSampling", "probe_video", "sample_video", "decode_frames", "recipe_video",
           "frame_pixel_limit", "VIDEO_MAX_TOKEN_NUM"]


@dataclass(frozen=True, slots=True, kw_only=True)
class VideoSampling:
    frame_indices: tuple[int, ...]  # frames to decode, ascending; len is a multiple of the temporal factor
    resized_height: int  # every sampled frame is resized to this height (multiple of patch*merge)
    resized_width: int  # ... and this width
    native_fps: float  # frame rate of the source, for timestamps (Qwen3-VL prompts)
    total_frames: int = 0  # frames in the source video (0 when unknown)
    rotation: int = 0  # the file's display rotation (VideoInfo.rotation): decode_frames decodes it with PyAV
    upright: bool = True  # whether the reader turns frames by it (torchcodec, decord; not pyav)

    @property
    def n_frames(self) -> int:
        return len(self.frame_indices)

    @property
    def sampled_fps(self) -> float:
        """Frames per second after sampling, as qwen-vl-utils / HF ``VideoMetadata.sampled_fps`` compute it."""
        return self.n_frames / max(self.total_frames, 1e-6) * self.native_fps

    @property
    def timestamps(self) -> tuple[float, ...]:
        """Seconds of each sampled frame in the source video."""
        return tuple(index / self.native_fps for index in self.frame_indices)


def recipe_video(factor: int) -> VideoConfig:
    """qwen-vl-utils' own video defaults (``fetch_video``) for a model whose patch * merge is ``factor``.

    factor 28 (Qwen2/2.5-VL): per-frame pixels 100352..602112, total 90316800;
    factor 32 (Qwen3-VL / Qwen3.5): 131072..786432, total 117964800.
    """
    return VideoConfig(
        fps=2.0,  # FPS
        min_frames=4,  # FPS_MIN_FRAMES
        max_frames=768,  # FPS_MAX_FRAMES
        min_pixels=128 * factor * factor,  # VIDEO_MIN_TOKEN_NUM * image_factor**2
        max_pixels=VIDEO_MAX_TOKEN_NUM * factor * factor,  # VIDEO_FRAME_MAX_PIXELS
        total_pixels=int(128000 * factor * factor * 0.9),  # MODEL_SEQ_LEN * image_factor**2 * 0.9
        sampler="qwen_vl_utils",
        cap_pixels_per_frame=installed_frame_cap_default(),
        max_video_tokens=VIDEO_MAX_TOKEN_NUM,
        reader=DEFAULT_READER,
    )


@functools.cache
def installed_frame_cap_default() -> bool:
    """Whether the installed transformers' Qwen3-VL video processor caps frames when its folder says nothing
    (a probe of the class default, not a version check: ``cap_pixels_per_frame`` None / absent means no cap), kept
    per install (``disk_cache.installed_fact``): the probe's import pulls torch."""
    return bool(installed_fact("Qwen3VLVideoProcessor.cap_pixels_per_frame", _probe_frame_cap))


def _probe_frame_cap() -> bool:
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    return bool(getattr(Qwen3VLVideoProcessor, "cap_pixels_per_frame", None))


def _filled(video: VideoConfig, factor: int) -> VideoConfig:
    """``video`` with its unset (None) fields taken from ``recipe_video(factor)``."""
    recipe = recipe_video(factor)
    return VideoConfig(
        **{
            name: getattr(video, name) if getattr(video, name) is not None else getattr(recipe, name)
            for name in VideoConfig.__dataclass_fields__
        }
    )


def _floor(number: float, factor: int) -> int:
    return math.floor(number / factor) * factor


def _ceil(number: float, factor: int) -> int:
    return math.ceil(number / factor) * factor


VIDEO_MAX_TOKEN_NUM = 768  # qwen-vl-utils vision_process.py: a frame's token limit


def frame_pixel_limit(video: VideoConfig, *, factor: int, nframes: int) -> float:
    """qwen-vl-utils' per-frame pixel limit for ``nframes`` frames (``fetch_video``, 0.0.14), before the
    item's ``max_pixels``: ``max(min(768 * factor**2, total_pixels / nframes * 2), int(1.05 * min_pixels))``."""
    frame_factor = 2  # FRAME_FACTOR
    return max(min(VIDEO_MAX_TOKEN_NUM * factor * factor, video.total_pixels / nframes * frame_factor),
               int(video.min_pixels * 1.05))  # fmt: skip


def sample_video(
    info: VideoInfo, video: VideoConfig, *, factor: int, temporal_factor: int = 2, part: str = "video"
) -> VideoSampling:
    """Which frames to take and the size to resize them to (qwen-vl-utils semantics, see module doc).

    ``factor`` is the model's patch_size * merge_size (28 for Qwen2.5-VL, 32 for Qwen3-VL);
    ``temporal_factor`` its temporal_patch_size. Unset (None) fields of ``video`` take the recipe's
    value for ``factor`` (``recipe_video``); pass ``ModelRules.video`` (or ``resolve_video``'s result) to
    also honour the processor folder's video settings. Raises ``DropError`` (``corrupt_media`` when
    too few frames, ``unsupported_aspect`` past 200:1).
    """
    info = checked(info, part)
    video = _filled(video, factor)  # resolved settings (ModelRules.video) pass through unchanged
    if video.sampler == "hf_processor":
        return _sample_hf_qwen3(info, video, factor=factor, temporal_factor=temporal_factor, part=part)
    total = info.n_frames
    min_frames = _ceil(video.min_frames, temporal_factor)
    max_frames = _floor(min(video.max_frames, total), temporal_factor)
    nframes = total / info.native_fps * video.fps
    nframes = _floor(min(max(nframes, min_frames), max_frames, total), temporal_factor)
    if not temporal_factor <= nframes <= total:
        raise DropError(
            Reason.CORRUPT_MEDIA,
            f"{part}: cannot sample {temporal_factor}..{total} frames from this video (got {nframes})",
        )
    # transformers' own, compiled from its source: its module pulls torch (hf_functions.py)
    smart_resize = hf_function("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl", "smart_resize")
    indices = np.linspace(0, total - 1, nframes).round().astype(np.int64)
    max_pixels = min(video.max_pixels, frame_pixel_limit(video, factor=factor, nframes=nframes))
    try:
        height, width = smart_resize(
            info.height, info.width, factor=factor, min_pixels=video.min_pixels, max_pixels=max_pixels
        )
    except ValueError as exc:
        raise DropError(Reason.UNSUPPORTED_ASPECT, f"{part}: {exc} ({info.width}x{info.height})") from None
    return VideoSampling(
        frame_indices=tuple(int(i) for i in indices),
        resized_height=int(height),
        resized_width=int(width),
        native_fps=info.native_fps,
        total_frames=total,
    )


def _sample_hf_qwen3(
    info: VideoInfo, video: VideoConfig, *, factor: int, temporal_factor: int, part: str
) -> VideoSampling:
    """``Qwen3VLVideoProcessor.sample_frames`` + ``resize`` + ``patchify``'s padding (transformers
    ``models/qwen3_vl/video_processing_qwen3_vl.py``), from metadata::

        n = min(max(int(n_frames / native_fps * fps), min_frames), max_frames, n_frames)
        frame_indices = round(linspace(0, n_frames - 1, n)), then the last one repeated up to a
                        multiple of temporal_factor (patchify pads with the last frame)
        (h, w) = qwen3_vl smart_resize(n, h, w): n * h * w within [min_pixels, max_pixels]
        with cap_pixels_per_frame: max_pixels = n * max(min(max_video_tokens * factor**2, max_pixels // n),
                                                        int(1.05 * min_pixels))
    """
    video_smart_resize = hf_function("transformers.models.qwen3_vl.video_processing_qwen3_vl", "smart_resize")

    total = info.n_frames
    nframes = int(total / info.native_fps * video.fps)
    nframes = min(max(nframes, video.min_frames), video.max_frames, total)
    indices = [int(i) for i in np.linspace(0, total - 1, nframes).round().astype(np.int64)]
    max_pixels = video.max_pixels
    if video.cap_pixels_per_frame and nframes > 0:  # Qwen3VLVideoProcessor.resize, cap_pixels_per_frame=True
        per_frame = max(min(video.max_video_tokens * factor * factor, video.max_pixels // nframes),
                        int(video.min_pixels * 1.05))  # fmt: skip
        max_pixels = per_frame * nframes
    try:
        height, width = video_smart_resize(
            num_frames=nframes, height=info.height, width=info.width, temporal_factor=temporal_factor,
            factor=factor, min_pixels=video.min_pixels, max_pixels=max_pixels,
        )  # fmt: skip
    except ValueError as exc:  # too few frames, or past 200:1
        reason = Reason.UNSUPPORTED_ASPECT if "aspect" in str(exc) else Reason.CORRUPT_MEDIA
        raise DropError(reason, f"{part}: {exc} ({info.width}x{info.height}, {nframes} frames)") from None
    indices += [indices[-1]] * (-len(indices) % temporal_factor)
    return VideoSampling(
        frame_indices=tuple(indices),
        resized_height=int(height),
        resized_width=int(width),
        native_fps=info.native_fps,
        total_frames=total,
    )


def decode_frames(data: bytes, sampling: VideoSampling, *, resize: bool = True) -> np.ndarray:
    """The sampled frames as uint8 ``[T, H, W, 3]`` RGB, resized (PIL bicubic) to the sampling's size.

    Frame ``i`` is the ``i``-th in presentation order, as every reader numbers them. decord decodes when it
    opens the bytes, decodes them and counts the frames the sampling was made from (then its frame ``i`` is
    the reader's); otherwise PyAV decodes in presentation order (a variable-frame-rate or damaged container
    decord counts differently, a stream decord cannot decode).
    A file with a display rotation is decoded by PyAV (decord 0.6 turns 90-degree ones into 4-channel arrays) and
    turned as the reader turns it: counter-clockwise by the rotation for torchcodec and decord, as coded for pyav.
    """
    if sampling.rotation:
        frames = _decode_pyav(data, sampling.frame_indices)
        if sampling.upright:
            frames = np.ascontiguousarray(np.rot90(frames, k=sampling.rotation // 90, axes=(1, 2)))
        return _resized(frames, sampling) if resize else frames
    try:
        reader = decord_reader(data)
        if sampling.total_frames and len(reader) != sampling.total_frames:
            raise ValueError("decord numbers this video's frames differently")
        frames = reader.get_batch(list(sampling.frame_indices)).asnumpy()
    except Exception:
        frames = _decode_pyav(data, sampling.frame_indices)
    return _resized(frames, sampling) if resize else frames


def _resized(frames: np.ndarray, sampling: VideoSampling) -> np.ndarray:
    from PIL import Image

    size = (sampling.resized_width, sampling.resized_height)
    return np.stack(
        [np.asarray(Image.fromarray(frame).resize(size, Image.Resampling.BICUBIC)) for frame in frames]
    )


def _decode_pyav(data: bytes, indices: tuple[int, ...]) -> np.ndarray:
    import av

    wanted: dict[int, int] = {}
    for index in indices:
        wanted[index] = wanted.get(index, 0) + 1
    out = []
    with av.open(io.BytesIO(data)) as container:
        for position, frame in enumerate(container.decode(video=0)):
            if position in wanted:
                array = frame.to_ndarray(format="rgb24")
                out.extend([array] * wanted[position])
            if position >= indices[-1]:
                break
    if len(out) != len(indices):
        raise DropError(
            Reason.CORRUPT_MEDIA, f"video has fewer frames than probed ({len(out)} of {len(indices)} decoded)"
        )
    return np.stack(out)
