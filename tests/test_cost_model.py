"""The plan's cost model (packing/cost.py): its coefficients against real HF models built from a config.

The oracle is the model itself: the linear layers transformers builds for a config hold the
multiply-adds a token (or a vision patch) costs, so ``token`` must be 6 x the language model's
linear weights (+ lm head) and ``patch`` 6 x the vision blocks' and patch embedding's weights
(plus the windowed attention term where the config has windows).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from vlmpack_offline.config import CostConfig
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.packing.cost import CostModel, cost_model_for, model_sizes, pack_costs

TEXT = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 1000}


def _linear_weights(model, *, inside: str) -> int:
    return sum(m.weight.numel() for name, m in model.named_modules()
               if isinstance(m, (torch.nn.Linear, torch.nn.Conv3d)) and inside in name)


def _qwen2_5_vl():
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    config = Qwen2_5_VLConfig(text_config=TEXT, vision_config={
        "hidden_size": 32, "depth": 4, "intermediate_size": 48, "num_heads": 2, "out_hidden_size": 64,
        "fullatt_block_indexes": [1, 3], "window_size": 56, "patch_size": 14})
    return config, Qwen2_5_VLForConditionalGeneration(config)


def _qwen2_vl():
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    config = Qwen2VLConfig(text_config=TEXT, vision_config={
        "embed_dim": 32, "depth": 3, "mlp_ratio": 2, "num_heads": 2, "hidden_size": 64, "patch_size": 14})
    return config, Qwen2VLForConditionalGeneration(config)


@pytest.mark.parametrize("build", [_qwen2_5_vl, _qwen2_vl], ids=["qwen2_5_vl", "qwen2_vl"])
def test_coefficients_are_the_flops_of_the_real_models_linear_layers(build):
    config, model = build()
    token, attention, patch, patch_attention, audio_frame, audio_attention = model_sizes(config.to_dict(), "test")
    assert audio_frame == audio_attention == 0  # a model without an audio encoder
    language = _linear_weights(model, inside="language_model.layers") + model.lm_head.weight.numel()
    assert token == 6 * language
    vision = config.vision_config
    windowed = vision.depth - len(getattr(vision, "fullatt_block_indexes", None) or range(vision.depth))
    window = (getattr(vision, "window_size", 0) or 0) // vision.patch_size
    hidden = getattr(vision, "embed_dim", None) or vision.hidden_size
    encoder = _linear_weights(model, inside="visual.blocks") + _linear_weights(model, inside="visual.patch_embed")
    assert patch == 6 * encoder + 12 * hidden * window**2 * windowed
    full = vision.depth - windowed
    assert patch_attention == 12 * hidden * full  # QK^T + AV over a block, forward + backward
    assert attention == 6 * TEXT["num_hidden_layers"] * TEXT["hidden_size"]  # causal: half of 4 s^2 d, x 3


@pytest.mark.parametrize("family", ["qwen2_5_omni", "qwen3_omni_moe"])
def test_the_audio_coefficient_is_the_flops_of_the_real_audio_encoders_layers(family):
    """An omni model's config nests its sizes under thinker_config; the audio encoder's transformer layers (per
    frame they run on) are 6 x their linear weights, as for the language model and the vision encoder."""
    from transformers import AutoConfig
    from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import Qwen2_5OmniAudioEncoder
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeAudioEncoder

    audio = {"d_model": 32, "encoder_layers": 3, "encoder_attention_heads": 2, "encoder_ffn_dim": 80,
             "num_mel_bins": 16, "output_dim": 64}
    config = AutoConfig.for_model(family, thinker_config={"text_config": TEXT, "audio_config": audio})
    encoder_class = Qwen2_5OmniAudioEncoder if family == "qwen2_5_omni" else Qwen3OmniMoeAudioEncoder
    encoder = encoder_class(config.thinker_config.audio_config)
    token, _, _, _, audio_frame, audio_attention = model_sizes(config.to_dict(), "test")
    assert audio_frame == 6 * _linear_weights(encoder, inside="layers.")
    assert audio_attention == 12 * audio["d_model"] * audio["encoder_layers"]
    assert token > 0  # the thinker's language model, not the top level's (which has no sizes)


def test_a_conformer_audio_encoders_coefficient_is_its_layers_linear_flops():
    """Gemma4's audio tower is a conformer: its per-frame layers (two feed-forwards, attention, the light conv) are
    6 x their linear weights (the relative-position projection runs on positions, not frames)."""
    from transformers.models.gemma4.configuration_gemma4 import Gemma4AudioConfig
    from transformers.models.gemma4.modeling_gemma4 import Gemma4AudioModel

    config = Gemma4AudioConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                               subsampling_conv_channels=[8, 4], output_proj_dims=48)
    encoder = Gemma4AudioModel(config)
    per_frame = sum(m.weight.numel() for name, m in encoder.named_modules()
                    if isinstance(m, torch.nn.Linear) and "layers." in name and "relative_k_proj" not in name)
    _, _, _, _, audio_frame, audio_attention = model_sizes({**TEXT, "audio_config": config.to_dict()}, "test")
    assert audio_frame == 6 * per_frame
    assert audio_attention == 12 * 32 * 2


def test_a_pack_costs_its_audio_frames_and_windows():
    model = CostModel(token=1.0, attention=0.0, patch=0.0, patch_attention=0.0, audio_frame=5.0, audio_attention=0.5,
                      source="test")
    lengths, none = np.array([10, 20], np.int32), np.zeros(2, np.int32)
    frames, windows = np.array([100, 0], np.int32), np.array([2 * 50**2, 0], np.int64)
    costs = pack_costs(model, lengths, none, none.astype(np.int64), np.array([0, 1]), np.array([0, 1, 2]),
                       audio=(frames, windows))
    assert costs.tolist() == [10 + 5.0 * 100 + 0.5 * 5000, 20]


def test_a_pack_costs_the_sum_of_its_samples_terms():
    model = CostModel(token=2.0, attention=0.5, patch=3.0, patch_attention=0.25, source="test")
    lengths = np.array([10, 20, 30], np.int32)
    patches = np.array([0, 16, 4], np.int32)
    blocks = np.array([0, 256, 16], np.int64)
    costs = pack_costs(model, lengths, patches, blocks, np.array([2, 0, 1]), np.array([0, 2, 3]), chunk=1)
    one = lambda i: 2.0 * lengths[i] + 0.5 * lengths[i] ** 2 + 3.0 * patches[i] + 0.25 * blocks[i]  # noqa: E731
    assert costs.tolist() == [one(2) + one(0), one(1)]


def test_without_a_model_config_the_defaults_are_named(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl"}))  # a processor folder's
    model = cost_model_for(CostConfig(), str(tmp_path))
    assert "Qwen2.5-VL-7B-sized defaults" in model.source and "no packing.cost.model_config" in model.source


def test_a_model_config_gives_the_sizes_and_packing_cost_overrides_a_term(tmp_path):
    config, _ = _qwen2_5_vl()
    path = tmp_path / "model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config.to_dict()))
    derived = cost_model_for(CostConfig(model_config=str(path.parent)))
    assert derived.token == model_sizes(config.to_dict(), "x")[0] and str(path.parent) in derived.source
    overridden = cost_model_for(CostConfig(model_config=str(path), patch=0.0))
    assert overridden.patch == 0.0 and overridden.token == derived.token and "patch from packing.cost" in overridden.source


def test_a_model_config_without_sizes_is_refused_naming_the_key(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"text_config": {"hidden_size": 8}}))
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        cost_model_for(CostConfig(model_config=str(path)))
    with pytest.raises(ConfigError, match="no such file"):
        cost_model_for(CostConfig(model_config=str(tmp_path / "missing.json")))


@pytest.mark.parametrize("model_type", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe", "qwen3_5", "glm4v",
                                        "glm4v_moe", "internvl", "gemma3", "llava_onevision", "mistral3"])
def test_every_supported_familys_config_layout_gives_all_four_coefficients(model_type):
    from transformers import AutoConfig

    coefficients = model_sizes(AutoConfig.for_model(model_type).to_dict(), model_type)
    assert all(value > 0 for value in coefficients[:4]), coefficients  # text under text_config / llm_config, a vision tower


@pytest.mark.parametrize("model_type", ["qwen2_5_omni", "qwen3_omni_moe", "gemma4"])
def test_every_omni_familys_config_layout_gives_all_six_coefficients(model_type):
    from transformers import AutoConfig

    extra = {"audio_config": {}, "vision_config": {}} if model_type == "gemma4" else {}  # its default has no towers
    coefficients = model_sizes(AutoConfig.for_model(model_type, **extra).to_dict(), model_type)
    assert all(value > 0 for value in coefficients), coefficients  # the thinker's text, vision and audio towers


def test_a_processor_folder_whose_sizes_cannot_be_read_falls_back_to_the_defaults_saying_why(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"hidden_size": 8}}))  # no layer count
    model = cost_model_for(CostConfig(), str(tmp_path))
    assert "Qwen2.5-VL-7B-sized defaults" in model.source and "num_hidden_layers" in model.source
