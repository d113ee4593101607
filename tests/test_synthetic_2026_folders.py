"""The offline processor folders of this year's model types load as their real processors and round-trip.

Each ``synthetic/folder_<type>.py`` declares the published (or, where unknown, the class-default) settings it
writes: ``PROCESSOR_CLASS``, ``PROCESSOR`` (the processor's own attributes), ``IMAGE`` / ``VIDEO`` / ``AUDIO``
(the sub-processor sections, ``None`` where the processor has none) and ``NAMES`` (tokenizer attribute ->
token). The oracle is transformers itself:

- core (``.venv``, no torchvision): the folder builds in both layouts, ``AutoConfig`` reads its
  ``config.json`` (the model type's own config class, the media ids this tokenizer gives), ``AutoTokenizer``
  reads its tokenizer with every named special token as one id;
- reference (``.venv-ref``, marked ``torchvision``): ``AutoProcessor`` loads both layouts offline as the
  real classes with exactly those settings; the real ``save_pretrained`` of the loaded processor writes the
  transformers5 layout's ``processor_config.json`` and ``chat_template.jinja`` again (key order aside; for a
  hub folder whose ``preprocessor_config.json`` is shared by the image processor and the audio feature
  extractor, as Qwen-Omni's are, each saved section also carries the other's keys, which transformers
  copies, and only those); and a one-image and a one-video conversation go through ``apply_chat_template``
  and the processor's ``__call__``, the placeholder expanded to more than one media token.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest
from _folders_2026 import LazyFolders
from PIL import Image
from transformers import AutoConfig, AutoTokenizer

from vlmpack_offline.synthetic.processor_dir import FOLDER_MODULES

LAYOUTS = ("hub", "transformers5")
# model type -> (config class, config.json key -> the token whose id it holds)
TYPES = {
    "gemma4": ("Gemma4Config", {"image_token_id": "<|image|>", "video_token_id": "<|video|>",
                                "boi_token_id": "<|image>", "eoi_token_id": "<image|>", "audio_token_id": "<|audio|>"}),
    "glm5_next": ("Glm5NextConfig", {"image_token_id": "<|image|>", "video_token_id": "<|video|>",
                                     "video_start_token_id": "<|begin_of_video|>",
                                     "video_end_token_id": "<|end_of_video|>"}),
    "molmo2": ("Molmo2Config", {"image_token_id": "<im_patch>", "video_token_id": "<im_patch>",
                                "image_start_token_id": "<im_start>", "frame_start_token_id": "<frame_start>"}),
    "ernie4_5_vl_moe": ("Ernie4_5_VLMoeConfig", {"image_token_id": "<|IMAGE_PLACEHOLDER|>",
                                                 "video_token_id": "<|VIDEO_PLACEHOLDER|>",
                                                 "image_start_token_id": "<|IMAGE_START|>",
                                                 "video_end_token_id": "<|VIDEO_END|>"}),
    "lfm3_vl": ("Lfm3VlConfig", {"image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>",
                                 "vision_start_token_id": "<|vision_start|>"}),
    "qwen3_omni_moe": ("Qwen3OmniMoeConfig", {"thinker_config.image_token_id": "<|image_pad|>",
                                              "thinker_config.video_token_id": "<|video_pad|>",
                                              "thinker_config.audio_token_id": "<|audio_pad|>",
                                              "thinker_config.vision_start_token_id": "<|vision_start|>"}),
    "qwen2_5_omni": ("Qwen2_5OmniConfig", {"thinker_config.image_token_id": "<|IMAGE|>",
                                           "thinker_config.video_token_id": "<|VIDEO|>",
                                           "thinker_config.audio_token_id": "<|AUDIO|>",
                                           "thinker_config.vision_start_token_id": "<|vision_bos|>"}),
    "paddleocr_vl": ("PaddleOCRVLConfig", {"image_token_id": "<|IMAGE_PLACEHOLDER|>",
                                           "vision_start_token_id": "<|IMAGE_START|>"}),
    "hunyuan_vl": ("HunYuanVLConfig", {"image_token_id": "<｜hy_place▁holder▁no▁102｜>",
                                       "im_start_id": "<｜hy_place▁holder▁no▁100｜>"}),
    "llama4": ("Llama4Config", {"image_token_id": "<|patch|>", "boi_token_index": "<|image_start|>",
                                "eoi_token_index": "<|image_end|>"}),
}  # fmt: skip
# hub layouts whose preprocessor_config.json the image processor and the feature extractor share
SHARED_PREPROCESSOR = {"gemma4", "qwen3_omni_moe", "qwen2_5_omni"}
_SECTIONS = {"image_processor": "IMAGE", "video_processor": "VIDEO", "feature_extractor": "AUDIO"}


def _module(model_type: str):
    return importlib.import_module(f"vlmpack_offline.synthetic.{FOLDER_MODULES[model_type]}")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> LazyFolders:
    return LazyFolders(tmp_path_factory.mktemp("folders_2026"), video=lambda model_type: _module(model_type).VIDEO is not None)


def _sections(module) -> dict[str, dict]:
    """The sub-processor sections the module writes, by processor attribute name."""
    return {name: getattr(module, attr) for name, attr in _SECTIONS.items() if getattr(module, attr, None) is not None}


# --- core: no torchvision ---------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", TYPES)
def test_both_layouts_are_written_as_plain_files(folders, model_type):
    hub, saved = folders[model_type, "hub"], folders[model_type, "transformers5"]
    assert (hub / "preprocessor_config.json").exists() and (hub / "chat_template.jinja").exists()
    assert not (saved / "preprocessor_config.json").exists() and not (saved / "video_preprocessor_config.json").exists()
    module = _module(model_type)
    written = json.loads((saved / "processor_config.json").read_text())
    assert written["processor_class"] == module.PROCESSOR_CLASS
    assert {k: written[k] for k in _sections(module)} == _sections(module)
    assert (hub / "chat_template.jinja").read_text() == (saved / "chat_template.jinja").read_text() == module.TEMPLATE


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("model_type", TYPES)
def test_config_loads_with_this_tokenizers_media_ids(folders, model_type, layout):
    folder = folders[model_type, layout]
    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    class_name, ids = TYPES[model_type]
    assert (type(config).__name__, config.model_type) == (class_name, model_type)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    for key, token in ids.items():
        value = config
        for name in key.split("."):  # thinker_config.image_token_id: the id inside a sub-config
            value = getattr(value, name)
        assert value == tokenizer.convert_tokens_to_ids(token), key


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("model_type", TYPES)
def test_tokenizer_names_every_special_token(folders, model_type, layout):
    tokenizer = AutoTokenizer.from_pretrained(folders[model_type, layout], local_files_only=True)
    module = _module(model_type)
    for attribute, token in module.NAMES.items():
        assert getattr(tokenizer, attribute) == token, attribute
    for token in module.TOKENS:
        ids = tokenizer(token, add_special_tokens=False)["input_ids"]
        assert len(ids) == 1 and ids[0] >= 151643, token  # one added token each (the Qwen BPE's own end at 151642)
    assert tokenizer.chat_template == module.TEMPLATE


# --- reference: the real processors (torchvision) ----------------------------------------------------------


def _processor(folder: Path):
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(folder, local_files_only=True)


@pytest.mark.torchvision
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("model_type", TYPES)
def test_autoprocessor_loads_the_real_classes_with_the_chosen_settings(folders, model_type, layout):
    processor = _processor(folders[model_type, layout])
    module = _module(model_type)
    assert type(processor).__name__ == module.PROCESSOR_CLASS
    for name, section in _sections(module).items():
        part = getattr(processor, name)
        loaded = json.loads(part.to_json_string())  # what save_pretrained writes: lists, not tuples
        type_key = next(k for k in section if k.endswith("_type"))
        assert type(part).__name__ == section[type_key], name
        assert {k: loaded.get(k) for k in section} == section, name
    assert {k: getattr(processor, k) for k in module.PROCESSOR} == module.PROCESSOR


@pytest.mark.torchvision
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("model_type", TYPES)
def test_save_pretrained_writes_the_transformers5_layout(tmp_path, folders, model_type, layout):
    _processor(folders[model_type, layout]).save_pretrained(tmp_path)
    expected_dir = folders[model_type, "transformers5"]
    saved = json.loads((tmp_path / "processor_config.json").read_text())
    expected = json.loads((expected_dir / "processor_config.json").read_text())
    if layout == "hub" and model_type in SHARED_PREPROCESSOR:  # every section copies the shared file's keys
        shared = set(json.loads((folders[model_type, "hub"] / "preprocessor_config.json").read_text()))
        for name, section in saved.items():
            if isinstance(section, dict):
                extra = set(section) - set(expected[name])
                assert extra <= shared, (name, extra - shared)
                saved[name] = {k: v for k, v in section.items() if k not in extra}
    assert saved == expected
    assert (tmp_path / "chat_template.jinja").read_text() == (expected_dir / "chat_template.jinja").read_text()


def _video():
    from transformers.video_utils import VideoMetadata

    frames = np.random.default_rng(0).integers(0, 255, (48, 96, 128, 3), dtype=np.uint8)  # 2 s at 24 fps
    return frames, VideoMetadata(total_num_frames=48, fps=24.0, width=128, height=96, duration=2.0)


@pytest.mark.torchvision
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("model_type", TYPES)
def test_one_image_and_one_video_chat_go_through_the_processor(folders, model_type, layout):
    processor = _processor(folders[model_type, layout])
    image_conv = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A green field."}]},
    ]
    text = processor.apply_chat_template(image_conv, tokenize=False)
    image = Image.new("RGB", (200, 150), (10, 200, 30))
    assert _expanded(processor, text, processor(text=[text], images=[image], return_tensors="pt")) > 8
    if _module(model_type).VIDEO is None:
        return
    video_conv = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens?"}]}]
    text = processor.apply_chat_template(video_conv, tokenize=False, add_generation_prompt=True)
    frames, metadata = _video()
    out = processor(text=[text], videos=[frames], video_metadata=[metadata], return_tensors="pt")
    assert _expanded(processor, text, out) > 8


def _expanded(processor, text: str, out) -> int:
    """How many tokens the processor's media expansion added to the rendered text."""
    return out["input_ids"].shape[1] - len(processor.tokenizer(text, add_special_tokens=False)["input_ids"])
