"""Written-out video rules for the video processors whose modules do not import without torchvision.

The generic path (``generic.py``) needs two things of a video processor: which frames it samples
(``sample_frames``) and how many patches a video of ``n`` frames of ``h x w`` becomes
(``get_num_of_video_patches``, or the attributes the processor's ``_get_num_multimodal_tokens`` reads). Four
processors the 2026 flagships use keep those in modules that import torchvision at the top (or, for Gemma4,
evaluate a torchvision annotation at class creation), so without torchvision there is no class to call. Each
stand-in here holds the class's defaults (overlaid by the folder's settings and ``model.processor_kwargs``, as
``from_pretrained`` and ``_set_attributes`` overlay them) and the two rules, reusing what transformers lets
import (``BaseVideoProcessor.sample_frames``, the PIL modules' identical ``smart_resize``), the rest written out
from the cited file (transformers 5.24)::

    Gemma4VideoProcessor        models/gemma4/video_processing_gemma4.py: BaseVideoProcessor.sample_frames
                                (num_frames 32: arange(32) * n // 32, refuses n < 32); per-frame soft tokens
                                through Gemma4Processor._get_num_multimodal_tokens (patch 16, pooling 3, 70)
    Qwen2VLVideoProcessor       models/qwen2_vl/video_processing_qwen2_vl.py (qwen2_5_omni, qwen3_omni_moe,
                                exaone4_5, hyperclovax_vision_v2): sample_frames; the resize of _preprocess
                                (smart_resize per frame, cap_pixels_per_frame's even share of max_video_tokens)
    Glm5NextVideoProcessor      models/glm5_next/video_processing_glm5_next.py: sample_frames (one frame per
                                1/fps s, <= max_frames, duplicates dropped, even count); get_num_of_video_patches
    Ernie4_5_VLMoeVideoProcessor models/ernie4_5_vl_moe/video_processing_ernie4_5_vl_moe.py: sample_frames (every
                                frame, min_frames .. max_frames); get_num_of_video_patches

A stand-in is used whenever the folder names one of these classes, with torchvision or without, so the code the
scan runs is the same in both environments; the suite checks each stand-in against the real class in the
torchvision environment (frames and patch counts over a grid of videos and settings), and the proof at folder
load checks the whole replacement where the real processor runs. A folder setting a stand-in does not model
(``do_resize: false`` ...) is refused, so it falls back to the slow path instead of a wrong count.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, TypedDict

__all__ = ["STAND_INS", "stand_in_for", "WrittenVideoRule"]

# Settings that change pixel values, not which frames or how many tokens: any value is followed.
_PIXELS_ONLY = frozenset({
    "image_mean", "image_std", "do_rescale", "rescale_factor", "do_normalize", "do_convert_rgb", "resample",
    "return_metadata", "data_format", "input_data_format", "device", "return_tensors", "video_metadata",
    "default_to_square", "video_processor_type", "processor_class", "font", "draw_on_frames",
})  # fmt: skip


class WrittenVideoRule:
    """A video processor's settings and counting rules, for a class whose module needs torchvision."""

    stands_for: ClassVar[str]  # the transformers class
    upstream: ClassVar[str]  # its file, for messages and citations
    defaults: ClassVar[dict[str, Any]]  # its class defaults for every keyword it takes beyond pixel values
    extra_kwargs: ClassVar[dict[str, type]]  # its valid_kwargs beyond transformers' VideosKwargs
    model_input_names: ClassVar[list[str]] = ["pixel_values_videos"]
    valid_kwargs: ClassVar[type]

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        from transformers.processing_utils import VideosKwargs

        # the keywords the processor's _merge_kwargs routes to it (it reads valid_kwargs.__annotations__)
        cls.valid_kwargs = TypedDict(f"{cls.stands_for}Kwargs", {**VideosKwargs.__annotations__, **cls.extra_kwargs},
                                     total=False)  # fmt: skip

    def __init__(self, settings: dict[str, Any]) -> None:
        for name in self.valid_kwargs.__annotations__:  # _set_attributes: a value that is not None, else the default
            value = settings.get(name)
            setattr(self, name, value if value is not None else self.defaults.get(name))
        unmodeled = sorted(name for name, value in settings.items() if name not in _PIXELS_ONLY and value is not None
                           and name not in self.defaults and name in self.valid_kwargs.__annotations__)  # fmt: skip
        if unmodeled:
            raise ValueError(f"{self.stands_for} setting(s) {unmodeled} are not in vlmpack's written-out rule "
                             f"({self.upstream})")  # fmt: skip
        if self.do_resize is False:
            raise ValueError(f"{self.stands_for} with do_resize: false is not in vlmpack's written-out rule")

    @classmethod
    def from_folder(cls, path, processor_kwargs: dict) -> WrittenVideoRule:
        """As ``from_pretrained`` builds the class: the folder's video settings where transformers looks for them
        (``processor_parts.video_settings``), then the ``model.processor_kwargs`` its ``valid_kwargs`` name
        (``from_dict``)."""
        from ..tokens.processor_parts import video_settings  # the tokens package imports the families

        settings = dict(video_settings(path))
        settings.update({k: v for k, v in processor_kwargs.items() if k in cls.valid_kwargs.__annotations__})
        return cls(cls.standardize(settings))

    @classmethod
    def standardize(cls, settings: dict) -> dict:
        return settings

    def sample_frames(self, metadata, **kwargs):  # pragma: no cover - every stand-in defines its own
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(stands for {self.stands_for})"


class Gemma4VideoRule(WrittenVideoRule):
    stands_for = "Gemma4VideoProcessor"
    upstream = "transformers/models/gemma4/video_processing_gemma4.py"
    defaults = {"do_resize": True, "size": None, "do_sample_frames": True, "num_frames": 32, "fps": None,
                "patch_size": 16, "max_soft_tokens": 70, "pooling_kernel_size": 3}  # fmt: skip
    extra_kwargs = {"patch_size": int, "max_soft_tokens": int, "pooling_kernel_size": int}
    model_input_names = ["pixel_values_videos", "video_position_ids", "num_frames_per_video"]

    def __init__(self, settings: dict[str, Any]) -> None:
        super().__init__(settings)
        from transformers.models.gemma4.image_processing_pil_gemma4 import _SUPPORTED_SOFT_TOKENS

        if self.max_soft_tokens not in _SUPPORTED_SOFT_TOKENS:  # Gemma4VideoProcessor.__init__ refuses it too
            raise ValueError(f"`max_soft_tokens` must be one of {_SUPPORTED_SOFT_TOKENS}, got {self.max_soft_tokens}.")

    def sample_frames(self, metadata, num_frames: int | None = None, fps: float | None = None, **kwargs):
        """The class does not override it: ``BaseVideoProcessor.sample_frames``, imported and called."""
        from transformers.video_processing_utils import BaseVideoProcessor

        return BaseVideoProcessor.sample_frames(self, metadata, num_frames=num_frames, fps=fps, **kwargs)


class Qwen2VLVideoRule(WrittenVideoRule):
    stands_for = "Qwen2VLVideoProcessor"
    upstream = "transformers/models/qwen2_vl/video_processing_qwen2_vl.py"
    defaults = {"do_resize": True, "size": {"shortest_edge": 128 * 28 * 28, "longest_edge": 28 * 28 * 768},
                "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2, "min_frames": 4, "max_frames": 768,
                "do_sample_frames": False, "cap_pixels_per_frame": None, "max_video_tokens": 128000,
                "num_frames": None, "fps": None, "min_pixels": None, "max_pixels": None}  # fmt: skip
    extra_kwargs = {"min_pixels": int, "max_pixels": int, "patch_size": int, "temporal_patch_size": int,
                    "merge_size": int, "min_frames": int, "max_frames": int, "cap_pixels_per_frame": bool,
                    "max_video_tokens": int}  # fmt: skip
    model_input_names = ["pixel_values_videos", "video_grid_thw"]

    @classmethod
    def standardize(cls, settings: dict) -> dict:
        """``__init__``: min_pixels / max_pixels given are written into ``size`` (shortest / longest edge)."""
        size = dict(settings.get("size") or cls.defaults["size"])
        if settings.get("min_pixels") is not None:
            size["shortest_edge"] = settings.pop("min_pixels")
        if settings.get("max_pixels") is not None:
            size["longest_edge"] = settings.pop("max_pixels")
        return {**settings, "size": size}

    def sample_frames(self, metadata, temporal_patch_size=None, min_frames=None, max_frames=None, num_frames=None,
                      fps=None, **kwargs):  # fmt: skip
        """``Qwen2VLVideoProcessor.sample_frames``: ``num_frames`` rounded to the temporal patch, or ``fps`` frames a
        second clamped to [min_frames, min(max_frames, n)] and floored to the temporal patch; more than ``n``
        is refused; indices ``torch.arange(0, n, n / k).int()``; neither: every frame."""
        import torch

        if fps is not None and num_frames is not None:
            raise ValueError("`num_frames` and `fps` are mutually exclusive arguments, please use only one!")
        num_frames = num_frames if num_frames is not None else self.num_frames
        fps = fps if fps is not None else self.fps
        temporal = temporal_patch_size if temporal_patch_size is not None else self.temporal_patch_size
        min_frames = min_frames if min_frames is not None else self.min_frames
        max_frames = max_frames if max_frames is not None else self.max_frames
        total = metadata.total_num_frames
        if num_frames is not None:
            num_frames = round(num_frames / temporal) * temporal
        elif fps is not None:
            if metadata.fps is None:
                raise ValueError("Asked to sample `fps` frames per second but no video metadata was provided")
            max_frames = math.floor(min(max_frames, total) / temporal) * temporal
            num_frames = min(max(total / metadata.fps * fps, min_frames), max_frames, total)
            num_frames = math.floor(num_frames / temporal) * temporal
        if num_frames is not None and num_frames > total:
            raise ValueError(f"Video can't be sampled. The inferred `num_frames={num_frames}` exceeds "
                             f"`total_num_frames={total}`. Decrease `num_frames` or `fps` for sampling.")  # fmt: skip
        if num_frames is None:
            return torch.arange(0, total).int()
        return torch.arange(0, total, total / num_frames).int()

    def get_num_of_video_patches(self, num_frames: int, height: int, width: int, videos_kwargs=None) -> int:
        """The grid ``_preprocess`` gives: every frame resized by ``smart_resize`` (factor patch * merge, the
        ``size`` edges), ``max_pixels`` lowered to an even share of ``max_video_tokens`` with
        ``cap_pixels_per_frame`` (its ``resize``); t = frames rounded up to the temporal patch."""
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

        kwargs = videos_kwargs or {}
        size = kwargs.get("size") or self.size
        patch = kwargs.get("patch_size") or self.patch_size
        merge = kwargs.get("merge_size") or self.merge_size
        temporal = kwargs.get("temporal_patch_size") or self.temporal_patch_size
        cap = kwargs.get("cap_pixels_per_frame", self.cap_pixels_per_frame)
        factor = patch * merge
        max_pixels = size["longest_edge"]
        if cap:
            total_pixels = int(self.max_video_tokens * factor * factor * 0.9)
            max_pixels = max(min(max_pixels, total_pixels * temporal // num_frames), int(size["shortest_edge"] * 1.05))
        resized_h, resized_w = smart_resize(height, width, factor, min_pixels=size["shortest_edge"], max_pixels=max_pixels)
        grid_t = (num_frames + -num_frames % temporal) // temporal
        return grid_t * (resized_h // patch) * (resized_w // patch)


class Glm5NextVideoRule(WrittenVideoRule):
    stands_for = "Glm5NextVideoProcessor"
    upstream = "transformers/models/glm5_next/video_processing_glm5_next.py"
    defaults = {"do_resize": True, "size": {"longest_edge": 1}, "max_image_size": {"longest_edge": 28 * 28 * 2 * 30000},
                "do_sample_frames": True, "patch_size": 14, "temporal_patch_size": 2, "max_duration": 0,
                "merge_size": 2, "num_frames": 16, "fps": 2, "patch_expand_factor": 1, "max_frames": 2048,
                "min_image_tokens": 16, "max_image_tokens": 240000}  # fmt: skip
    extra_kwargs = {"max_image_size": dict, "patch_size": int, "temporal_patch_size": int, "merge_size": int,
                    "patch_expand_factor": int, "max_frames": int, "min_image_tokens": int, "max_image_tokens": int}
    model_input_names = ["pixel_values_videos", "video_grid_thw"]

    def __init__(self, settings: dict[str, Any]) -> None:
        super().__init__(settings)
        self.max_duration = self.defaults["max_duration"]  # a class attribute, not a keyword: never set by a folder

    def sample_frames(self, metadata, fps: float | None = None, **kwargs):
        """``Glm5NextVideoProcessor.sample_frames``: ``extract_t = min(int(duration * fps), max_frames)`` (duration
        capped by ``max_duration`` when set); one frame each time the frame timestamps pass the next 1/fps s, up
        to ``int(duration)`` s; linspace-filled when short, linspace over the video when long or when the video
        has fewer frames than ``extract_t``; duplicates dropped; the last repeated to an even count."""
        import numpy as np

        if metadata is None or getattr(metadata, "fps", None) is None:
            raise ValueError("Asked to sample frames per second but no video metadata was provided which is required "
                             "when sampling in Glm5Next")  # fmt: skip
        total = metadata.total_num_frames
        duration = metadata.duration or round((total - 1) / metadata.fps) + 1
        max_seconds = int(duration)
        duration = duration if self.max_duration <= 0 else min(duration, self.max_duration)
        target_fps = fps if fps is not None else self.fps
        extract_t = min(int(duration * target_fps), self.max_frames)
        stamps = [i / metadata.fps for i in range(total)]
        if total < extract_t:
            indices = np.linspace(0, total - 1, extract_t, dtype=int).tolist()
        else:
            indices, second, step = [], 0, 1 / target_fps
            for index in range(total):
                if stamps[index] >= second:
                    second += step
                    indices.append(index)
                    if second >= max_seconds:
                        break
        if len(indices) < extract_t:
            start, end = (indices[0], indices[-1]) if indices else (0, max(total - 1, 0))
            indices = np.linspace(start, end, extract_t, dtype=int).tolist()
        elif len(indices) > extract_t:
            indices = np.linspace(0, total - 1, extract_t, dtype=int).tolist()
        unique = list(dict.fromkeys(indices))
        if len(unique) & 1:
            unique.append(unique[-1])
        return np.array(unique, dtype=int)

    def get_num_of_video_patches(self, num_frames: int, height: int, width: int, videos_kwargs=None) -> int:
        """``get_num_of_video_patches``: GLM's spatio-temporal ``smart_resize`` (the PIL image module's, the same
        function) over frames * height * width with min / max_image_tokens; t rounded up to the temporal patch."""
        from transformers.models.glm5_next.image_processing_pil_glm5_next import smart_resize

        kwargs = videos_kwargs or {}
        patch = kwargs.get("patch_size") or self.patch_size
        merge = kwargs.get("merge_size") or self.merge_size
        temporal = kwargs.get("temporal_patch_size") or self.temporal_patch_size
        expand = kwargs.get("patch_expand_factor") or self.patch_expand_factor
        resized_h, resized_w = smart_resize(
            height=height, width=width, num_frames=num_frames, factor=patch * merge * expand, temporal_factor=temporal,
            min_pixels=kwargs.get("min_image_tokens") or self.min_image_tokens,
            max_pixels=kwargs.get("max_image_tokens") or self.max_image_tokens,
        )  # fmt: skip
        grid_t = (num_frames + -num_frames % temporal) // temporal
        return grid_t * (resized_h // patch) * (resized_w // patch)


class Ernie45VLMoeVideoRule(WrittenVideoRule):
    stands_for = "Ernie4_5_VLMoeVideoProcessor"
    upstream = "transformers/models/ernie4_5_vl_moe/video_processing_ernie4_5_vl_moe.py"
    defaults = {"do_resize": True, "size": {"shortest_edge": 299 * 28 * 28, "longest_edge": 1196 * 28 * 28},
                "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2, "min_frames": 16, "max_frames": 180,
                "do_sample_frames": True, "num_frames": None, "fps": None, "draw_on_frames": True,
                "font": "Roboto-Regular.ttf"}  # fmt: skip
    extra_kwargs = {"patch_size": int, "temporal_patch_size": int, "merge_size": int, "min_frames": int,
                    "max_frames": int, "draw_on_frames": bool, "font": str}  # fmt: skip
    model_input_names = ["pixel_values_videos", "video_grid_thw"]

    def __init__(self, settings: dict[str, Any]) -> None:
        super().__init__(settings)
        if self.temporal_patch_size != 2:  # its __init__ refuses any other
            raise ValueError("`Ernie 4.5 VL` only supports a temporal patch size of 2")

    def sample_frames(self, metadata, min_frames=None, max_frames=None, num_frames=None, fps=None, **kwargs):
        """``sample_frames``: ``num_frames`` within [min_frames, max_frames] (else refused), or ``fps`` frames a
        second (every frame without it) clamped to [min_frames, min(max_frames, n)]; more than ``n`` refused;
        indices ``torch.arange(0, n, n / k).int()``."""
        import torch

        if fps is not None and num_frames is not None:
            raise ValueError("`num_frames` and `fps` are mutually exclusive arguments, please use only one!")
        num_frames = num_frames if num_frames is not None else self.num_frames
        min_frames = min_frames if min_frames is not None else self.min_frames
        max_frames = max_frames if max_frames is not None else self.max_frames
        total = metadata.total_num_frames
        if num_frames is not None:
            if num_frames < min_frames or num_frames > max_frames:
                raise ValueError(f"`num_frames` must be {min_frames} <= x <= {max_frames}. Got {num_frames} instead.")
        else:
            if fps is not None and metadata.fps is None:
                raise ValueError("Asked to sample `fps` frames per second but no video metadata was provided")
            num_frames = total / metadata.fps * fps if fps is not None else total
            num_frames = min(max(num_frames, min_frames), max_frames, total)
        if num_frames > total:
            raise ValueError(f"Video can't be sampled. The inferred `num_frames={num_frames}` exceeds "
                             f"`total_num_frames={total}`. Decrease `num_frames` or `fps` for sampling.")  # fmt: skip
        return torch.arange(0, total, total / num_frames).int()

    def get_num_of_video_patches(self, num_frames: int, height: int, width: int, videos_kwargs=None) -> int:
        """``get_num_of_video_patches``: ``smart_resize`` per frame (the PIL image module's, the same function)
        with the ``size`` edges; frames rounded up to the temporal patch, not divided by it (as upstream)."""
        from transformers.models.ernie4_5_vl_moe.image_processing_pil_ernie4_5_vl_moe import smart_resize

        kwargs = videos_kwargs or {}
        size = kwargs.get("size", self.size)
        patch = kwargs.get("patch_size", self.patch_size)
        merge = kwargs.get("merge_size", self.merge_size)
        resized_h, resized_w = smart_resize(height, width, patch * merge, min_pixels=size["shortest_edge"],
                                            max_pixels=size["longest_edge"])  # fmt: skip
        return (num_frames + -num_frames % self.temporal_patch_size) * (resized_h // patch) * (resized_w // patch)


STAND_INS: dict[str, type[WrittenVideoRule]] = {
    rule.stands_for: rule for rule in (Gemma4VideoRule, Qwen2VLVideoRule, Glm5NextVideoRule, Ernie45VLMoeVideoRule)
}


def stand_in_for(class_name: str) -> type[WrittenVideoRule] | None:
    """The written-out rule for a video processor class, or None (the class itself is used)."""
    return STAND_INS.get(class_name)
