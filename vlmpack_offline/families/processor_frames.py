"""A video processor's own frame sampling, where its folder says ``do_sample_frames: true``.

transformers' video processors pick a video's frames themselves when their settings say
``do_sample_frames: true`` (``BaseVideoProcessor.preprocess`` calls ``sample_frames`` on each video's
``VideoMetadata``); the published InternVL-hf and llava-hf OneVision folders say ``false`` and take the
frames they are given (then vlmpack's shared sampler picks them). Where the folder says ``true`` (or
``model.processor_kwargs`` does: ``from_pretrained`` hands ``do_sample_frames`` / ``num_frames`` / ``fps`` /
``initial_shift`` to the video processor too, over the folder's), the scan takes exactly the frames that
processor would from ``VideoMetadata(total_num_frames=VideoInfo.n_frames, fps=VideoInfo.native_fps)``; the
loader decodes those and hands them over with ``do_sample_frames=False`` (``loader/media_processor.py``).

The rules, transformers 5.24, for a video of ``n`` frames at ``r`` frames per second::

    LLaVA-OneVision   BaseVideoProcessor.sample_frames (video_processing_utils.py; the class in
                      models/llava_onevision/video_processing_llava_onevision.py does not override it),
                      imported and called, not rewritten (video_utils.default_sample_indices_fn):
        num_frames N      k = N
        fps f             k = max(1, int(n / r * f))
        neither           every frame
        indices = arange(k) * n // k       k > n: refused;  both N and f: refused for every video
    InternVL          InternVLVideoProcessor.sample_frames (models/internvl/video_processing_internvl.py),
                      written out in ``internvl_indices`` (its module imports torchvision), the same torch calls:
        num_frames N      k = N   (fps is then not read)
        fps f             k = int(n / r * f)   (no floor of 1: k = 0 fails)
        neither           fails for every video
        shift = n / k / 2 (initial_shift true, the class default), else initial_shift (false: 0)
        indices = torch.arange(shift, n, n / k).int()       k > n: refused

    10 frames at 5 fps, fps 2      LLaVA-OneVision k = 4: 0 2 5 7     InternVL k = 4, shift 1.25: 1 3 6 8
     2 frames at 5 fps, fps 2      LLaVA-OneVision k = 1: 0           InternVL k = 0: refused (too short)
     5 frames, num_frames 8        refused by both (8 > 5)

A video the processor refuses is dropped as ``unsupported_media`` with the rule and the numbers; a folder
whose rule fails on every video (InternVL with neither ``fps`` nor ``num_frames``, LLaVA-OneVision with
both) is a ``ConfigError``. Under this sampling the ``video:`` section's frame and pixel fields are not read
(the folder's rule is the processor's): setting one is a ``ConfigError`` (``check_video_fields``), and
``video.sampler: qwen_vl_utils`` picks the shared sampler instead.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from ..errors import ConfigError
from ..reasons import DropError, Reason
from .base import first_setting

if TYPE_CHECKING:
    from ..config import VideoConfig
    from ..media import VideoInfo, VideoSampling

__all__ = ["FrameRule", "frame_rule", "internvl_indices", "check_video_fields"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameRule:
    """How a family's video processor samples frames itself (``do_sample_frames: true``)."""

    processor: str  # who samples, for messages: "InternVL", "LLaVA-OneVision"
    internvl: bool  # InternVLVideoProcessor.sample_frames (initial_shift, no floor of 1); else BaseVideoProcessor's
    num_frames: int | None  # frames per video (the folder's, or model.processor_kwargs')
    fps: float | None  # frames per second of video
    initial_shift: bool | float = True  # InternVL: the first frame's offset in frames (true: half a step)
    where: str  # where do_sample_frames: true comes from, for messages: "the folder", "model.processor_kwargs"

    def describe(self) -> str:
        """The rule in words (the scan's summary line)."""
        what = f"num_frames {self.num_frames}" if self.num_frames is not None else (
            f"fps {self.fps:g}" if self.fps is not None else "every frame")  # fmt: skip
        if self.num_frames is not None and self.fps is not None:  # InternVL: num_frames wins (LLaVA refuses both)
            what += f", its fps {self.fps:g} not read"
        return f"frames as the {self.processor} video processor samples them ({what}; do_sample_frames: true in {self.where})"

    def frames(self, n_frames: int, native_fps: float, *, part: str) -> tuple[int, ...]:
        """The frame indices the processor samples from a video of ``n_frames`` at ``native_fps``; raises
        ``DropError`` (``unsupported_media``) where the processor refuses the video."""
        why = f"do_sample_frames: true in {self.where}"
        if n_frames < 1 or not native_fps > 0:
            raise DropError(Reason.CORRUPT_MEDIA, f"{part}: {n_frames} frames at {native_fps} fps: no video to sample")
        if self.num_frames is not None and (self.internvl or self.fps is None):
            wanted, asked = self.num_frames, f"num_frames {self.num_frames}"
        elif self.fps is not None:
            wanted, asked = int(n_frames / native_fps * self.fps), f"fps {self.fps:g}"
            if not self.internvl:
                wanted = max(1, wanted)  # default_sample_indices_fn: at least one frame
            elif wanted == 0:  # InternVL divides by it
                raise DropError(Reason.UNSUPPORTED_MEDIA, (
                    f"{part}: the {self.processor} video processor samples {asked}: int({n_frames} / {native_fps:g} "
                    f"* {self.fps:g}) = 0 frames of this {n_frames / native_fps:.3f} s video, and fails on it "
                    f"({why}); a video this short needs fps >= {native_fps / n_frames:.3g}"))  # fmt: skip
        else:
            return tuple(range(n_frames))  # BaseVideoProcessor without num_frames or fps: every frame
        if wanted > n_frames:
            said = "" if asked.startswith("num_frames") else f" ({wanted} frames at {native_fps:g} fps)"
            raise DropError(Reason.UNSUPPORTED_MEDIA, (
                f"{part}: the {self.processor} video processor samples {asked}{said} but the video has {n_frames} "
                f"frames ({why}); lower it to keep such videos"))  # fmt: skip
        if self.internvl:
            indices = internvl_indices(n_frames, wanted, initial_shift=self.initial_shift)
        else:
            from transformers.video_processing_utils import BaseVideoProcessor
            from transformers.video_utils import VideoMetadata

            metadata = VideoMetadata(total_num_frames=n_frames, fps=native_fps, duration=n_frames / native_fps)
            host = SimpleNamespace(num_frames=self.num_frames, fps=self.fps)  # what the method reads of the processor
            indices = [int(i) for i in BaseVideoProcessor.sample_frames(host, metadata)]
        if not indices:  # an initial_shift past the last frame
            raise DropError(Reason.UNSUPPORTED_MEDIA, f"{part}: the {self.processor} video processor samples no frame "
                            f"from this {n_frames}-frame video (initial_shift {self.initial_shift}; {why})")  # fmt: skip
        return tuple(indices)

    def sampling(self, info: VideoInfo, *, tile: tuple[int, int], part: str) -> VideoSampling:
        """``frames`` as a ``VideoSampling`` at the ``tile`` size (the video processor resizes every frame to it)."""
        from ..media import VideoSampling

        return VideoSampling(
            frame_indices=self.frames(info.n_frames, info.native_fps, part=part), resized_height=tile[0],
            resized_width=tile[1], native_fps=info.native_fps, total_frames=info.n_frames,
        )  # fmt: skip


def internvl_indices(n_frames: int, num_frames: int, *, initial_shift: bool | float = True) -> list[int]:
    """``InternVLVideoProcessor.sample_frames``' indices for ``num_frames`` (1 .. ``n_frames``) frames: its
    own torch calls, so the float32 rounding of ``arange`` is the processor's."""
    import torch

    if initial_shift is True:
        initial_shift = n_frames / num_frames / 2
    return [int(i) for i in torch.arange(initial_shift, n_frames, n_frames / num_frames).int()]


def frame_rule(path: Path, kwargs: dict, *, processor: str, internvl: bool) -> FrameRule | None:
    """The video processor's own sampling rule when its settings (``model.processor_kwargs`` over the folder's
    video settings, as ``from_pretrained`` merges them) say ``do_sample_frames: true``; else None."""
    from ..tokens.rules import processor_settings  # the tokens package imports the families

    folder = processor_settings(path)[1]
    sources = (kwargs, folder)
    if first_setting(sources, "do_sample_frames") is not True:
        return None
    where = "model.processor_kwargs" if kwargs.get("do_sample_frames") is True else "the folder"
    num_frames, fps = first_setting(sources, "num_frames"), first_setting(sources, "fps")
    if num_frames is not None and (isinstance(num_frames, bool) or not isinstance(num_frames, int) or num_frames < 1):
        raise ConfigError(f"{path}: the {processor} video processor's num_frames is {num_frames!r}; it takes a "
                          "positive whole number of frames. Fix it in the folder or model.processor_kwargs")  # fmt: skip
    if fps is not None and (isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0):
        raise ConfigError(f"{path}: the {processor} video processor's fps is {fps!r}; it takes a positive number "
                          "of frames per second. Fix it in the folder or model.processor_kwargs")  # fmt: skip
    if not internvl and num_frames is not None and fps is not None:
        raise ConfigError(
            f"{path}: the {processor} video processor samples frames itself (do_sample_frames: true in {where}) "
            f"and has both num_frames {num_frames} and fps {fps}, which it refuses for every video (they are "
            "exclusive); keep one of them in the folder or model.processor_kwargs"
        )
    if internvl and num_frames is None and fps is None:
        raise ConfigError(
            f"{path}: the {processor} video processor samples frames itself (do_sample_frames: true in {where}) "
            "but has neither num_frames nor fps, and fails on every video; set one of them in the folder or "
            "model.processor_kwargs, or do_sample_frames: false to hand it the shared sampler's frames"
        )
    shift = first_setting(sources, "initial_shift") if internvl else None
    if shift is not None and not isinstance(shift, (bool, int, float)):
        raise ConfigError(f"{path}: the {processor} video processor's initial_shift is {shift!r}; it takes true, "
                          "false or a number of frames. Fix it in the folder or model.processor_kwargs")  # fmt: skip
    return FrameRule(
        processor=processor, internvl=internvl, num_frames=num_frames, fps=float(fps) if fps is not None else None,
        initial_shift=True if shift is None else shift, where=where,
    )  # fmt: skip


_READ = frozenset({"sampler", "reader"})  # what the processor's own sampling reads of video:


def check_video_fields(rule: FrameRule | None, video: VideoConfig, *, family: str, path: Path) -> None:
    """Refuse ``video:`` fields that would silently not apply: under the processor's own sampling every field
    but ``sampler`` / ``reader`` (the folder's rule is the processor's); ``sampler: hf_processor`` where the
    processor samples nothing itself."""
    if rule is None:
        if video.sampler == "hf_processor":
            raise ConfigError(
                f"video.sampler = 'hf_processor': the {family} video processor in {path} does not sample frames "
                "itself (its settings do not say do_sample_frames: true), so it takes the shared sampler's frames; "
                "remove video.sampler, or set do_sample_frames: true with fps or num_frames in the folder or "
                "model.processor_kwargs"
            )
        return
    if video.sampler == "qwen_vl_utils":  # the shared sampler, by choice: every frame field applies
        return
    ignored = [f.name for f in dataclasses.fields(video) if getattr(video, f.name) is not None and f.name not in _READ]
    if ignored:
        names, them = ", ".join(f"video.{name}" for name in ignored), "them" if len(ignored) > 1 else "it"
        raise ConfigError(
            f"{names}: {family} videos are sampled by its video processor itself, {rule.describe()}, which never "
            f"reads {them}; remove {them} (set fps or num_frames in the folder or model.processor_kwargs), or set "
            "video.sampler: qwen_vl_utils to use the shared sampler"
        )
