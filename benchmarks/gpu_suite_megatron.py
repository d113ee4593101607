"""Part (d): megatron-core's THD path on the carried packs, as far as this machine's packages allow.

Training megatron-core's ``GPTModel`` on THD packs needs TransformerEngine: the local layer spec's
``DotProductAttention`` refuses packed sequences (``assert packed_seq_params is None``,
megatron/core/transformer/dot_product_attention.py). TransformerEngine is built per torch and CUDA
version and its wheels are hundreds of MB, so it cannot travel to a 64 MiB device call; where the
device has it, ``bench_megatron_gpu.run`` trains packed THD vs padded here. Otherwise this part runs
the data half on the real packs (``bench_megatron_gpu``'s dry run: the adapter's THD batches, the
context-parallel slices adding up, the PackedSeqParams format), moves one batch to the device with
``to_device`` and builds its ``PackedSeqParams`` there, and says why training was skipped.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_suite_report import RAN, SKIPPED, Part  # noqa: E402

NO_TE = ("TransformerEngine is not installed and cannot travel (built per torch + CUDA, hundreds of MB vs the "
         "64 MiB a call carries); megatron-core's local attention refuses packed sequences")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def run(suite) -> Part:
    if not _importable("megatron.core"):
        return Part(name="megatron", status=SKIPPED, why="megatron-core does not import here: carry its wheel "
                                                          "(make gpu-prep puts it in .gpu-suite/wheels)")
    import bench_megatron_gpu

    from vlmpack_offline.loader.adapters.megatron import MegatronAdapter, packed_seq_params, to_device

    settings, capacity = suite.settings["megatron"], max(suite.layout.capacities)
    text = suite.layout.model_config()["text_config"]
    args = argparse.Namespace(packed=str(suite.layout.packed_dir(capacity)), processor=str(suite.data.processor), cp=1,
                              steps=settings["steps"], warmup=settings["warmup"], hidden=text["hidden_size"],
                              layers=text["num_hidden_layers"], heads=text["num_attention_heads"], dry_run=True)
    dry = bench_megatron_gpu.run(args)
    lines = [f"C={capacity} dry run: {dry['steps']} packs, {dry['real_tokens']} real tokens; THD {dry['thd_slots']} "
             f"slots ({100 * dry['cp_padding']:.2f}% CP padding) vs padded rows {dry['padded_slots']} "
             f"({100 * dry['padding']:.2f}% padding); PackedSeqParams {dry['qkv_format']}"]
    results, skipped = {"dry_run": dry}, []
    (_, batch), = suite.data.packs_at(capacity, [0])
    moved = to_device(MegatronAdapter.for_packed_dir(args.packed)(batch.to("cpu")), suite.device)  # as a loader hands it
    params = packed_seq_params(moved)
    results["on_device"] = {"cu_seqlens_q": str(params.cu_seqlens_q.device), "tokens": str(moved["tokens"].device)}
    lines.append(f"one THD batch on {suite.device}: tokens on {moved['tokens'].device}, PackedSeqParams "
                 f"cu_seqlens_q on {params.cu_seqlens_q.device} ({params.qkv_format})")
    if suite.device != "cuda":
        skipped.append("THD training: no CUDA device")
    elif not _importable("transformer_engine"):
        skipped.append(f"THD training: {NO_TE}")
    else:
        for name, value in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29533"), ("RANK", "0"), ("WORLD_SIZE", "1"),
                            ("LOCAL_RANK", "0")):
            os.environ.setdefault(name, value)
        train = bench_megatron_gpu.run(argparse.Namespace(**{**vars(args), "dry_run": False}))
        results["train"] = train
        lines.append(f"THD training: packed {train['packed_tokens_per_s']:,.0f} vs padded {train['padded_tokens_per_s']:,.0f} "
                     f"real tokens/s ({train['packed_tokens_per_s'] / train['padded_tokens_per_s']:.2f}x), peak "
                     f"{train['packed_peak_gib']:.1f} / {train['padded_peak_gib']:.1f} GiB")
    return Part(name="megatron", status=RAN, results=results, skipped=tuple(skipped), lines=tuple(lines))
