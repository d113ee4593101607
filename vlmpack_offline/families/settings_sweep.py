"""Every processor setting is followed or refused: the sweep of a fast-path family's settings.

A fast-path family counts tokens from sizes with the settings it reads; any other setting of the folder or of
``model.processor_kwargs`` would reach the real processor (``from_pretrained``) and the loader but not the
count. So each key found in these places must be one of::

    followed    the family's count reads it (``FamilyKeys.image`` / ``video`` / ``processor`` / ``kwargs``)
    pinned      the count assumes one value, the processor's own (``do_resize: true``); another is refused
    unread      the family's processor never reads it, or reads it without changing the count (with why)
    UNCHANGED   shared: pixel values, tensor layout, class names, loader-only arguments (never a length)

and any other key is a ``ConfigError`` naming the key, where it is and the family. A key whose value is null
is the processor's class default (``BaseImageProcessor._set_attributes`` treats None as absent), so it passes.

Places: the image settings (``preprocessor_config.json``, else ``processor_config.json["image_processor"]``),
the video settings (``video_preprocessor_config.json``, else ``processor_config.json["video_processor"]``),
the processor's own attributes (``processor_config.json``'s top level) and ``model.processor_kwargs``
(``from_pretrained`` hands them to every part). The hub files win where both exist, as ``processor_settings``
reads them. Evidence for each list, transformers 5.24 (``.venv-ref``): ``processing_utils.ImagesKwargs`` /
``VideosKwargs`` and each family's ``*ImageProcessorKwargs`` / ``*VideoProcessorInitKwargs`` list the keys a
processor accepts; the notes below name the code that decides each class.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError

__all__ = ["UNCHANGED", "LOADER_ONLY", "FamilyKeys", "FAMILY_KEYS", "keys_for", "check_settings"]

# Keys that never change a length: pixel values (rescale / normalize run after the resize, on values only:
# BaseImageProcessor / BaseVideoProcessor ``_preprocess``), the resize filter, channel order and tensor type,
# the device, torchvision's batching by shape, the metadata a video processor returns, and the names of classes.
UNCHANGED = frozenset({
    "do_normalize", "image_mean", "image_std", "do_rescale", "rescale_factor", "do_convert_rgb", "resample",
    "data_format", "input_data_format", "return_tensors", "device", "disable_grouping", "return_metadata",
    "image_processor_type", "video_processor_type", "feature_extractor_type", "processor_class", "_processor_class",
    "auto_map",
})  # fmt: skip
# model.processor_kwargs that only say how to load the folder (read by vlmpack's own loaders: remote_code.py,
# loader/encoder.py, tokens/slow.py); a local folder ignores revision / cache_dir / local_files_only
LOADER_ONLY = frozenset({
    "pretrained_model_name_or_path", "trust_remote_code", "use_fast", "backend", "revision", "cache_dir",
    "local_files_only",
})  # fmt: skip
# processor_config.json's top-level keys that are not settings: its sections (swept as image / video) and the
# chat template (the tokenizer's; the counter renders with it)
_SECTIONS = frozenset({"image_processor", "video_processor", "chat_template"})

_SIZES = frozenset({"patch_size", "merge_size", "temporal_patch_size", "min_pixels", "max_pixels", "size"})


@dataclass(frozen=True, slots=True)
class FamilyKeys:
    """One family's keys, by place (see the module doc)."""

    image: frozenset[str]  # followed in the image settings
    video: frozenset[str]  # followed in the video settings
    processor: frozenset[str]  # followed in processor_config.json's top level
    kwargs: frozenset[str]  # followed in model.processor_kwargs
    pinned: dict[str, object] = field(default_factory=dict)  # key -> the one value the count assumes
    unread: dict[str, str] = field(default_factory=dict)  # key -> why it leaves the count unchanged


# Qwen2/2.5-VL, Qwen3-VL, Qwen3.5: tokens/rules.py ``_int_settings`` reads the sizes of the image settings and
# model.processor_kwargs; ``_folder_video`` reads the video settings' sampling (fps, frames, pixels,
# do_sample_frames, cap_pixels_per_frame, max_video_tokens). Qwen2VLImageProcessorPil._preprocess resizes only
# with do_resize (the grid is then the raw size's).
_QWEN = FamilyKeys(
    image=_SIZES,
    video=_SIZES | {"fps", "min_frames", "max_frames", "do_sample_frames", "cap_pixels_per_frame", "max_video_tokens"},
    processor=frozenset(),
    kwargs=_SIZES,
    pinned={"do_resize": True},
)
# GLM-4.1V / 4.5V / 4.6V: families/glm4v.py reads patch / merge / temporal sizes and size (image, kwargs), the
# video settings' size / fps / max_duration (and kwargs' size / fps: tokens/rules.py). Its video processor samples
# frames itself (Glm4vVideoProcessor.do_sample_frames = True), which the count mirrors.
_GLM = FamilyKeys(
    image=frozenset({"patch_size", "merge_size", "temporal_patch_size", "size"}),
    video=frozenset({"patch_size", "merge_size", "temporal_patch_size", "size", "fps", "max_duration"}),
    processor=frozenset(),
    kwargs=frozenset({"patch_size", "merge_size", "temporal_patch_size", "size", "fps"}),
    pinned={"do_resize": True, "do_sample_frames": True},
    unread={
        "num_frames": "Glm4vVideoProcessor.sample_frames / Glm46VVideoProcessor.sample_frames take fps alone "
                      "(num_frames falls into **kwargs)",
        "max_image_size": "declared by Glm4vVideoProcessor / Glm46VVideoProcessor, read by no method",
        **dict.fromkeys(("min_pixels", "max_pixels"), "not in Glm4vImageProcessorKwargs nor Glm4vVideoProcessorInitKwargs: "
                        "the processors bound pixels by size alone (tests/test_family_glm4v.py checks it)"),
    },
)  # fmt: skip
# InternVL: families/internvl.py reads image_seq_length, size, min/max_patches, crop_to_patches; the video
# processor's own sampling (processor_frames.frame_rule) do_sample_frames / num_frames / fps / initial_shift.
_INTERNVL = FamilyKeys(
    image=frozenset({"size", "min_patches", "max_patches", "crop_to_patches", "image_seq_length"}),
    video=frozenset({"do_sample_frames", "num_frames", "fps", "initial_shift"}),
    processor=frozenset({"image_seq_length"}),
    kwargs=frozenset({"size", "min_patches", "max_patches", "crop_to_patches", "image_seq_length",
                      "do_sample_frames", "num_frames", "fps", "initial_shift"}),  # fmt: skip
    pinned={"do_resize": True},
    unread={
        "size": "in the video settings: InternVLProcessor.replace_video_token puts image_seq_length tokens per "
                "frame whatever its size",
    },
)
# LLaVA-OneVision: families/llava_onevision.py reads num_image_tokens / vision_aspect_ratio /
# vision_feature_select_strategy (processor), image_grid_pinpoints / size / crop_size / do_center_crop (image),
# and frame_rule's do_sample_frames / num_frames / fps (video). LlavaOnevisionProcessor takes image_token /
# video_token only where the tokenizer names none; the count uses the defaults then.
_LLAVA_ONEVISION = FamilyKeys(
    image=frozenset({"image_grid_pinpoints", "size", "crop_size", "do_center_crop"}),
    video=frozenset({"do_sample_frames", "num_frames", "fps"}),
    processor=frozenset({"num_image_tokens", "vision_aspect_ratio", "vision_feature_select_strategy"}),
    kwargs=frozenset({"num_image_tokens", "vision_aspect_ratio", "vision_feature_select_strategy",
                      "image_grid_pinpoints", "size", "crop_size", "do_center_crop",
                      "do_sample_frames", "num_frames", "fps"}),  # fmt: skip
    pinned={"do_resize": True, "do_pad": True, "image_token": "<image>", "video_token": "<video>"},
    unread={
        "size": "in the video settings: LlavaOnevisionProcessor.replace_video_token counts frames * "
                "ceil(sqrt(num_image_tokens) / 2)**2 + 1 whatever the frame size",
    },
)
# Gemma3: families/gemma3.py reads size, image_seq_length and do_pan_and_scan (refused when on).
_GEMMA3 = FamilyKeys(
    image=frozenset({"size", "image_seq_length", "do_pan_and_scan"}),
    video=frozenset(),
    processor=frozenset({"image_seq_length"}),
    kwargs=frozenset({"size", "image_seq_length", "do_pan_and_scan"}),
    pinned={"do_resize": True},
    unread={name: "read by Gemma3ImageProcessorPil only with do_pan_and_scan, which the count refuses"
            for name in ("pan_and_scan_min_crop_size", "pan_and_scan_max_num_crops", "pan_and_scan_min_ratio_to_activate")},
)  # fmt: skip
# Mistral3 (Pixtral): families/pixtral.py reads patch_size / spatial_merge_size / the three token names
# (processor, kwargs), size and do_resize (image, kwargs).
_MISTRAL3 = FamilyKeys(
    image=frozenset({"size", "do_resize"}),
    video=frozenset(),
    processor=frozenset({"patch_size", "spatial_merge_size", "image_token", "image_break_token", "image_end_token"}),
    kwargs=frozenset({"patch_size", "spatial_merge_size", "image_token", "image_break_token", "image_end_token",
                      "size", "do_resize"}),  # fmt: skip
    pinned={"do_pad": True, "default_to_square": True},
    unread={
        "patch_size": "in the image settings: PixtralProcessor.__call__ hands the image processor its own "
                      "patch_size * spatial_merge_size (processing_pixtral.py)",
    },
)
# Kimi-K2.5: families/kimi_k25.py reads patch_size / merge_size / max_patches / size / do_resize / media_proc_cfg
# (image), and the video settings' patch / merge / temporal sizes, max_patches, size, num_frames (refused), fps.
# Kimi_K25VideoProcessor samples frames itself (do_sample_frames = True), which the count mirrors.
_KIMI_K25 = FamilyKeys(
    image=frozenset({"patch_size", "merge_size", "max_patches", "size", "do_resize", "media_proc_cfg"}),
    video=frozenset({"patch_size", "merge_size", "temporal_patch_size", "max_patches", "size", "num_frames", "fps"}),
    processor=frozenset(),
    kwargs=frozenset({"patch_size", "merge_size", "temporal_patch_size", "max_patches", "size", "do_resize",
                      "num_frames", "fps"}),  # fmt: skip
    pinned={"do_resize": True, "do_sample_frames": True},
)

FAMILY_KEYS: dict[str, FamilyKeys] = {
    **dict.fromkeys(("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "qwen3_5_moe"), _QWEN),
    **dict.fromkeys(("glm4v", "glm4v_moe", "glm46v"), _GLM),
    "internvl": _INTERNVL, "llava_onevision": _LLAVA_ONEVISION, "gemma3": _GEMMA3, "mistral3": _MISTRAL3,
    "kimi_k25": _KIMI_K25,
}  # fmt: skip


def keys_for(model_type: str) -> FamilyKeys:
    """The sweep's lists for a fast-path ``model_type``."""
    return FAMILY_KEYS[model_type]


def _places(path: Path, read_json) -> list[tuple[str, str, dict]]:
    """(place, how messages name it, settings) of the folder: the image and video settings as
    ``tokens.rules.processor_settings`` picks them, and processor_config.json's top level."""
    from ..tokens.rules import processor_settings  # the tokens package imports the families

    image, video, where = processor_settings(path)
    places = [(place, f"{path}/{where[place]}", settings) for place, settings in (("image", image), ("video", video))
              if settings]  # fmt: skip
    top = {k: v for k, v in read_json(path / "processor_config.json").items() if k not in _SECTIONS}
    places.append(("processor", f"{path / 'processor_config.json'}: ", top))
    return places


def check_settings(model_type: str, path: Path, kwargs: dict, read_json) -> None:
    """Raise ``ConfigError`` on the first key of the folder or ``kwargs`` (model.processor_kwargs) that the
    ``model_type`` family neither follows nor knows to leave the count unchanged (module doc). ``read_json``:
    a file's JSON object, {} when absent (``model_type.read_json``)."""
    keys = FAMILY_KEYS.get(model_type)
    if keys is None:
        return  # the slow path: the real processor counts
    places = _places(Path(path), read_json) + [("kwargs", "model.processor_kwargs.", kwargs)]
    for place, where, settings in places:
        followed = getattr(keys, place)
        for name, value in settings.items():
            if value is None or name in followed or name in UNCHANGED or name in keys.unread:
                continue
            if place == "kwargs" and name in LOADER_ONLY:
                continue
            if name in keys.pinned:
                if value == keys.pinned[name]:
                    continue
                raise ConfigError(
                    f"{where}{name} is {value!r}: {model_type} counts assume {name}: {_json(keys.pinned[name])} "
                    f"(the processor's own); remove it or set it to {_json(keys.pinned[name])}"
                )
            raise ConfigError(
                f"{where}{name}: {model_type} counts do not follow it (it may change the processor's output); "
                "remove it, or report it if it leaves the output unchanged"
            )


def _json(value: object) -> str:
    return json.dumps(value)
