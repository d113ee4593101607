"""Tiny random Qwen-VL / Qwen3.5 models (no downloaded weights) for the equivalence tests and the example.

Hidden size 64, 2 layers; the vision settings (patch, merge, temporal patch) match
the public processors built by ``processor_dir.build_processor_dir``, so the
processor's grids fit the model.
"""

from __future__ import annotations

import torch

__all__ = ["tiny_gemma3_config", "tiny_qwen_vl"]


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
