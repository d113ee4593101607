"""Part (a): training tokens/s on vlmpack packs vs the same samples padded per batch, at every carried capacity.

For each capacity C the first ``warmup + steps`` packs of one reader's epoch order are trained on,
one pack per optimizer step (``PackBatch.model_kwargs``). The padded baseline trains on exactly
those packs' sub-samples, each encoded alone, in a seeded random order, cut into micro-batches of
at most C token slots (rows x longest, padded to the longest with ``attention_mask``: the memory a
pack takes) and spread over as many optimizer steps as the packed arm takes. Both arms use the same
model, AdamW and step function (``bench_train_gpu.timed_steps``); each is timed over its steps after
the warm-up ones, real (non-pad) tokens only.

Both arms run once per attention implementation: ``VARLEN`` (the loader's ``varlen_attention``; the
padded rows are one causal sequence each, pads computed and wasted), ``sdpa`` (transformers' own:
the 4D block mask for a pack, the padding mask for rows) and ``flash_attention_2`` where flash-attn
imports. An arm that raises (a kernel that refuses its arguments, out of memory) is a failure of
that arm; the others still run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train_gpu import timed_steps  # noqa: E402
from bench_trainer_gpu import PadCollator  # noqa: E402
from gpu_suite_attention import VARLEN, use_attention  # noqa: E402
from gpu_suite_data import to_device  # noqa: E402
from gpu_suite_report import RAN, Part, Target  # noqa: E402

TARGET_RATIO = 1.8  # the target at C = 16384 (Hugging Face's published padding-free result: 1.4-2x)


def padded_steps(items: list[dict], *, n_steps: int, capacity: int, pad_id: int, seed: int = 1):
    """``(steps, stats)``: micro-batches of at most ``capacity`` slots from ``items`` in a seeded random order,
    cut into ``n_steps`` optimizer steps; each step ``(list of collated kwargs, real tokens)`` on the host."""
    collate = PadCollator(pad_id)
    micro, current, longest = [], [], 0
    for i in np.random.default_rng(seed).permutation(len(items)).tolist():
        length = len(items[i]["input_ids"])
        if current and (len(current) + 1) * max(longest, length) > capacity:
            micro.append(current)
            current, longest = [], 0
        current.append(items[i])
        longest = max(longest, length)
    micro.append(current)
    batches = [collate(group) for group in micro]
    steps = [([batches[i] for i in chunk], sum(int(batches[i]["attention_mask"].sum()) for i in chunk))
             for chunk in np.array_split(np.arange(len(batches)), min(n_steps, len(batches)))]
    slots = sum(int(b["input_ids"].numel()) for b in batches)
    real = sum(int(b["attention_mask"].sum()) for b in batches)
    return steps, {"micro_batches": len(batches), "slots": slots, "real_tokens": real, "slot_fill": real / slots}


def _arm(suite, model, steps, warmup: int) -> dict:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    if suite.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    rate = timed_steps(model, optimizer, steps, warmup, suite.device)
    peak = torch.cuda.max_memory_allocated() / 2**30 if suite.device == "cuda" else None
    del optimizer
    return {"real_tokens_per_s": rate, "peak_gib": peak}


def run(suite) -> Part:
    settings = suite.settings["throughput"]
    model, attentions = suite.model(), suite.attentions()
    warmup, n = settings["warmup"], settings["warmup"] + settings["steps"]
    results, lines, failures, skipped, targets = {}, [], [], [], []
    lines.append(f"{'C':>6} {'attention':>22} {'packed tok/s':>13} {'padded tok/s':>13} {'ratio':>6} "
                 f"{'padded fill':>11} {'peak GiB p/p':>13}")
    for capacity in suite.layout.capacities:
        suite.log(f"C={capacity}: reading {n} packs and their samples alone")
        packs = suite.data.packs(capacity, limit=n)
        refs = [(index, sub) for index, batch in packs for sub in range(batch.n_segments)]
        items = suite.data.alone(capacity, refs)
        pad_id = suite.data.encoder(capacity).counter.tokenizer.pad_token_id or 0
        host_steps, stats = padded_steps(items, n_steps=len(packs), capacity=capacity, pad_id=pad_id)
        padded = [([to_device(kw, suite.device, suite.dtype) for kw in micro], real) for micro, real in host_steps]
        del items, host_steps
        row = {"packs": len(packs), "timed_steps": len(packs) - warmup, "samples": len(refs), "padded": stats,
               "packed_tokens": sum(b.seq_len for _, b in packs), "by_attention": {}}
        for attention in attentions:
            use_attention(model, attention)
            packed = [([b.model_kwargs(attention)], b.seq_len) for _, b in packs]
            arms = {}
            for arm, steps in (("packed", packed), ("padded", padded)):
                try:
                    arms[arm] = _arm(suite, model, steps, warmup)
                except Exception as error:  # noqa: BLE001 - one arm's kernel error or OOM; the others still run
                    arms[arm] = {"error": f"{type(error).__name__}: {error}"}
                    if isinstance(error, torch.OutOfMemoryError):  # a size this card cannot hold: measured, not broken
                        arms[arm] = {"error": "out of memory on this card"}
                        skipped.append(f"C={capacity} {arm} {attention}: out of memory on this card")
                    else:
                        failures.append(f"C={capacity} {arm} {attention}: {arms[arm]['error']}")
                    if suite.device == "cuda":
                        torch.cuda.empty_cache()
            row["by_attention"][attention] = arms
            lines.append(_line(capacity, attention, arms, stats))
            if capacity == max(suite.layout.capacities) and attention in (VARLEN, "flash_attention_2") \
                    and "error" not in arms["packed"] and "error" not in arms["padded"]:  # the issue's: C = 16384
                ratio = arms["packed"]["real_tokens_per_s"] / arms["padded"]["real_tokens_per_s"]
                targets.append(Target(name=f"packed / padded real tokens/s at C={capacity} >= {TARGET_RATIO} "
                                           f"({attention})", value=f"{ratio:.2f}x", met=ratio >= TARGET_RATIO))
        if capacity == max(suite.layout.capacities) and not targets:
            targets.append(Target(name=f"packed / padded real tokens/s at C={capacity} >= {TARGET_RATIO}",
                                  value=f"not measured: no arm of {VARLEN} or flash_attention_2 ran", met=None))
        results[str(capacity)] = row
        del packs, padded
        if suite.device == "cuda":
            torch.cuda.empty_cache()
    use_attention(model, suite.training_attention())
    return Part(name="throughput", status=RAN, results=results, failures=tuple(failures), skipped=tuple(skipped),
                targets=tuple(targets), lines=tuple(lines))


def _line(capacity: int, attention: str, arms: dict, stats: dict) -> str:
    p, d = arms["packed"], arms["padded"]
    if "error" in p or "error" in d:
        return f"{capacity:>6} {attention:>22} " + "; ".join(f"{k}: {v['error']}" for k, v in arms.items() if "error" in v)
    peak = f"{p['peak_gib']:.1f}/{d['peak_gib']:.1f}" if p["peak_gib"] is not None else "-"
    return (f"{capacity:>6} {attention:>22} {p['real_tokens_per_s']:>13,.0f} {d['real_tokens_per_s']:>13,.0f} "
            f"{p['real_tokens_per_s'] / d['real_tokens_per_s']:>6.2f} {stats['slot_fill']:>11.3f} {peak:>13}")
