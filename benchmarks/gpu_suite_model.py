"""The GPU suite's model: a Qwen2.5-VL-shaped network with random weights, one config for the plan and the clock.

``gpu_suite_prep.py`` writes ``model_config(size)`` as the carried data's ``model/config.json`` and plans
the balanced packs with it (``packing.cost.model_config``), so the cost the plan predicts for a pack and
the time ``gpu_suite.py`` measures for it come from the same sizes::

    size    text (hidden x layers, heads / kv heads, MLP)   vision tower (hidden x depth, MLP)   parameters
    gpu     1024 x 16, 16 / 4, 4096                          768 x 8, 2048, window 112 px         ~0.62 B
    smoke   64 x 2, 4 / 2, 128                               32 x 2, 64, window 56 px             ~0.02 B

Both keep Qwen2.5-VL's vocabulary (the packs' ids are the real Qwen tokenizer's), untied embeddings,
mRoPE, the windowed vision tower with full-attention blocks, patch 14 and merge 2 (the processor
folder's grids fit the model). The vocabulary dominates the smoke model's size: its layers are tiny.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import torch

__all__ = ["SIZES", "model_config", "write_model_config", "read_model_config", "build_model", "parameters"]

# Per size: the text model's and the vision tower's dimensions (the rest is Qwen2.5-VL's, in model_config).
SIZES = {
    "gpu": {
        "text": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 16,
                 "num_attention_heads": 16, "num_key_value_heads": 4},
        "vision": {"hidden_size": 768, "intermediate_size": 2048, "depth": 8, "num_heads": 12,
                   "window_size": 112, "fullatt_block_indexes": [3, 7]},
    },
    "smoke": {
        "text": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "num_key_value_heads": 2},
        "vision": {"hidden_size": 32, "intermediate_size": 64, "depth": 2, "num_heads": 2,
                   "window_size": 56, "fullatt_block_indexes": [1]},
    },
}  # fmt: skip


def model_config(size: str) -> dict:
    """The ``config.json`` body of the ``size`` model (``SIZES``): what the cost model reads and the model is built from."""
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}; choose one of {sorted(SIZES)}")
    text, vision = SIZES[size]["text"], SIZES[size]["vision"]
    head_dim = text["hidden_size"] // text["num_attention_heads"]
    # Qwen2.5-VL splits each head's rotary half as 1/4 temporal, 3/8 height, 3/8 width (its published [16, 24, 24])
    section = [head_dim // 8, head_dim * 3 // 16, head_dim * 3 // 16]
    return {
        "model_type": "qwen2_5_vl",
        "architectures": ["Qwen2_5_VLForConditionalGeneration"],
        "text_config": {
            **text, "vocab_size": 151936, "head_dim": head_dim, "hidden_act": "silu", "max_position_embeddings": 32768,
            "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "attention_dropout": 0.0,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": section},
        },
        "vision_config": {
            **vision, "hidden_act": "silu", "in_channels": 3, "patch_size": 14, "spatial_merge_size": 2,
            "temporal_patch_size": 2, "tokens_per_second": 2, "out_hidden_size": text["hidden_size"],
        },
        "tie_word_embeddings": False,
    }  # fmt: skip


def write_model_config(folder: Path, size: str) -> Path:
    """``folder/config.json`` for ``size``; returns its path (``packing.cost.model_config`` takes it)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(model_config(size), indent=2) + "\n")
    return path


def read_model_config(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def build_model(body: dict, *, device: str, dtype: torch.dtype, seed: int = 0) -> torch.nn.Module:
    """A seeded random ``Qwen2_5_VLForConditionalGeneration`` of ``body``, built on ``device`` (no host copy)."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    fields = {k: v for k, v in copy.deepcopy(body).items() if k not in ("model_type", "architectures")}
    config = Qwen2_5_VLConfig(**fields)
    config._attn_implementation = "sdpa"  # the suite switches per run (gpu_suite_attention.use_attention)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration(config)
    return model.to(dtype)


def parameters(model: torch.nn.Module) -> dict:
    """Parameter counts: total, of the vision tower and of the embeddings + LM head (what the report prints)."""
    total = sum(p.numel() for p in model.parameters())
    vision = sum(p.numel() for name, p in model.named_parameters() if ".visual." in f".{name}")
    vocab = model.get_input_embeddings().weight.numel() + model.get_output_embeddings().weight.numel()
    return {"total": total, "vision": vision, "embeddings_and_head": vocab}
