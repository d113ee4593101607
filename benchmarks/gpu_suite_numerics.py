"""Part (c): a packed forward equals each sub-sample run alone, in bf16, on every attention path the machine has.

1. Kernels (``varlen_gpu_check``): SDPA with the 4D block mask and ``varlen_attention`` (flash-attn,
   else torch's ``varlen_attn`` on CUDA), multi-head and grouped-query, each vs SDPA on every
   sub-sample alone; the flash_attention_2 model check and the Qwen3.5 linear-attention check where
   their packages import (else skipped, with why).
2. The full model (vision tower included): the suite's Qwen2.5-VL-shaped model on real carried packs
   with images. For every attention implementation (``sdpa`` with the block mask, ``VARLEN``, and
   ``flash_attention_2`` where flash-attn imports) the packed logits of each sub-sample are compared
   with that sub-sample run alone through the same implementation (``bench_trainer_gpu``'s one-sample
   items: the model computes its own rope index and mask), both in the run's dtype, and with an
   fp32 reference of the sub-sample alone (``sdpa``, no TF32). bf16 is allowed its own error: the
   packed logits must be as close to the reference as the alone ones, ``err(packed) <= 2 err(alone)
   + 1e-4``; a sub-sample that saw another one's tokens is off by far more. On the CPU smoke (fp32)
   this is the equivalence tests' 1e-4.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import varlen_gpu_check  # noqa: E402
from bench_trainer_gpu import PadCollator  # noqa: E402
from gpu_suite_attention import use_attention  # noqa: E402
from gpu_suite_data import to_device  # noqa: E402
from gpu_suite_model import build_model  # noqa: E402
from gpu_suite_report import RAN, Part  # noqa: E402

FLOOR = varlen_gpu_check.FP32_TOL


@contextmanager
def _exact_fp32():
    """No TF32 in matrix products or convolutions (the vision tower's patch embedding) while the reference runs."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def _kernels(suite) -> tuple[list[str], list[str], list[str], list[dict]]:
    lengths = suite.settings["numerics"]["lengths"]
    results = [*varlen_gpu_check.attention_check(suite.device, suite.dtype, lengths=lengths),
               *varlen_gpu_check.attention_check(suite.device, suite.dtype, lengths=lengths, kv_heads=2)]
    if suite.device == "cuda":
        results += [varlen_gpu_check.model_check(suite.device), varlen_gpu_check.linear_attention_check(suite.device)]
    else:
        results += [{"check": name, "status": "skipped", "why": "bf16 kernels: no CUDA device"}
                    for name in ("flash_attention_2 model check", "Qwen3.5 linear-attention check")]
    lines = [varlen_gpu_check.describe(r) for r in results]
    failures = [varlen_gpu_check.describe(r) for r in results
                if r["status"] == "failed" or (r["status"] == "ran" and not r["passed"])]
    skipped = [f"{r['check']}: {r['why']}" for r in results if r["status"] == "skipped"]
    return lines, failures, skipped, results


def _pick_packs(suite, capacity: int, n: int, window: int = 8) -> list:
    """Up to ``n`` packs with images among the first ``window`` of one reader's order (the vision tower is checked)."""
    first = suite.data.packs_at(capacity, suite.data.dataset(capacity).rank_order(0)[:window].tolist())
    with_images = [(index, batch) for index, batch in first if len(batch.vision)]
    return (with_images or first)[:n]


def _model_check(suite, capacity: int) -> tuple[list[str], list[str], dict]:
    body = suite.layout.model_config()
    reference = build_model(body, device=suite.device, dtype=torch.float32, seed=7).eval()
    model = build_model(body, device=suite.device, dtype=suite.dtype, seed=7).eval()  # the same weights, rounded
    lines, failures, results = [], [], {}
    with torch.no_grad():
        for index, batch in _pick_packs(suite, capacity, suite.settings["numerics"]["packs"]):
            items = suite.data.alone(capacity, [(index, sub) for sub in range(batch.n_segments)])
            host = [PadCollator(0)([item]) for item in items]  # one row, no padding: the model's own rope index
            alone = [to_device(kw, suite.device, suite.dtype) for kw in host]
            with _exact_fp32():
                use_attention(reference, "sdpa")
                exact = [reference(**to_device(kw, suite.device, torch.float32)).logits for kw in host]
            bounds = list(zip(batch.cu_seqlens[:-1].tolist(), batch.cu_seqlens[1:].tolist(), strict=True))
            for attention in suite.attentions():
                use_attention(model, attention)
                try:
                    packed = model(**batch.model_kwargs(attention)).logits
                    worst = {"packed_vs_alone": 0.0, "packed_vs_fp32": 0.0, "alone_vs_fp32": 0.0, "ratio": 0.0}
                    for (start, end), kwargs, ref in zip(bounds, alone, exact, strict=True):
                        mine, own = packed[:, start:end].float(), model(**kwargs).logits.float()
                        errors = {"packed_vs_alone": (mine - own).abs().max().item(),
                                  "packed_vs_fp32": (mine - ref).abs().max().item(),
                                  "alone_vs_fp32": (own - ref).abs().max().item()}
                        errors["ratio"] = errors["packed_vs_fp32"] / (2 * errors["alone_vs_fp32"] + FLOOR)
                        worst = {k: max(worst[k], errors[k]) for k in worst}
                except Exception as error:  # noqa: BLE001 - a path that raises is this path's failure
                    failures.append(f"model pack {index} {attention}: {type(error).__name__}: {error}")
                    lines.append(failures[-1])
                    continue
                passed = worst["ratio"] <= 1.0
                results[f"pack {index} {attention}"] = worst | {"sub_samples": len(bounds), "passed": passed}
                lines.append(f"model pack {index} ({len(bounds)} sub-samples, {batch.seq_len} tokens) {attention}: "
                             f"packed vs alone {worst['packed_vs_alone']:.3e}, vs fp32 {worst['packed_vs_fp32']:.3e} "
                             f"(alone vs fp32 {worst['alone_vs_fp32']:.3e}) -> {'ok' if passed else 'FAIL'}")
                if not passed:
                    failures.append(f"model pack {index} {attention}: packed logits {worst['packed_vs_fp32']:.3e} from "
                                    f"fp32, alone {worst['alone_vs_fp32']:.3e}: over 2x alone + {FLOOR:g}")
                del packed
    del model, reference
    return lines, failures, results


def run(suite) -> Part:
    lines, failures, skipped, kernels = _kernels(suite)
    capacity = suite.layout.balanced_capacity
    model_lines, model_failures, model_results = _model_check(suite, capacity)
    if suite.device == "cuda":
        torch.cuda.empty_cache()
    return Part(name="numerics", status=RAN, results={"kernels": kernels, "model": model_results, "dtype": str(suite.dtype)},
                failures=tuple(failures + model_failures), skipped=tuple(skipped), lines=tuple(lines + model_lines))
