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

Families without a module (the slow path, ``tokens/slow.py``) sample as their loaded processor does
(``processor_rule``): its video processor's own ``sample_frames``, called as ``VideoProcessorMixin.preprocess``
calls it (tf/video_processing_utils.py: every ``valid_kwargs`` key, the instance's value unless the call
passes one), with the ``videos_kwargs`` the processor's ``__call__`` passes (``ProcessorMixin._merge_kwargs``,
tf/processing_utils.py: the processor class's own ``videos_kwargs`` over the video processor's saved
settings), on a ``VideoMetadata`` of the reader's numbers. Where the merged ``do_sample_frames`` is false
(Qwen2VLVideoProcessor's default: the omni models) it takes every frame. Frames keep their decoded size:
the processor resizes them itself. Measured rules, transformers 5.24 defaults::

    Gemma4VideoProcessor      num_frames 32: arange(32) * n // 32; refuses n < 32
    Glm5NextVideoProcessor    one frame per 1/fps s (fps 2), at most 2048, duplicates dropped, even count
    Molmo2VideoProcessor      64 frames, at most duration * max_fps (2) when faster; arange(0, n, n / k)
    Ernie4_5_VLMoe...         every frame, 16 .. 180 of them
    Qwen3VLVideoProcessor     (lfm3_vl) fps 2, 4 .. 768 frames, linspace
    Qwen2VLVideoProcessor     (qwen3_omni_moe, qwen2_5_omni) do_sample_frames false: every frame
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..reasons import DropError, Reason
from .base import first_setting

if TYPE_CHECKING:
    from ..config import VideoConfig
    from ..media import VideoInfo, VideoSampling

__all__ = ["FrameRule", "frame_rule", "processor_rule", "internvl_indices", "check_video_fields",
           "check_processor_video_fields"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FrameRule:
    """How a family's video processor samples frames itself (``do_sample_frames: true``)."""

    processor: str  # who samples, for messages: "InternVL", "LLaVA-OneVision", "Gemma4VideoProcessor"
    internvl: bool = False  # InternVLVideoProcessor.sample_frames (initial_shift, no floor of 1); else BaseVideoProcessor's
    num_frames: int | None  # frames per video (the folder's, or model.processor_kwargs')
    fps: float | None  # frames per second of video
    initial_shift: bool | float = True  # InternVL: the first frame's offset in frames (true: half a step)
    where: str  # where do_sample_frames comes from, for messages: "the folder", "model.processor_kwargs"
    own: Callable[..., Any] | None = None  # processor_rule: a loaded video processor's sample_frames with the keywords
    # its processor's call hands it (then num_frames / fps above are for messages only); None: the rules written out
    reads: tuple[tuple[str, Any], ...] = ()  # processor_rule: the settings its sample_frames takes by name, for messages
    samples: bool = True  # do_sample_frames; false (processor_rule only): the processor takes every frame it is given

    def describe(self) -> str:
        """The rule in words (the scan's summary line)."""
        if not self.samples:
            return f"every frame, as {self.processor} takes them (do_sample_frames: false in {self.where})"
        if self.own is not None:
            what = ", ".join(f"{name} {value:g}" if isinstance(value, float) else f"{name} {value}"
                             for name, value in self.reads if value is not None) or "its defaults"  # fmt: skip
            return f"frames as {self.processor}.sample_frames picks them ({what}; do_sample_frames: true in {self.where})"
        what = f"num_frames {self.num_frames}" if self.num_frames is not None else (
            f"fps {self.fps:g}" if self.fps is not None else "every frame")  # fmt: skip
        if self.num_frames is not None and self.fps is not None:  # InternVL: num_frames wins (LLaVA refuses both)
            what += f", its fps {self.fps:g} not read"
        return f"frames as the {self.processor} video processor samples them ({what}; do_sample_frames: true in {self.where})"

    def frames(self, n_frames: int, native_fps: float, *, part: str, backend: str | None = None,
               size: tuple[int, int] | None = None) -> tuple[int, ...]:
        """The frame indices the processor samples from a video of ``n_frames`` at ``native_fps``; raises
        ``DropError`` (``unsupported_media``) where the processor refuses the video. ``backend`` and ``size``
        (height, width): the reader's, for a processor's own ``sample_frames`` (``VideoMetadata`` carries them)."""
        why = f"do_sample_frames: true in {self.where}"
        if n_frames < 1 or not native_fps > 0:
            raise DropError(Reason.CORRUPT_MEDIA, f"{part}: {n_frames} frames at {native_fps} fps: no video to sample")
        if not self.samples:
            return tuple(range(n_frames))
        if self.own is not None:
            return self._own_frames(n_frames, native_fps, part=part, backend=backend, size=size)
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

    def _own_frames(self, n_frames: int, native_fps: float, *, part: str, backend: str | None,
                    size: tuple[int, int] | None) -> tuple[int, ...]:
        """``own`` on the ``VideoMetadata`` transformers' readers build (duration = frames / rate)."""
        from transformers.video_utils import VideoMetadata

        height, width = size if size is not None else (None, None)
        metadata = VideoMetadata(total_num_frames=n_frames, fps=native_fps, duration=n_frames / native_fps,
                                 width=width, height=height, video_backend=backend)  # fmt: skip
        try:
            indices = [int(i) for i in self.own(metadata=metadata)]
        except Exception as exc:  # noqa: BLE001 - the processor's own refusal (ValueError mostly), named below
            text = " ".join(str(exc).split()) or type(exc).__name__
            raise DropError(Reason.UNSUPPORTED_MEDIA, (
                f"{part}: {self.describe()} refuses this video of {n_frames} frames at {native_fps:g} fps "
                f"({n_frames / native_fps:.3f} s): {type(exc).__name__}: {text}")) from None  # fmt: skip
        if not indices:
            raise DropError(Reason.UNSUPPORTED_MEDIA, f"{part}: {self.describe()} picks no frame of this video of "
                            f"{n_frames} frames at {native_fps:g} fps")  # fmt: skip
        if min(indices) < 0 or max(indices) >= n_frames:
            raise DropError(Reason.UNSUPPORTED_MEDIA, f"{part}: {self.describe()} picks frame {max(indices)} "
                            f"of this video of {n_frames} frames at {native_fps:g} fps, which has none such")  # fmt: skip
        return tuple(indices)

    def sampling(self, info: VideoInfo, *, tile: tuple[int, int] | None, part: str) -> VideoSampling:
        """``frames`` as a ``VideoSampling`` at the ``tile`` size (the video processor resizes every frame to it);
        ``tile`` None: at the size the reader decodes (the processor resizes them itself: ``processor_rule``)."""
        from ..media import VideoSampling

        height, width = tile if tile is not None else (info.height, info.width)
        return VideoSampling(
            frame_indices=self.frames(info.n_frames, info.native_fps, part=part, backend=info.backend,
                                      size=(info.height, info.width)),
            resized_height=height, resized_width=width, native_fps=info.native_fps, total_frames=info.n_frames,
            rotation=info.rotation, upright=info.upright,
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


def processor_rule(processor, *, path: Path | str, kwargs: dict) -> FrameRule | None:
    """How a loaded HF ``processor`` takes each video's frames (module doc: the slow path's rule); None where it has
    no video processor. ``kwargs``: ``model.processor_kwargs`` (``from_pretrained`` already handed them to the
    video processor; here they only say where ``do_sample_frames`` came from). A rule that refuses every video
    (``num_frames`` and ``fps`` both set for ``BaseVideoProcessor.sample_frames``) is a ``ConfigError``."""
    from ..tokens.rules import processor_settings  # the tokens package imports the families

    video_processor = getattr(processor, "video_processor", None)
    if video_processor is None:
        return None
    tokenizer = getattr(processor, "tokenizer", None)
    merged = processor._merge_kwargs(tokenizer_init_kwargs=getattr(tokenizer, "init_kwargs", {}))["videos_kwargs"]
    settings = {name: getattr(video_processor, name, None) for name in video_processor.valid_kwargs.__annotations__}
    settings.update(merged)  # preprocess: the call's keywords, else the instance's (setdefault)
    samples = bool(settings.pop("do_sample_frames", None))
    settings.pop("video_metadata", None)
    name = getattr(video_processor, "stands_for", None) or type(video_processor).__name__  # video_rules.py's stand-ins
    if "do_sample_frames" in kwargs:
        where = "model.processor_kwargs"
    elif "do_sample_frames" in (getattr(type(processor), "videos_kwargs", None) or {}):
        where = f"{type(processor).__name__}.videos_kwargs"
    elif "do_sample_frames" in processor_settings(Path(path))[1]:
        where = "the folder"
    else:
        where = f"{name}'s defaults"
    if not samples:
        return FrameRule(processor=name, num_frames=None, fps=None, where=where, samples=False)
    parameters = inspect.signature(video_processor.sample_frames).parameters.values()
    reads = tuple((p.name, settings.get(p.name)) for p in parameters
                  if p.name != "metadata" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))  # fmt: skip
    rule = FrameRule(
        processor=name, num_frames=settings.get("num_frames"), fps=settings.get("fps"), where=where,
        own=functools.partial(video_processor.sample_frames, **settings), reads=reads,
    )  # fmt: skip
    _check_some_video_passes(rule, path)
    return rule


# a clip of 10 s and one of an hour, at 30 fps: a rule that refuses both refuses (nearly) every video
_TRIAL_VIDEOS = ((300, 30.0), (108_000, 30.0))


def _check_some_video_passes(rule: FrameRule, path: Path | str) -> None:
    refusals = []
    for n_frames, fps in _TRIAL_VIDEOS:
        try:
            rule.frames(n_frames, fps, part="video")
            return
        except DropError as exc:
            refusals.append(str(exc))
    raise ConfigError(f"{path}: the video processor refuses a {_TRIAL_VIDEOS[0][0] / _TRIAL_VIDEOS[0][1]:g} s and a "
                      f"{_TRIAL_VIDEOS[1][0] / _TRIAL_VIDEOS[1][1]:g} s video alike, so it would refuse every video "
                      f"({refusals[0].removeprefix('video: ')}); fix its settings in the folder or "
                      "model.processor_kwargs, or set video.sampler: qwen_vl_utils to use the shared sampler")  # fmt: skip


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
    _refuse_unread(video, family=family, how=rule.describe())


def check_processor_video_fields(video: VideoConfig, *, model_type: str, rule: FrameRule | None = None) -> None:
    """The slow path's ``check_video_fields``: its videos are sampled by the processor's own rule
    (``processor_rule``), or dropped where it has no video processor, so no ``video:`` field but ``reader``
    (and ``sampler: hf_processor``, which names that rule) applies; the shared sampler is not offered (the
    generic path's frames are the processor's too, and a folder may take either path). Called at config time
    (``rules.load_model_rules``, before the processor is loaded) and with the loaded ``rule`` (its words)."""
    how = rule.describe() if rule is not None else (
        "its own sample_frames with its folder's settings and model.processor_kwargs")  # fmt: skip
    if video.sampler == "qwen_vl_utils":
        raise ConfigError(f"video.sampler = 'qwen_vl_utils': {model_type} has no family module, so its videos are "
                          f"sampled as its processor samples them ({how}); remove video.sampler and set the "
                          "frame settings in the processor folder or model.processor_kwargs")  # fmt: skip
    _refuse_unread(video, family=model_type, how=how, shared=False)


def _refuse_unread(video: VideoConfig, *, family: str, how: str, shared: bool = True) -> None:
    if video.sampler == "qwen_vl_utils":  # the shared sampler, by choice: every frame field applies
        return
    ignored = [f.name for f in dataclasses.fields(video) if getattr(video, f.name) is not None and f.name not in _READ]
    if ignored:
        names, them = ", ".join(f"video.{name}" for name in ignored), "them" if len(ignored) > 1 else "it"
        raise ConfigError(
            f"{names}: {family} videos are sampled by its video processor itself, {how}, which never "
            f"reads {them}; remove {them} (set fps or num_frames in the folder or model.processor_kwargs)"
            + (", or set video.sampler: qwen_vl_utils to use the shared sampler" if shared else "")
        )
