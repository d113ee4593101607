"""An offline Qwen2.5-Omni (``qwen2_5_omni``) processor folder, built as ``folder_qwen3_omni_moe`` builds Qwen3-Omni's.

What differs from Qwen3-Omni::

    tokenizer     Qwen2.5-Omni's own names for its media tokens, added to the Qwen BPE and named in
                  tokenizer_config.json as Qwen/Qwen2.5-Omni-7B's are: image_token <|IMAGE|>, video_token
                  <|VIDEO|>, audio_token <|AUDIO|>, vision_bos_token <|vision_bos|>, vision_eos_token <|vision_eos|>,
                  audio_bos_token <|audio_bos|>, audio_eos_token <|audio_eos|>.
    settings      Qwen/Qwen2.5-Omni-7B's preprocessor_config.json (public copies agree): patch 14, temporal 2,
                  merge 2, min_pixels 3136, max_pixels 12845056, CLIP mean / std; Whisper features with 128 mel
                  bins, chunk_length 300, n_samples 4800000. No video_preprocessor_config.json (the video
                  processor reads the same file; Qwen2_5OmniProcessor's call-time size is 100352..602112 pixels).
    template      the published one: a default system turn "You are a helpful assistant." unless the first
                  message is one, Qwen2-VL-style turns, an image as <|vision_bos|><|IMAGE|><|vision_eos|>, a
                  video as <|vision_bos|><|VIDEO|><|vision_eos|>, audio as <|audio_bos|><|AUDIO|><|audio_eos|>
                  ("Picture n: " / "Video n: " / "Audio n: " with add_vision_id / add_audio_id).
    config.json   model_type qwen2_5_omni (enable_audio_output false: the thinker is what trains) with a
                  thinker_config holding this tokenizer's media ids, vision_start_token_id (which the thinker
                  config class lacks and its rope index reads) and the vision patch sizes.
"""

from __future__ import annotations

from pathlib import Path

from .folder_qwen3_omni_moe import OMNI_FLAGS, PIXELS, SIZE, VIDEO_DEFAULTS, WHISPER, OmniFolder, build_omni

__all__ = ["AUDIO", "HUB_PREPROCESSOR", "IMAGE", "NAMES", "PROCESSOR", "PROCESSOR_CLASS", "QWEN2_5_OMNI", "TEMPLATE",
           "TOKENS", "VIDEO", "build"]  # fmt: skip

TEMPLATE = (
    "{% set audio_count = namespace(value=0) %}{% set image_count = namespace(value=0) %}"
    "{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_bos|><|IMAGE|><|vision_eos|>"
    "{% elif content['type'] == 'audio' or 'audio' in content or 'audio_url' in content %}"
    "{% set audio_count.value = audio_count.value + 1 %}{% if add_audio_id %}Audio {{ audio_count.value }}: {% endif %}"
    "<|audio_bos|><|AUDIO|><|audio_eos|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_bos|><|VIDEO|><|vision_eos|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CLIP = {"image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711]}

QWEN2_5_OMNI = OmniFolder(
    model_type="qwen2_5_omni",
    processor_class="Qwen2_5OmniProcessor",
    names={
        "image_token": "<|IMAGE|>", "video_token": "<|VIDEO|>", "audio_token": "<|AUDIO|>",
        "vision_bos_token": "<|vision_bos|>", "vision_eos_token": "<|vision_eos|>",
        "audio_bos_token": "<|audio_bos|>", "audio_eos_token": "<|audio_eos|>",
    },  # fmt: skip
    tokens=["<|IMAGE|>", "<|VIDEO|>", "<|AUDIO|>", "<|vision_bos|>", "<|vision_eos|>", "<|audio_bos|>", "<|audio_eos|>"],
    template=TEMPLATE,
    hub_preprocessor={**WHISPER, **PIXELS, **_CLIP, "image_processor_type": "Qwen2VLImageProcessor", "merge_size": 2,
                      "patch_size": 14, "temporal_patch_size": 2},  # fmt: skip
    image={**OMNI_FLAGS, **SIZE, **_CLIP, "image_processor_type": "Qwen2VLImageProcessor", "patch_size": 14},
    video={**OMNI_FLAGS, **SIZE, **VIDEO_DEFAULTS, **_CLIP, "patch_size": 14},
    audio=WHISPER,
    thinker={"model_type": "qwen2_5_omni_thinker"},
    id_keys={"image_token_index": "image_token", "video_token_index": "video_token", "audio_token_index": "audio_token",
             "vision_start_token_id": "vision_bos_token", "vision_end_token_id": "vision_eos_token",
             "audio_start_token_id": "audio_bos_token", "audio_end_token_id": "audio_eos_token"},  # fmt: skip
    extra={"architectures": ["Qwen2_5OmniForConditionalGeneration"], "enable_audio_output": False},
)

# what tests/test_synthetic_2026_folders.py (and a reader) look for in every folder module
PROCESSOR_CLASS = QWEN2_5_OMNI.processor_class
PROCESSOR: dict = {}  # the processor saves no attributes of its own
NAMES, TOKENS = QWEN2_5_OMNI.names, QWEN2_5_OMNI.tokens
HUB_PREPROCESSOR, IMAGE, VIDEO, AUDIO = (
    QWEN2_5_OMNI.hub_preprocessor, QWEN2_5_OMNI.image, QWEN2_5_OMNI.video, QWEN2_5_OMNI.audio,
)  # fmt: skip


def build(target: Path, *, layout: str, video: bool) -> Path:
    """Write the folder (see the module doc); ``video`` changes nothing (the published folder has no video file)."""
    return build_omni(target, QWEN2_5_OMNI, layout=layout)
