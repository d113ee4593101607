"""Models with linear-attention layers (Qwen3.5's Gated DeltaNet) never mix packed sub-samples silently.

A recurrent layer carries its state from token to token; the 4D block mask and restarting
positions that separate sub-samples for softmax attention do not reach it. Shown here on a
tiny random Qwen3.5 text model (CPU, fp32): with the mask alone the second sub-sample's
logits differ from running it alone. ``PackBatch.model_kwargs`` therefore passes
``cu_seq_lens_q/k`` for such models, and HF then keeps the sub-samples apart (with
flash-linear-attention) or refuses with its own error (without it, as on this machine).
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch
from transformers import Qwen3_5TextConfig
from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

from vlmpack_offline.loader.batch import PackBatch
from vlmpack_offline.loader.rope import RopeIndex
from vlmpack_offline.loader.vision_inputs import VisionInputs
from vlmpack_offline.synthetic.processor_dir import build_processor_dir

HAS_FLA = importlib.util.find_spec("fla") is not None


def _tiny() -> Qwen3_5ForCausalLM:
    config = Qwen3_5TextConfig(
        vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, linear_key_head_dim=16, linear_value_head_dim=16, linear_num_key_heads=2,
        linear_num_value_heads=4, layer_types=["linear_attention", "full_attention"], max_position_embeddings=512,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return Qwen3_5ForCausalLM(config).eval()


def _pack(a: torch.Tensor, b: torch.Tensor, *, linear_attention: bool) -> PackBatch:
    ids = torch.cat([a, b], dim=1)
    cu = torch.tensor([0, a.shape[1], ids.shape[1]], dtype=torch.int32)
    positions = torch.cat([torch.arange(a.shape[1]), torch.arange(b.shape[1])])[None]
    return PackBatch(
        pack_id=0, sample_ids=("a", "b"), input_ids=ids, labels=ids.clone(), position_ids=positions, cu_seqlens=cu,
        max_seqlen=int(max(a.shape[1], b.shape[1])), vision=VisionInputs({}),
        n_images_per_sample=torch.zeros(2, dtype=torch.long), n_videos_per_sample=torch.zeros(2, dtype=torch.long),
        linear_attention=linear_attention,
    )  # fmt: skip


def test_a_block_mask_alone_lets_a_linear_attention_layer_mix_sub_samples():
    model = _tiny()
    a, b = torch.randint(0, 1000, (1, 7)), torch.randint(0, 1000, (1, 5))
    kwargs = _pack(a, b, linear_attention=False).model_kwargs("sdpa", with_labels=False)
    assert "cu_seq_lens_q" not in kwargs
    with torch.no_grad():
        packed = model(**kwargs).logits
        alone = model(input_ids=b, use_cache=False).logits
    assert (packed[:, 7:] - alone).abs().max() > 1e-3  # the state of sub-sample a leaked into b


def test_model_kwargs_pass_cu_seqlens_for_linear_attention_so_hf_separates_or_refuses():
    model = _tiny()
    a, b = torch.randint(0, 1000, (1, 7)), torch.randint(0, 1000, (1, 5))
    kwargs = _pack(a, b, linear_attention=True).model_kwargs("sdpa", with_labels=False)
    assert torch.equal(kwargs["cu_seq_lens_q"], torch.tensor([0, 7, 12], dtype=torch.int32))
    if not HAS_FLA:
        with pytest.raises(ValueError, match="flash-linear-attention"):
            model(**kwargs)
        return
    with torch.no_grad():  # pragma: no cover - only where flash-linear-attention is installed
        packed = model(**kwargs).logits
        alone = torch.cat([model(input_ids=a, use_cache=False).logits, model(input_ids=b, use_cache=False).logits], 1)
    assert (packed - alone).abs().max() < 1e-4


@pytest.mark.parametrize(("model_type", "expected"), [("qwen3_5", True), ("qwen3_vl", False)])
def test_the_rope_index_knows_whether_the_folder_s_model_has_linear_attention(tmp_path, model_type, expected):
    folder = build_processor_dir(tmp_path / "proc", "qwen3_vl")
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    assert RopeIndex.from_processor_dir(folder, model_type=model_type).has_linear_attention is expected
