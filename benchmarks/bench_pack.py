"""Benchmark bucket + plan: 10M (or 100M) samples, time and peak memory; fill vs lower bound per algorithm.

    python benchmarks/bench_pack.py                      # defaults below
    python benchmarks/bench_pack.py --samples 10000000 --manifest-samples 1000000
    python benchmarks/bench_pack.py --samples 100000000 --manifest-samples 0 --table-samples 0

What is timed, honestly:
  A. "arrays" — the stage code on --samples synthetic samples held as the arrays bucket
     loads from the manifest: grouping + packing (stages.bucket.build_bins), plan
     validation + shuffle/split/balance + flattening (stages.plan.validate / make_plan)
     and writing pack_plan.npz (plan_file.write_plan_arrays; no ids: they are resolved
     from the manifest when the plan is read). Not timed here: reading those arrays
     out of sqlite (B times that).
  B. "manifest" — the real stages (bucket.run, plan.run, which include the sqlite
     reads, validation, pack_plan.npz and the stats PNG) on a real manifest.sqlite
     of --manifest-samples rows (building that sqlite is not timed; 0 skips B).
  C. fill ratio vs lower bound for every algorithm (--table-samples, C = 8192; 0 skips C),
     and the per-sample limits path at 100k samples.
  D. alignment for context parallelism (--align-samples; 0 skips D): per training layout, packs
     planned on the aligned lengths vs the aligned lower bound, and how many packs of the
     unaligned plan would overflow C if padded after planning (the failure alignment prevents).
Peak memory is the max RSS (resource.getrusage) of a fresh child process for A and
for B, so building the inputs does not inflate it.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.packing import ALGORITHMS, PackLimits, lower_bound, pack_samples
from vlmpack_offline.packing.cost import pack_costs
from vlmpack_offline.plan_file import plan_path, write_plan_arrays
from vlmpack_offline.stages import bucket, plan
from vlmpack_offline.stages._ok_samples import MEDIA_TYPES, OkSamples

CAPACITY = 8192


def flat_bins(groups: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """build_bins' groups as plan loads them: (indexes, offsets, pack group)."""
    indexes = np.concatenate([g[0] for g in groups.values()])
    offsets, pack_group, base = [np.zeros(1, np.int64)], [], 0
    for code, (_, off, _) in enumerate(groups.values()):
        offsets.append(off[1:] + base)
        base += int(off[-1])
        pack_group.append(np.full(len(off) - 1, code, np.int8))
    return indexes, np.concatenate(offsets), np.concatenate(pack_group)


def synthetic(n: int, capacity: int, seed: int = 0) -> OkSamples:
    """Lognormal lengths (median C/20, sigma 1), a media-type mix; ids are made by ``_id`` when needed.

    Vision-encoder columns as a Qwen-VL scan records them: 4 patches per visual token (2 x 2 merge), an
    image one attention block, a video 4 frames' blocks."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.round(rng.lognormal(np.log(capacity / 20), 1.0, n)), 1, capacity).astype(np.int32)
    codes = rng.choice(3, size=n, p=[0.3, 0.6, 0.1]).astype(np.int8)
    media = np.where(codes == 0, 0, (lengths * 0.8).astype(np.int32)).astype(np.int32)
    patches = media * 4
    frames = np.where(codes == 2, 4, 1)
    blocks = (patches.astype(np.int64) // frames) ** 2 * frames
    return OkSamples(token_len=lengths, media_tokens=media, media_code=codes, media_names=MEDIA_TYPES,
                     encoder_patches=patches, encoder_attention=blocks)


def _id(i: int) -> str:
    return f"shard-{i // 10000:06d}.tar/sample-{i:09d}"


def _config(work_dir: Path, balance: int | None = 8):
    return config_from_dict({"data": {"work_dir": str(work_dir)}, "sample": {"max_token_len": CAPACITY},
                             "parallel": {"data_parallel_size": balance}, "split": {"val_ratio": 0.01}},
                            source="bench")


def bench_arrays(n: int, balance: int | None, queue) -> None:
    t0 = time.perf_counter()
    samples = synthetic(n, CAPACITY)
    t_gen = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        config = _config(Path(tmp), balance)
        t1 = time.perf_counter()
        groups = bucket.build_bins(samples, config)
        t_bucket = time.perf_counter() - t1
        t2 = time.perf_counter()
        indexes, offsets, codes = flat_bins(groups)
        plan.validate(indexes, offsets, samples.token_len, samples.n, CAPACITY, np.zeros(0, np.int32))
        costs = pack_costs(plan.cost_model(config), samples.token_len, samples.encoder_patches,
                           samples.encoder_attention, indexes, offsets)
        arrays, _ = plan.make_plan(indexes, offsets, codes, tuple(groups), samples.token_len,
                                   samples.media_tokens, config, costs)
        del costs
        del indexes
        t_order = time.perf_counter() - t2
        t3 = time.perf_counter()
        write_plan_arrays(tmp, arrays, {"bench": True})
        t_write = time.perf_counter() - t3
        size = plan_path(tmp).stat().st_size
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
    queue.put(dict(gen=t_gen, bucket=t_bucket, order=t_order, write=t_write, peak=peak, packs=arrays.n_packs,
                   lb=lower_bound(samples.token_len, CAPACITY), plan_bytes=size))


def make_manifest(work_dir: Path, samples: OkSamples, rows: int = 200_000) -> float:
    t0 = time.perf_counter()
    names = samples.media_names
    with Manifest(manifest_path(work_dir)) as manifest:
        for first in range(0, samples.n, rows):
            part = np.arange(first, min(first + rows, samples.n))
            with manifest.conn:
                manifest.conn.executemany(
                    "INSERT INTO samples (id, shard, seq, key, media_type, token_len, media_tokens, n_images, "
                    "n_videos, members, status, error, encoder_patches, encoder_attention) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    ((sample_id, f"shard-{i // 10000:06d}.tar", i % 10000, f"sample-{i:09d}", names[c], n, m,
                      0, 0, "[]", "ok", "", p, b)
                     for i, sample_id, n, m, c, p, b in zip(part.tolist(), map(_id, part.tolist()),
                                                            samples.token_len[part].tolist(),
                                                            samples.media_tokens[part].tolist(),
                                                            samples.media_code[part].tolist(),
                                                            samples.encoder_patches[part].tolist(),
                                                            samples.encoder_attention[part].tolist(), strict=True)))
        manifest.set_meta({"fingerprint": "bench"})
    return time.perf_counter() - t0


def bench_stages(work_dir: str, queue) -> None:
    config = _config(Path(work_dir))
    t0 = time.perf_counter()
    bucket.run(config)
    t_b = time.perf_counter() - t0
    t1 = time.perf_counter()
    plan.run(config)
    t_p = time.perf_counter() - t1
    queue.put(dict(bucket=t_b, plan=t_p, peak=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20))


def _in_child(target, *args) -> dict:
    """Run in a fresh process so its peak RSS is its own."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=target, args=(*args, queue))
    child.start()
    result = queue.get()
    child.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=10_000_000)
    parser.add_argument("--manifest-samples", type=int, default=1_000_000)
    parser.add_argument("--table-samples", type=int, default=1_000_000)
    parser.add_argument("--align-samples", type=int, default=1_000_000)
    parser.add_argument("--compare-unbalanced", action="store_true", help="A also without step balancing")
    args = parser.parse_args()
    print("command:", shlex.join([sys.executable, *sys.argv]))

    for balance in (8, None) if args.compare_unbalanced else (8,):
        a = _in_child(bench_arrays, args.samples, balance)
        total = a["bucket"] + a["order"] + a["write"]
        said = f"balanced for {balance} ranks" if balance else "no step balancing"
        print(f"\nA. {args.samples:,} samples from arrays (C={CAPACITY}, group_by media_type, BFD, {said}, val 1%)")
        print(f"   bucket (group + BFD)        {a['bucket']:7.2f} s")
        print(f"   plan (validate+cost+order+flatten) {a['order']:7.2f} s")
        print(f"   plan (write npz, {a['plan_bytes'] / 2**20:.0f} MiB)  {a['write']:7.2f} s")
        print(f"   total bucket + plan         {total:7.2f} s   peak RSS {a['peak']:.2f} GiB "
              f"(incl. {a['gen']:.1f} s synthetic data generation, not timed)")
        print(f"   packs {a['packs']:,}  lower bound {a['lb']:,}  gap {100 * (a['packs'] / a['lb'] - 1):.4f}%")

    if args.manifest_samples:
        bench_manifest(args.manifest_samples)
    if args.table_samples:
        bench_table(args.table_samples)
    if args.align_samples:
        bench_alignment(args.align_samples)


def bench_manifest(n: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t_make = make_manifest(Path(tmp), synthetic(n, CAPACITY, seed=1))
        b = _in_child(bench_stages, tmp)
    print(f"\nB. real stages on a {n:,}-row manifest.sqlite (built in {t_make:.1f} s, not timed)")
    print(f"   bucket.run {b['bucket']:.2f} s + plan.run {b['plan']:.2f} s (sqlite reads, checks, plan file, "
          f"stats PNG) = {b['bucket'] + b['plan']:.2f} s   peak RSS {b['peak']:.2f} GiB")


def bench_table(n: int) -> None:
    lengths = synthetic(n, CAPACITY, seed=2).token_len
    bound = lower_bound(lengths, CAPACITY)
    print(f"\nC. fill vs lower bound, {n:,} lognormal samples (median C/20), C={CAPACITY}, "
          f"one group, lower bound {bound:,}")
    print("| algorithm | limits | packs | fill ratio | packs / lower bound | seconds |")
    print("|---|---|---|---|---|---|")
    rows = [(name, PackLimits(capacity=CAPACITY), lengths) for name in ALGORITHMS]
    small = lengths[:100_000]
    rows += [(name, PackLimits(capacity=CAPACITY, max_samples=16, max_media_tokens=6144), small) for name in ALGORITHMS]
    for name, limits, data in rows:
        t0 = time.perf_counter()
        bins = pack_samples(data, limits, algorithm=name, media_tokens=(data * 0.8).astype(np.int32))
        dt = time.perf_counter() - t0
        lb = lower_bound(data, CAPACITY)
        tag = "none" if limits.unlimited else f"16 samples, 6144 media (n={len(data):,})"
        fill = int(data.astype(np.int64).sum()) / (bins.n_packs * CAPACITY)
        print(f"| {name} | {tag} | {bins.n_packs:,} | {fill:.5f} | {bins.n_packs / lb:.5f} | {dt:.2f} |")


def bench_alignment(n: int) -> None:
    from vlmpack_offline.packing.alignment import Alignment

    lengths = synthetic(n, CAPACITY, seed=3).token_len
    plain = pack_samples(lengths, PackLimits(capacity=CAPACITY))
    print(f"\nD. alignment, {n:,} lognormal samples (median C/20), C={CAPACITY}, best_fit_decreasing")
    print("| layout | multiple | packs | aligned lower bound | gap | fill (slots) | padding | unaligned plan: packs "
          "over C once padded |")
    print("|---|---|---|---|---|---|---|---|")
    layouts = [dict(context_parallel_size=cp) for cp in (1, 2, 4, 8)]
    layouts.append(dict(context_parallel_size=2, tensor_model_parallel_size=8, sequence_parallel=True))
    for layout in layouts:
        alignment = Alignment(**layout)
        aligned = alignment.aligned(lengths)
        fits = aligned <= CAPACITY
        t0 = time.perf_counter()
        bins = pack_samples(aligned[fits], PackLimits(capacity=CAPACITY))
        dt = time.perf_counter() - t0
        lb = lower_bound(aligned[fits], CAPACITY)
        slots, real = int(aligned[fits].sum()), int(lengths[fits].astype(np.int64).sum())
        over = int((plain.pack_sums(aligned) > CAPACITY).sum())
        short = {"context_parallel_size": "cp", "tensor_model_parallel_size": "tp", "sequence_parallel": "sp"}
        name = ", ".join(f"{short[k]}={v}" for k, v in layout.items())
        print(f"| {name} | {alignment.multiple} | {bins.n_packs:,} | {lb:,} | {100 * (bins.n_packs / lb - 1):.4f}% | "
              f"{slots / (bins.n_packs * CAPACITY):.5f} | {100 * (slots - real) / slots:.3f}% | "
              f"{over:,} of {plain.n_packs:,} ({dt:.1f} s) |")


if __name__ == "__main__":
    main()
