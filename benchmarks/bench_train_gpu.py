"""GPU benchmark (not CI): training tokens/s on vlmpack packs vs the same samples padded to the longest in a batch.

    python benchmarks/bench_train_gpu.py                       # C = 8192 and 16384, bf16, on CUDA
    python benchmarks/bench_train_gpu.py --device cpu --smoke  # tiny model and C, to check the script runs

The model is a small Qwen2.5-VL-shaped language model (random weights, built from a
config: hidden 1024, 8 layers, GQA 16/4, mRoPE), trained with AdamW in bf16. The
samples are text token sequences whose lengths follow a log-normal distribution
(median C/16, as chat-style SFT data); both arms train on exactly the same samples:

* packed: the samples are packed with vlmpack's own best-fit-decreasing planner
  (capacity C); each step is one pack with ``position_ids`` restarting per
  sub-sample and ``flash_attention_2`` (varlen, ``cu_seq_lens_q/k``) when flash-attn
  is installed, else ``sdpa`` with the block-diagonal mask HF derives from
  ``position_ids``;
* padded: the same samples in random order, as many per step as a pack holds on
  average, padded to the longest of the step (``attention_mask``), the usual
  unpacked loader.

Reported: real (non-pad) tokens per second of each arm and their ratio, measured in
the same run after warm-up steps. Exits 0 with a "skipped" line when there is no CUDA
device (unless ``--device cpu``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time

import numpy as np
import torch


def _model(hidden: int, layers: int, heads: int, kv_heads: int, attn: str, device: str, dtype: torch.dtype):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    head_dim = hidden // heads
    section = [head_dim // 8, head_dim * 3 // 16, head_dim * 3 // 16]
    config = Qwen2_5_VLConfig(
        text_config={"vocab_size": 32000, "hidden_size": hidden, "intermediate_size": hidden * 3,
                     "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
                     "max_position_embeddings": 65536, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2,
                     "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": section}},
        vision_config={"depth": 1, "hidden_size": 32, "intermediate_size": 64, "num_heads": 2,
                       "out_hidden_size": hidden},
    )  # fmt: skip
    config._attn_implementation = attn
    torch.manual_seed(0)
    return Qwen2_5_VLForConditionalGeneration(config).to(device, dtype).train()


def _lengths(n: int, capacity: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lengths = rng.lognormal(mean=np.log(capacity / 16), sigma=0.8, size=n).astype(np.int64)
    return np.clip(lengths, 16, capacity)


def _packed_steps(lengths: np.ndarray, capacity: int) -> list[list[int]]:
    from vlmpack_offline.packing import PackLimits, pack_samples

    bins = pack_samples(lengths, PackLimits(capacity=capacity))
    return [bins.pack(p).tolist() for p in range(bins.n_packs)]


def _padded_steps(lengths: np.ndarray, per_step: int, seed: int) -> list[list[int]]:
    order = np.random.default_rng(seed).permutation(len(lengths)).tolist()
    return [order[i : i + per_step] for i in range(0, len(order), per_step)]


def _packed_inputs(lengths, step, device, attn):
    sizes = [int(lengths[i]) for i in step]
    ids = torch.randint(0, 32000, (1, sum(sizes)), device=device)
    text_pos = torch.cat([torch.arange(n, device=device) for n in sizes])[None]
    kwargs = {"input_ids": ids, "labels": ids, "use_cache": False,
              "position_ids": torch.cat([text_pos[None], text_pos.expand(3, 1, -1)], dim=0)}  # fmt: skip
    if attn == "flash_attention_2":
        cu = torch.tensor([0, *np.cumsum(sizes).tolist()], dtype=torch.int32, device=device)
        kwargs |= {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": max(sizes), "max_length_k": max(sizes)}
    return kwargs, sum(sizes)


def _padded_inputs(lengths, step, device):
    sizes = [int(lengths[i]) for i in step]
    longest = max(sizes)
    ids = torch.randint(0, 32000, (len(sizes), longest), device=device)
    mask = (torch.arange(longest, device=device)[None] < torch.tensor(sizes, device=device)[:, None]).long()
    labels = ids.masked_fill(mask == 0, -100)
    return {"input_ids": ids, "labels": labels, "attention_mask": mask, "use_cache": False}, sum(sizes)


def timed_steps(model, optimizer, steps, warmup: int, device: str) -> float:
    """Real tokens/s over ``steps[warmup:]``; a step is ``(micro-batches' model kwargs, real tokens)``: forward and
    backward of each micro-batch, then one optimizer step (``gpu_suite_throughput.py`` uses it too)."""

    def step(micro_batches):
        for kwargs in micro_batches:
            model(**kwargs).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for micro_batches, _ in steps[:warmup]:
        step(micro_batches)
    if device == "cuda":
        torch.cuda.synchronize()
    start, tokens = time.perf_counter(), 0
    for micro_batches, n in steps[warmup:]:
        step(micro_batches)
        tokens += n
    if device == "cuda":
        torch.cuda.synchronize()
    return tokens / (time.perf_counter() - start)


def bench(capacity: int, args, attn: str) -> tuple[float, float, float]:
    lengths = _lengths(args.samples, capacity, seed=capacity)
    packs = _packed_steps(lengths, capacity)
    per_step = max(1, round(len(lengths) / len(packs)))
    padded = _padded_steps(lengths, per_step, seed=1)
    n = min(len(packs), len(padded), args.steps + args.warmup)
    results = []
    for arm in ("packed", "padded"):
        model = _model(args.hidden, args.layers, args.heads, args.kv_heads, attn if arm == "packed" else
                       ("flash_attention_2" if attn == "flash_attention_2" else "sdpa"), args.device, args.dtype)  # fmt: skip
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
        if arm == "packed":
            batches = [_packed_inputs(lengths, s, args.device, attn) for s in packs[:n]]
        else:
            batches = [_padded_inputs(lengths, s, args.device) for s in padded[:n]]
        steps = [([kwargs], tokens) for kwargs, tokens in batches]  # one micro-batch per step
        results.append(timed_steps(model, optimizer, steps, args.warmup, args.device))
        del model, optimizer, batches, steps
        if args.device == "cuda":
            torch.cuda.empty_cache()
    fill = float(lengths.sum()) / (len(packs) * capacity)
    return results[0], results[1], fill


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--capacities", type=int, nargs="+", default=[8192, 16384])
    parser.add_argument("--samples", type=int, default=4000, help="samples drawn per capacity")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per arm")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--smoke", action="store_true", help="tiny model and C=512/1024: checks the script, measures nothing")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("skipped: no CUDA device (this benchmark needs a GPU; --device cpu --smoke checks the script)")
        return 0
    if args.smoke:
        args.capacities, args.samples, args.steps, args.warmup = [512, 1024], 200, 3, 1
        args.hidden, args.layers, args.heads, args.kv_heads = 64, 2, 4, 2
    args.dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    attn = "flash_attention_2" if args.device == "cuda" and importlib.util.find_spec("flash_attn") else "sdpa"
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"device {name}, packed attention {attn}, model hidden {args.hidden} x {args.layers} layers, "
          f"{args.steps} timed steps per arm")  # fmt: skip
    print(f"{'C':>6} {'fill':>7} {'packed tok/s':>13} {'padded tok/s':>13} {'ratio':>6}")
    for capacity in args.capacities:
        packed, padded, fill = bench(capacity, args, attn)
        print(f"{capacity:>6} {fill:>7.4f} {packed:>13.0f} {padded:>13.0f} {packed / padded:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
