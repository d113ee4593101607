"""Bucket + plan at 10M ... 1B samples: time and peak RSS, partitioned (``packing.partition_samples``) vs in memory.

    python benchmarks/bench_billion.py --samples 10M,100M,300M --partition 25M --in-memory-up-to 100M

Per size N, the synthetic samples of ``bench_pack.synthetic`` (lognormal lengths, median C/20, a media-type
mix, Qwen-VL encoder columns; C = 8192) are generated 10M at a time into ``.npy`` columns under ``--dir``
(not timed; the bins' layout), then each planner runs in a fresh child process whose max RSS
(``resource.getrusage``) is its peak, page-cache pages of the mapped files it touched included:

  partitioned  the columns memory-mapped (``np.load(mmap_mode="r")``, as ``plan.run`` maps bins/ past the
               setting); ``bucket.build_bins`` packs partitions of ``--partition`` samples; ``plan.validate``
               a partition at a time; ``pack_costs``; ``plan.make_plan`` with its per-sample arrays in
               scratch files; ``write_plan_arrays`` (pack_plan.npz). Only for N > ``--partition``: at or
               below it the stages are today's planner, the next line.
  in memory    the same columns read whole into memory and the same calls with no partition and no scratch:
               today's planner, run only up to ``--in-memory-up-to`` (it needs ~48 bytes a sample).

Balanced for 8 data-parallel ranks, val 1%, as ``bench_pack.py`` A (which this extends; it does not time
the sqlite reads or the stats PNG either). Reported: seconds for bucket / plan / write, peak RSS, packs,
the gap to the lower bound (sum over media groups, as bucket's meta), and the schedule's step balance
(slowest rank / mean per step: p50, p99, worst). Disk: about 45 bytes a sample at once (21 of columns,
12 of pack_plan.npz, 12 of scratch while it is written).
"""

from __future__ import annotations

import argparse
import resource
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap

sys.path.insert(0, str(Path(__file__).parent))
from bench_pack import CAPACITY, _in_child, flat_bins, synthetic  # noqa: E402

from vlmpack_offline.config import config_from_dict  # noqa: E402
from vlmpack_offline.packing.cost import pack_costs  # noqa: E402
from vlmpack_offline.plan_file import plan_path, write_plan_arrays  # noqa: E402
from vlmpack_offline.schedule import slot_balance  # noqa: E402
from vlmpack_offline.stages import bucket, plan  # noqa: E402
from vlmpack_offline.stages._ok_samples import MEDIA_TYPES, OkSamples  # noqa: E402

COLUMNS = ("token_len", "media_tokens", "media_code", "encoder_patches", "encoder_attention")
PIECE = 10_000_000  # samples generated at a time


def generate(folder: Path, n: int) -> None:
    """The columns of ``n`` synthetic samples, ``PIECE`` at a time (seed = piece number), as .npy files."""
    folder.mkdir(parents=True, exist_ok=True)
    first_piece = synthetic(min(n, PIECE), CAPACITY, seed=0)
    outs = {c: open_memmap(folder / f"{c}.npy", "w+", getattr(first_piece, c).dtype, (n,)) for c in COLUMNS}
    for k, first in enumerate(range(0, n, PIECE)):
        piece = first_piece if k == 0 else synthetic(min(PIECE, n - first), CAPACITY, seed=k)
        for c in COLUMNS:
            outs[c][first : first + piece.n] = getattr(piece, c)
    for out in outs.values():
        out.flush()


def bound_of(folder: Path) -> int:
    """The lower bound as bucket's meta sums it: per media group, over the samples that fit."""
    lengths = np.load(folder / "token_len.npy", mmap_mode="r")
    codes = np.load(folder / "media_code.npy", mmap_mode="r")
    total, halves = np.zeros(len(MEDIA_TYPES), np.int64), np.zeros(len(MEDIA_TYPES), np.int64)
    for first in range(0, lengths.size, PIECE):
        n, c = lengths[first : first + PIECE], codes[first : first + PIECE]
        fits = n <= CAPACITY
        total += np.bincount(c[fits], weights=n[fits], minlength=len(MEDIA_TYPES)).astype(np.int64)
        halves += np.bincount(c[fits & (n > CAPACITY // 2)], minlength=len(MEDIA_TYPES))
    return int(sum(max(-(-int(t) // CAPACITY), int(h)) for t, h in zip(total, halves, strict=True)))


def _config(work_dir: Path, partition: int):
    return config_from_dict({"data": {"work_dir": str(work_dir)}, "sample": {"max_token_len": CAPACITY},
                             "parallel": {"data_parallel_size": 8}, "split": {"val_ratio": 0.01},
                             "packing": {"partition_samples": partition}}, source="bench")


def run_planner(folder: str, partition: int, mapped: bool, queue) -> None:
    folder = Path(folder)
    columns = {c: np.load(folder / f"{c}.npy", mmap_mode="r" if mapped else None) for c in COLUMNS}
    samples = OkSamples(media_names=MEDIA_TYPES, **columns)
    work = folder / "work"
    config = _config(work, partition)
    bucket.bins_dir(config).mkdir(parents=True, exist_ok=True)
    out_of_core = samples.n > partition
    t0 = time.perf_counter()
    groups = bucket.build_bins(samples, config)
    t_bucket = time.perf_counter() - t0
    peak_bucket = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # max RSS is monotonic: bucket's peak
    t1 = time.perf_counter()
    if out_of_core:  # as the stages hand them over: bucket saves each group's packs, plan maps and joins them
        meta = {"groups": [{"name": name} for name in groups]}
        for name, (group_indexes, group_offsets, _) in groups.items():
            np.save(bucket.bins_dir(config) / f"{name}.indexes.npy", group_indexes)
            np.save(bucket.bins_dir(config) / f"{name}.offsets.npy", group_offsets)
        del groups, group_indexes, group_offsets
        indexes, offsets, codes, _ = plan._load_bins(config, meta, work / "plan-scratch")
    else:  # today's: build_bins' arrays joined in memory (bench_pack.py)
        indexes, offsets, codes = flat_bins(groups)
        del groups
    overlong = np.zeros(0, np.int32)  # synthetic lengths are clipped to C
    plan.validate(indexes, offsets, samples.token_len, samples.n, CAPACITY, overlong,
                  rows_at_once=partition if out_of_core else None)
    costs = pack_costs(plan.cost_model(config), samples.token_len, samples.encoder_patches,
                       samples.encoder_attention, indexes, offsets)
    arrays, schedule = plan.make_plan(indexes, offsets, codes, ("text", "image", "video"), samples.token_len,
                                      samples.media_tokens, config, costs,
                                      scratch=work / "plan-scratch" if out_of_core else None)
    del indexes, costs
    t_plan = time.perf_counter() - t1
    t2 = time.perf_counter()
    write_plan_arrays(work, arrays, {"bench": True})
    t_write = time.perf_counter() - t2
    ratios = slot_balance(arrays.cost, schedule)
    p50, p99 = np.percentile(ratios, [50, 99])
    queue.put(dict(bucket=t_bucket, plan=t_plan, write=t_write, packs=arrays.n_packs, p50=float(p50),
                   p99=float(p99), worst=float(ratios.max()), plan_bytes=plan_path(work).stat().st_size,
                   peak=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, peak_bucket=peak_bucket))
    del arrays
    shutil.rmtree(work)


def _count(text: str) -> int:
    scale = {"K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9}
    text = text.strip().upper()
    return int(float(text[:-1]) * scale[text[-1]]) if text[-1] in scale else int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", default="10M,100M,300M", help="comma-separated sizes (10M, 1B, ...)")
    parser.add_argument("--partition", default="25M", help="packing.partition_samples of the partitioned planner")
    parser.add_argument("--in-memory-up-to", default="100M", help="run today's in-memory planner up to this size")
    parser.add_argument("--dir", default=None, help="where the columns and plans go (default: a temporary folder)")
    args = parser.parse_args()
    print("command:", shlex.join([sys.executable, *sys.argv]), flush=True)
    partition, in_memory_up_to = _count(args.partition), _count(args.in_memory_up_to)
    if args.dir:
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="bench_billion-", dir=args.dir))
    rows = []
    try:
        for n in map(_count, args.samples.split(",")):
            folder = root / f"n{n}"
            t0 = time.perf_counter()
            _in_child(_generate_child, str(folder), n)
            t_gen = time.perf_counter() - t0
            bound = bound_of(folder)
            print(f"\n{n:,} samples: columns generated in {t_gen:.0f} s (not timed below), lower bound {bound:,}",
                  flush=True)
            runs = [("partitioned", partition, True)] if n > partition else []  # else it is the in-memory planner
            if n <= max(in_memory_up_to, partition):
                runs.append(("in memory (today's)", max(n, 1000), False))
            for name, size, mapped in runs:
                r = _in_child(run_planner, str(folder), size, mapped)
                total = r["bucket"] + r["plan"] + r["write"]
                row = (f"| {n:,} | {name} | {r['bucket']:.1f} | {r['plan']:.1f} | {r['write']:.1f} | {total:.1f} | "
                       f"{r['peak']:.2f} ({r['peak_bucket']:.2f}) | {r['packs']:,} | {100 * (r['packs'] / bound - 1):.4f}% | "
                       f"{r['p50']:.4f} / {r['p99']:.4f} / {r['worst']:.4f} |")
                print(row, flush=True)
                rows.append(row)
            shutil.rmtree(folder)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\npartition_samples = {partition:,}; columns memory-mapped for the partitioned runs")
    print("| samples | planner | bucket s | plan s | write s | total s | peak RSS GiB (at bucket's end) | packs | gap to bound | "
          "step balance p50 / p99 / worst |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


def _generate_child(folder: str, n: int, queue) -> None:
    generate(Path(folder), n)
    queue.put({})


if __name__ == "__main__":
    main()
