"""GPU check (not CI): every varlen attention path gives each sub-sample's own result within bf16 tolerance.

    python benchmarks/varlen_gpu_check.py

1. On one pack of random bf16 q/k/v (multi-head and grouped-query): SDPA with the block-diagonal
   causal mask, and ``varlen_attention`` (flash-attn if installed, else
   ``torch.nn.attention.varlen.varlen_attn``), each vs SDPA run on every sub-sample alone.
2. A tiny random Qwen2.5-VL text pack: ``flash_attention_2`` (when flash-attn is installed) with
   ``cu_seq_lens_q/k`` vs ``sdpa`` with the 4D mask, logits compared in bf16.
3. A tiny random Qwen3.5 text pack (Gated DeltaNet + full attention) with flash-linear-attention and
   causal-conv1d installed: the packed forward (``cu_seq_lens_q`` + ``seq_idx`` from ``model_kwargs``)
   vs each sub-sample run alone, in bf16. (On CPU, tests/test_linear_attention_packing.py checks the
   same with HF's reference functions standing in for the two kernels.)
Each check is also a function returning its result (``attention_check``, ``model_check``,
``linear_attention_check``), which ``gpu_suite_numerics.py`` calls. Exits 0 with a "skipped" line when
there is no CUDA device.
"""

from __future__ import annotations

import importlib.util
import sys

import torch
import torch.nn.functional as F

BF16_TOL = 2e-2  # bf16 has 8 mantissa bits; attention outputs of O(1) agree to ~1e-2
FP32_TOL = 1e-4  # the CPU equivalence tests' tolerance (tests/test_packed_equivalence.py)


def tolerance(dtype: torch.dtype) -> float:
    return BF16_TOL if dtype in (torch.bfloat16, torch.float16) else FP32_TOL


def attention_check(
    device: str = "cuda", dtype: torch.dtype = torch.bfloat16, *, lengths=(700, 129, 1, 2048, 3000), heads: int = 8,
    kv_heads: int = 8, head_dim: int = 64,
) -> list[dict]:
    """Every attention path on one pack vs each sub-sample alone, in ``dtype``: one result per path.

    The paths: SDPA with the 4D block mask (``block_causal_mask``) and ``varlen_attention`` (flash-attn,
    torch's varlen, or SDPA: whichever it picks on ``device``). The reference is SDPA run causally on
    each sub-sample's own slice, in the same dtype; ``kv_heads < heads`` is grouped-query attention.
    A path that raises is a result with its error, not an exception.
    """
    from vlmpack_offline.loader import block_causal_mask, varlen_attention, varlen_backend

    torch.manual_seed(0)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)
    q = torch.randn(sum(lengths), heads, head_dim, device=device, dtype=dtype)
    k, v = (torch.randn(sum(lengths), kv_heads, head_dim, device=device, dtype=dtype) for _ in range(2))
    gqa = kv_heads != heads

    def sdpa(q_, k_, v_, **kw):  # [S, h, d] in and out
        t = [x.transpose(0, 1)[None] for x in (q_, k_, v_)]
        return F.scaled_dot_product_attention(*t, enable_gqa=gqa, **kw)[0].transpose(0, 1)

    alone = torch.cat([sdpa(q[s:e], k[s:e], v[s:e], is_causal=True) for s, e in zip(cu[:-1], cu[1:], strict=True)])
    paths = {
        "sdpa_block_mask": lambda: sdpa(q, k, v, attn_mask=block_causal_mask(cu)),
        f"varlen_attention[{varlen_backend(device)}]": lambda: varlen_attention(q, k, v, cu, max(lengths)),
    }
    results = []
    for name, run in paths.items():
        result = {"check": f"attention {name}, heads {heads}/{kv_heads}", "path": name, "dtype": str(dtype),
                  "tolerance": tolerance(dtype)}
        try:
            diff = (run().float() - alone.float()).abs().max().item()
        except Exception as error:  # noqa: BLE001 - a kernel that is missing or refuses its arguments is a result
            results.append(result | {"status": "failed", "error": f"{type(error).__name__}: {error}"})
            continue
        results.append(result | {"status": "ran", "max_abs_diff": diff, "passed": diff < tolerance(dtype)})
    return results


def model_check(device: str = "cuda") -> dict:
    """A tiny Qwen2.5-VL text pack, ``flash_attention_2`` (cu_seq_lens) vs ``sdpa`` (4D mask), bf16 logits."""
    name = "tiny Qwen2.5-VL pack: flash_attention_2 vs sdpa"
    if importlib.util.find_spec("flash_attn") is None:
        return {"check": name, "status": "skipped", "why": "flash-attn is not installed"}
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
    ids = torch.randint(0, 1000, (1, sum(lengths)), device=device)
    cu = torch.tensor([0, 300, 317, 1217], dtype=torch.int32, device=device)
    pos = torch.cat([torch.arange(n) for n in lengths]).to(device)
    batch = PackBatch(
        pack_id=0, sample_ids=("a", "b", "c"), input_ids=ids, labels=ids, position_ids=pos.expand(3, 1, -1),
        cu_seqlens=cu, max_seqlen=max(lengths), vision=VisionInputs(),
        n_images_per_sample=torch.zeros(3, dtype=torch.long), n_videos_per_sample=torch.zeros(3, dtype=torch.long),
    )  # fmt: skip
    logits = {}
    for attn in ("sdpa", "flash_attention_2"):
        config._attn_implementation = attn
        torch.manual_seed(1)
        model = Qwen2_5_VLForConditionalGeneration(config).to(device, torch.bfloat16).eval()
        with torch.no_grad():
            logits[attn] = model(**batch.model_kwargs(attn)).logits.float()
    diff = (logits["sdpa"] - logits["flash_attention_2"]).abs().max().item()
    return {"check": name, "status": "ran", "max_abs_diff": diff, "tolerance": BF16_TOL, "passed": diff < BF16_TOL}


def linear_attention_check(device: str = "cuda") -> dict:
    """A tiny Qwen3.5 text pack (Gated DeltaNet + full attention) vs each sub-sample alone, bf16 logits."""
    name = "tiny Qwen3.5 pack (fla + causal-conv1d) vs each sub-sample alone"
    missing = [module for module in ("fla", "causal_conv1d") if importlib.util.find_spec(module) is None]
    if missing:
        return {"check": name, "status": "skipped", "why": f"{', '.join(missing)} not installed"}
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
    model = Qwen3_5ForCausalLM(config).to(device, torch.bfloat16).eval()
    lengths = [300, 17, 900]
    ids = torch.randint(0, 1000, (1, sum(lengths)), device=device)
    cu = torch.tensor([0, 300, 317, 1217], dtype=torch.int32, device=device)
    pos = torch.cat([torch.arange(n) for n in lengths]).to(device)[None]
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
    return {"check": name, "status": "ran", "max_abs_diff": diff, "tolerance": BF16_TOL, "passed": diff < BF16_TOL}


def describe(result: dict) -> str:
    """One line per result, as main() prints it (and the GPU suite's report)."""
    if result["status"] == "skipped":
        return f"{result['check']}: skipped ({result['why']})"
    if result["status"] == "failed":
        return f"{result['check']}: FAILED, {result['error']}"
    verdict = "ok" if result["passed"] else f"FAIL (tolerance {result['tolerance']:g})"
    return f"{result['check']}: max abs diff vs each sub-sample alone {result['max_abs_diff']:.3e}, {verdict}"


def main() -> int:
    if not torch.cuda.is_available():
        print("skipped: no CUDA device (this check needs a GPU)")
        return 0
    results = [*attention_check(), *attention_check(kv_heads=2), model_check(), linear_attention_check()]
    for result in results:
        print(describe(result))
    ok = all(r["status"] == "skipped" or (r["status"] == "ran" and r["passed"]) for r in results)
    print("OK" if ok else "FAIL: a check failed or a difference exceeds its tolerance")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
