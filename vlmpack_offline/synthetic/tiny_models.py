"""Tiny random Qwen-VL / Qwen3.5 / omni models (no downloaded weights) for the equivalence tests and the example.

Hidden size 64, 2 layers; the vision settings (patch, merge, temporal patch) match
the public processors built by ``processor_dir.build_processor_dir``, so the
processor's grids fit the model. The omni models (``tiny_omni``: Qwen3-Omni's and Qwen2.5-Omni's Thinker,
Gemma 4) are the synthetic folder's own ``config.json`` (token ids, patch sizes, the audio settings the
processor shares with the model: mel bins, Qwen-Omni's ``n_window``) with small sizes, and a one-layer audio
encoder.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

__all__ = ["OMNI_MODELS", "tiny_gemma3_config", "tiny_omni", "tiny_qwen_vl"]


def _configs(family: str):
    text = {
        "vocab_size": 151936, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
    }  # fmt: skip
    vision = {
        "depth": 2, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64,
        "spatial_merge_size": 2, "temporal_patch_size": 2,
    }  # fmt: skip
    if family == "qwen3_vl":
        from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

        text["rope_parameters"]["mrope_interleaved"] = True
        vision |= {"patch_size": 16, "num_position_embeddings": 144, "deepstack_visual_indexes": [0]}
        return Qwen3VLConfig(text_config=text, vision_config=vision), Qwen3VLForConditionalGeneration
    if family == "qwen2_5_vl":
        from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

        vision |= {"patch_size": 14, "window_size": 56, "fullatt_block_indexes": [1]}
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision), Qwen2_5_VLForConditionalGeneration
    if family == "qwen2_vl":
        from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

        vision = {"depth": 2, "embed_dim": 32, "hidden_size": 64, "mlp_ratio": 2, "num_heads": 2, "patch_size": 14,
                  "spatial_merge_size": 2, "temporal_patch_size": 2}  # fmt: skip
        return Qwen2VLConfig(text_config=text, vision_config=vision), Qwen2VLForConditionalGeneration
    if family == "qwen3_5":  # one Gated DeltaNet layer, one full-attention layer; Qwen tokenizer's media ids
        from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

        text |= {
            "layer_types": ["linear_attention", "full_attention"], "linear_key_head_dim": 16,
            "linear_value_head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
            "rope_parameters": {
                "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                "mrope_section": [1, 1, 2], "mrope_interleaved": True,
            },
        }  # fmt: skip
        vision |= {"patch_size": 16, "num_position_embeddings": 144}
        tokens = {"image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
                  "vision_end_token_id": 151653}  # fmt: skip
        return Qwen3_5Config(text_config=text, vision_config=vision, **tokens), Qwen3_5ForConditionalGeneration
    raise ValueError(f"no tiny model for {family!r}; choose qwen2_vl, qwen2_5_vl, qwen3_vl or qwen3_5")


def tiny_qwen_vl(family: str, attn_implementation: str = "sdpa", seed: int = 0) -> torch.nn.Module:
    """A randomly initialised (seeded) tiny model of ``family``."""
    config, model_cls = _configs(family)
    config._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    return model_cls(config)


def tiny_gemma3_config(processor_dir):
    """A tiny Gemma3 config (hidden 64, sliding window 8, SigLIP at 896 px) whose token ids are the folder's own."""
    from transformers import AutoProcessor, Gemma3Config

    tokenizer = AutoProcessor.from_pretrained(processor_dir).tokenizer
    ids = tokenizer.convert_tokens_to_ids
    config = Gemma3Config(
        text_config=dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=8,
                         layer_types=["sliding_attention", "full_attention"], max_position_embeddings=4096),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           image_size=896, patch_size=14),
        mm_tokens_per_image=256, boi_token_index=ids("<start_of_image>"), eoi_token_index=ids("<end_of_image>"),
        image_token_index=ids("<image_soft_token>"),
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    return config


_TEXT = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 16}  # fmt: skip
_QWEN_VISION = {"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 64}
_QWEN_AUDIO = {"encoder_layers": 1, "encoder_attention_heads": 2, "encoder_ffn_dim": 64, "d_model": 32, "output_dim": 64}

# model type -> (the class a thinker / VLM trains as, the config section it is built from ("" = the whole),
# small sizes merged into the folder's config.json, the keys set to the tokenizer's length)
OMNI_MODELS: dict[str, tuple[str, str, dict, tuple[str, ...]]] = {
    "qwen3_omni_moe": (
        "Qwen3OmniMoeThinkerForConditionalGeneration", "thinker_config",
        {"thinker_config": {
            "text_config": {**_TEXT, "moe_intermediate_size": 32, "num_experts": 4, "num_experts_per_tok": 2,
                            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                                "mrope_section": [2, 3, 3], "interleaved": True}},
            "vision_config": {**_QWEN_VISION, "deepstack_visual_indexes": [0]},
            "audio_config": {**_QWEN_AUDIO, "downsample_hidden_size": 16}}},
        ("thinker_config.text_config.vocab_size",),
    ),
    "qwen2_5_omni": (
        "Qwen2_5OmniThinkerForConditionalGeneration", "thinker_config",
        {"thinker_config": {
            "text_config": {**_TEXT, "layer_types": ["full_attention"] * 2, "max_window_layers": 2,
                            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0,
                                                "mrope_section": [2, 3, 3]}},
            "vision_config": {**_QWEN_VISION, "fullatt_block_indexes": [0]},
            "audio_config": _QWEN_AUDIO}},
        ("thinker_config.text_config.vocab_size",),
    ),
    "gemma4": (  # the audio tower's subsampling keeps 128 channels first: its projection reads mel bins / 4 of them
        "Gemma4ForConditionalGeneration", "",
        {"text_config": {**_TEXT, "hidden_size_per_layer_input": 16, "sliding_window": 8,
                         "layer_types": ["sliding_attention", "full_attention"]},
         "vision_config": {**_TEXT, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
                           "num_attention_heads": 2},
         "audio_config": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                          "subsampling_conv_channels": [128, 8], "output_proj_dims": 32}},
        ("text_config.vocab_size", "text_config.vocab_size_per_layer_input"),
    ),
}  # fmt: skip


def _merged(raw: dict, overrides: dict) -> dict:
    """``raw`` with ``overrides`` merged in, section by section; a rope-parameters mapping replaces the folder's."""
    out = dict(raw)
    for key, value in overrides.items():
        out[key] = _merged(out.get(key) or {}, value) if isinstance(value, dict) and "rope_type" not in value else value
    return out


def tiny_omni(model_type: str, folder: str | Path, *, seed: int = 0) -> torch.nn.Module:
    """A randomly initialised (seeded) tiny model of an omni family (``OMNI_MODELS``) from ``folder``'s config, fp32,
    eval, sdpa (Gemma 4's audio tower: eager, the one it has). The shrunk config is written back into ``folder``: a
    checkpoint folder, where the loader reads the model's config (its rope index)."""
    import transformers
    from transformers import AutoConfig, AutoTokenizer

    if model_type not in OMNI_MODELS:
        raise ValueError(f"no tiny omni model for {model_type!r}; choose one of {sorted(OMNI_MODELS)}")
    model_class, section, sizes, vocab_keys = OMNI_MODELS[model_type]
    folder = Path(folder)
    raw = _merged(json.loads((folder / "config.json").read_text()), sizes)
    for dotted in vocab_keys:
        *path, last = dotted.split(".")
        node = raw
        for key in path:
            node = node.setdefault(key, {})
        node[last] = len(AutoTokenizer.from_pretrained(folder))
    (folder / "config.json").write_text(json.dumps(raw))
    config = AutoConfig.from_pretrained(folder)
    config = getattr(config, section) if section else config
    config._attn_implementation = "sdpa"
    for name in ("text_config", "vision_config", "audio_config"):
        sub = getattr(config, name, None)
        if sub is not None:
            sub._attn_implementation = "eager" if model_type == "gemma4" and name == "audio_config" else "sdpa"
    torch.manual_seed(seed)
    return getattr(transformers, model_class)(config).eval()
