"""GPU check (not CI): the varlen attention path gives the SDPA block-mask path's results within bf16 tolerance.

    python benchmarks/varlen_gpu_check.py

1. ``varlen_attention`` (flash-attn if installed, else ``torch.nn.attention.varlen.varlen_attn``)
   vs SDPA with the block-diagonal causal mask, on random bf16 q/k/v of a pack.
2. A tiny random Qwen2.5-VL text pack: ``flash_attention_2`` (when flash-attn is installed) with
   ``cu_seq_lens_q/k`` vs ``sdpa`` with the 4D mask, logits compared in bf16.
3. A tiny random Qwen3.5 text pack (Gated DeltaNet + full attention) with flash-linear-attention and
   causal-conv1d installed: the packed forward (``cu_seq_lens_q`` + ``seq_idx`` from ``model_kwargs``)
   vs each sub-sample run alone, in bf16. (On CPU, tests/test_linear_attention_packing.py checks the
   same with HF's reference functions standing in for the two kernels.)
Exits 0 with a "skipped" line when there is no CUDA device.
"""

from __future__ import annotations

import importlib.util
import sys

import torch
import torch.nn.functional as F

BF16_TOL = 2e-2  # bf16 has 8 mantissa bits; attention outputs of O(1) agree to ~1e-2


def _attention_check() -> float:
    from vlmpack_offline.loader import block_causal_mask, varlen_attention, varlen_backend

    torch.manual_seed(0)
    lengths = [700, 129, 1, 2048, 3000]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(sum(lengths), 8, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = varlen_attention(q, k, v, cu, max(lengths))
    mask = block_causal_mask(cu)
    ref = F.scaled_dot_product_attention(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None], attn_mask=mask
    )[0].transpose(0, 1)
    diff = (out.float() - ref.float()).abs().max().item()
    print(f"varlen_attention backend={varlen_backend('cuda')}: max abs diff vs SDPA block mask = {diff:.3e}")
    return diff


def _model_check() -> float | None:
    if importlib.util.find_spec("flash_attn") is None:
        print("flash_attention_2 model check skipped: flash-attn is not installed")
        return None
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from vlmpack_offline.loader import PackBatch, VisionInputs

    config = Qwen2_5_VLConfig(
        text_config={"vocab_size": 1000, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "num_key_value_heads": 2,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [8, 12, 12]}},
        vision_config={"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2, "out_hidden_size": 256},
    )  # fmt: skip
    torch.manual_seed(0)
    lengths = [300, 17, 900]
    ids = torch.randint(0, 1000, (1, sum(lengths)), device="cuda")
    cu = torch.tensor([0, 300, 317, 1217], dtype=torch.int32, device="cuda")
    pos = torch.cat([torch.arange(n) for n in lengths]).cuda()
    batch = PackBatch(
        pack_id=0, sample_ids=("a", "b", "c"), input_ids=ids, labels=ids, position_ids=pos.expand(3, 1, -1),
        cu_seqlens=cu, max_seqlen=max(lengths), vision=VisionInputs(),
        n_images_per_sample=torch.zeros(3, dtype=torch.long), n_videos_per_sample=torch.zeros(3, dtype=torch.long),
    )  # fmt: skip
    logits = {}
    for attn in ("sdpa", "flash_attention_2"):
        config._attn_implementation = attn
        torch.manual_seed(1)
        model = Qwen2_5_VLForConditionalGeneration(config).to("cuda", torch.bfloat16).eval()
        with torch.no_grad():
            logits[attn] = model(**batch.model_kwargs(attn)).logits.float()
    diff = (logits["sdpa"] - logits["flash_attention_2"]).abs().max().item()
    print(f"tiny Qwen2.5-VL pack: flash_attention_2 (cu_seq_lens) vs sdpa (4D mask) logits max abs diff = {diff:.3e}")
    return diff


def _linear_attention_check() -> float | None:
    missing = [name for name in ("fla", "causal_conv1d") if importlib.util.find_spec(name) is None]
    if missing:
        print(f"Qwen3.5 linear-attention check skipped: {', '.join(missing)} not installed")
        return None
    from transformers import Qwen3_5TextConfig
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5ForCausalLM

    from vlmpack_offline.loader import PackBatch, VisionInputs

    config = Qwen3_5TextConfig(
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=64, linear_key_head_dim=64, linear_value_head_dim=64, linear_num_key_heads=2,
        linear_num_value_heads=4, layer_types=["linear_attention", "full_attention"],
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = Qwen3_5ForCausalLM(config).to("cuda", torch.bfloat16).eval()
    lengths = [300, 17, 900]
    ids = torch.randint(0, 1000, (1, sum(lengths)), device="cuda")
    cu = torch.tensor([0, 300, 317, 1217], dtype=torch.int32, device="cuda")
    pos = torch.cat([torch.arange(n) for n in lengths]).cuda()[None]
    batch = PackBatch(
        pack_id=0, sample_ids=("a", "b", "c"), input_ids=ids, labels=ids, position_ids=pos, cu_seqlens=cu,
        max_seqlen=max(lengths), vision=VisionInputs(), n_images_per_sample=torch.zeros(3, dtype=torch.long),
        n_videos_per_sample=torch.zeros(3, dtype=torch.long), linear_attention=True,
    )  # fmt: skip
    with torch.no_grad():
        packed = model(**batch.model_kwargs("sdpa", with_labels=False)).logits.float()
        alone = torch.cat(
            [model(input_ids=ids[:, s:e], use_cache=False).logits.float() for s, e in zip(cu[:-1], cu[1:], strict=True)],
            dim=1,
        )
    diff = (packed - alone).abs().max().item()
    print(f"tiny Qwen3.5 pack (fla + causal-conv1d) vs each sub-sample alone: logits max abs diff = {diff:.3e}")
    return diff


def main() -> int:
    if not torch.cuda.is_available():
        print("skipped: no CUDA device (this check needs a GPU)")
        return 0
    diffs = [d for d in (_attention_check(), _model_check(), _linear_attention_check()) if d is not None]
    ok = all(d < BF16_TOL for d in diffs)
    print("OK" if ok else f"FAIL: a difference exceeds {BF16_TOL}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
