"""GPU benchmark (not CI): megatron-core + TransformerEngine THD training on a packed directory vs the same
samples padded, real tokens/s and peak memory of both.

    # one GPU, cp = 1, on a folder written with `vlmpack write` (any parallel: layout whose multiple
    # divides the job's, e.g. none for cp = 1)
    torchrun --nproc-per-node 1 benchmarks/bench_megatron_gpu.py --packed /data/packed
    # two GPUs, context parallelism 2 (the folder planned with parallel.context_parallel_size: 2)
    torchrun --nproc-per-node 2 benchmarks/bench_megatron_gpu.py --packed /data/packed --cp 2
    # no GPU: build both arms' batches only (the data half: adapter, PackedSeqParams, CP slices)
    python benchmarks/bench_megatron_gpu.py --packed /data/packed --dry-run

The model is megatron-core's ``GPTModel`` with the TransformerEngine layer spec (random weights,
bf16, RoPE; hidden 1024, 8 layers, 16 heads by default) over the packs' token ids: the language
model is what packing changes (the vision tower sees the same images either way, so it is left out).
Both arms train on exactly the same sub-samples, pack after pack:

* packed: one pack per step as ``MegatronAdapter`` gives it (THD, ``PackedSeqParams`` with real and
  padded ``cu_seqlens``), this CP rank's share taken with ``cp_slice`` (TE's partition);
* padded: the same pack's sub-samples as rows of a ``[n, L]`` batch padded to the longest (and to
  a multiple of 2 * cp), cut for CP with megatron-core's ``get_batch_on_this_cp_rank``; causal
  attention, pads masked out of the loss.

Reported after ``--warmup`` steps: real (non-pad) tokens per second of each arm, their ratio, and
peak GPU memory. Exits 0 with a "skipped" line when CUDA or TransformerEngine is missing (unless
``--dry-run``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import torch

from vlmpack_offline.loader import PackDataset, PackEncoder
from vlmpack_offline.loader.adapters.megatron import MegatronAdapter, cp_slice, packed_seq_params, to_device


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--packed", required=True, help="a folder written by `vlmpack write`")
    parser.add_argument("--processor", default=None, help="the processor folder, if not where write saw it")
    parser.add_argument("--cp", type=int, default=1, help="context_parallel_size (torchrun's world size)")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--dry-run", action="store_true", help="build the batches only (CPU)")
    return parser.parse_args()


def _packs(args: argparse.Namespace, adapter: MegatronAdapter, n: int) -> list[dict]:
    encoder = PackEncoder.from_packed_dir(args.packed, args.processor)
    # every CP rank reads the same packs; one reader's order of all of them (a balanced schedule is for DP ranks)
    dataset = PackDataset(args.packed, encoder, rank=0, world_size=1, follow_plan=False)
    out = []
    while len(out) < n:
        for batch in dataset:
            out.append(adapter(batch))
            if len(out) == n:
                break
        dataset.set_epoch(dataset.epoch + 1)
    return out


def _key(batch: dict) -> tuple[int, ...]:
    return tuple(batch["tokens"][0, :64].tolist())


def _padded_rows(batch: dict, cp: int) -> dict:
    """The pack's sub-samples as rows padded to the longest (a multiple of 2 * cp), labels -100 on pads."""
    cu, cu_pad = batch["cu_seqlens_q"].long(), batch["cu_seqlens_q_padded"].long()
    lengths = (cu[1:] - cu[:-1]).tolist()
    width = max(lengths)
    width = -(-width // (2 * cp)) * (2 * cp) if cp > 1 else width
    rows = len(lengths)
    tokens = torch.zeros(rows, width, dtype=torch.long)
    labels = torch.full((rows, width), -100, dtype=torch.long)
    mask = torch.zeros(rows, width)
    for i, (start, n) in enumerate(zip(cu_pad[:-1].tolist(), lengths, strict=True)):
        tokens[i, :n] = batch["tokens"][0, start : start + n]
        labels[i, :n] = batch["labels"][0, start : start + n]
        mask[i, :n] = batch["loss_mask"][0, start : start + n]
    positions = torch.arange(width).expand(rows, width).contiguous()
    return {"tokens": tokens, "labels": labels, "loss_mask": mask, "position_ids": positions}


def _text_positions(batch: dict) -> torch.Tensor:
    """1-D positions restarting per padded sub-sample (the GPT model's RoPE; mRoPE rows are the VLM's)."""
    cu = batch["cu_seqlens_q_padded"].long()
    segment = torch.repeat_interleave(torch.arange(len(cu) - 1), cu[1:] - cu[:-1])
    return (torch.arange(int(cu[-1])) - cu[:-1][segment])[None]


def dry_run(args: argparse.Namespace, batches: list[dict]) -> dict:
    """The data half on the host: both arms' slots, the CP slices adding up, the PackedSeqParams format."""
    real = sum(int(b["cu_seqlens_q"][-1]) for b in batches)
    slots = sum(b["total_tokens"] for b in batches)
    padded = sum(_padded_rows(b, args.cp)["tokens"].numel() for b in batches)
    for rank in range(args.cp):
        if sum(cp_slice(b, args.cp, rank)["tokens"].shape[-1] for b in batches) * args.cp != slots:
            raise AssertionError(f"the cp={args.cp} slices of rank {rank} do not add up to the packs' {slots} slots")
    return {"mode": "dry_run", "steps": len(batches), "distinct_packs": len({_key(b) for b in batches}),
            "real_tokens": real, "thd_slots": slots, "cp_padding": (slots - real) / slots, "padded_slots": padded,
            "padding": (padded - real) / padded, "qkv_format": packed_seq_params(batches[0]).qkv_format}


def run(args: argparse.Namespace) -> dict:
    """The benchmark as a function (``gpu_suite_megatron.py``): the dry run's or the training's numbers."""
    adapter = MegatronAdapter.for_packed_dir(args.packed, context_parallel_size=args.cp)
    batches = _packs(args, adapter, args.steps)
    return dry_run(args, batches) if args.dry_run else _train(args, batches)


def main() -> int:
    args = _args()
    cuda_ok = torch.cuda.is_available() and importlib.util.find_spec("transformer_engine") is not None
    if not cuda_ok and not args.dry_run:
        print("skipped: needs CUDA and TransformerEngine (or pass --dry-run)")
        return 0
    result = run(args)
    if result["mode"] == "dry_run":
        print(f"dry run: {result['steps']} steps ({result['distinct_packs']} distinct packs), {result['real_tokens']} "
              f"real tokens; packed THD {result['thd_slots']} slots ({100 * result['cp_padding']:.2f}% CP padding), "
              f"padded rows {result['padded_slots']} slots ({100 * result['padding']:.2f}% padding); "
              f"PackedSeqParams {result['qkv_format']}")
    elif result["rank"] == 0:
        print(f"{result['device']} x{args.cp} (cp={args.cp}), {result['timed_steps']} timed steps")
        print(f"packed THD: {result['packed_tokens_per_s']:,.0f} real tokens/s, peak {result['packed_peak_gib']:.2f} GiB")
        print(f"padded    : {result['padded_tokens_per_s']:,.0f} real tokens/s, peak {result['padded_peak_gib']:.2f} GiB")
        print(f"packed / padded: {result['packed_tokens_per_s'] / result['padded_tokens_per_s']:.2f}x")
    return 0


def _train(args: argparse.Namespace, batches: list[dict]) -> dict:
    from megatron.core import parallel_state
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed
    from megatron.core.transformer.transformer_config import TransformerConfig
    from megatron.core.utils import get_batch_on_this_cp_rank

    torch.distributed.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    parallel_state.initialize_model_parallel(context_parallel_size=args.cp)
    model_parallel_cuda_manual_seed(0)
    rank = parallel_state.get_context_parallel_rank()
    config = TransformerConfig(num_layers=args.layers, hidden_size=args.hidden, num_attention_heads=args.heads,
                               context_parallel_size=args.cp, bf16=True, params_dtype=torch.bfloat16,
                               pipeline_dtype=torch.bfloat16, calculate_per_token_loss=True)
    capacity = max(b["total_tokens"] for b in batches)
    model = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_with_transformer_engine_spec(),
                     vocab_size=151936, max_sequence_length=capacity, position_embedding_type="rope").cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step(fields: dict, params=None) -> None:
        out = model(fields["tokens"].cuda(), fields["position_ids"].cuda(), None, labels=fields["labels"].cuda(),
                    packed_seq_params=params)
        mask = fields["loss_mask"].cuda()
        loss = (out.float() * mask).sum() / mask.sum().clamp(min=1)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    results = {}
    for arm in ("packed", "padded"):
        torch.cuda.reset_peak_memory_stats()
        real, started = 0, None
        for i, batch in enumerate(batches):
            if i == args.warmup:
                torch.cuda.synchronize()
                started, real = time.perf_counter(), 0
            if arm == "packed":
                text = {**batch, "position_ids": _text_positions(batch), "visual_inputs": None}  # the LM alone
                fields = to_device(cp_slice(text, args.cp, rank), "cuda")
                step(fields, packed_seq_params(fields))  # its cu_seqlens on the GPU, as TE's attention needs
            else:
                step(get_batch_on_this_cp_rank(_padded_rows(batch, args.cp)))
            real += int(batch["cu_seqlens_q"][-1])
        torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        results[arm] = (real / seconds, torch.cuda.max_memory_allocated() / 2**30)
    (p_rate, p_mem), (b_rate, b_mem) = results["packed"], results["padded"]
    out = {"mode": "train", "rank": torch.distributed.get_rank(), "device": torch.cuda.get_device_name(),
           "timed_steps": args.steps - args.warmup, "packed_tokens_per_s": p_rate, "packed_peak_gib": p_mem,
           "padded_tokens_per_s": b_rate, "padded_peak_gib": b_mem}
    torch.distributed.destroy_process_group()
    return out


if __name__ == "__main__":
    sys.exit(main())
