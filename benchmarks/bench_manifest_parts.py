"""The manifest's two layouts side by side: what the driver commits, and what reading the ok rows costs.

    python benchmarks/bench_manifest_parts.py --samples 2000000 --shards 200

Builds the same synthetic rows (``SampleRecord`` with a member list, 1 in 20 dropped) both ways through
the real write paths: ``Manifest.write_shard`` (single: the driver inserts every row) and
``write_shard_part`` + ``Manifest.commit_part`` (parts: the task writes its part, the driver commits
the shard row and its sums). Reports the time each side spends, the size of ``manifest.sqlite``, and
``load_ok_samples(with_ids=True)`` (what bucket and plan read) on each, checking that both read the same.

    python benchmarks/bench_manifest_parts.py --samples 3000000 --shards 300 --layouts single --peak-rss

``--peak-rss``: bucket's load (no ids) in a fresh process per way, its peak RSS (``VmHWM``) over the
process's RSS before the load: in memory (``in_memory_up_to=None``) and memory-mapped into
``bucket-scratch`` (``in_memory_up_to`` below the ok count, as past ``packing.partition_samples``).

    python benchmarks/bench_manifest_parts.py --samples 3000000 --shards 300 --layouts single --ids-rss

``--ids-rss``: what write's driver pays for the packs' ids. A plan over every ok sample (8 a pack, in a
shuffled order, as a length-sorted plan reads them) is written beside the manifest; then, each in a fresh
process with the plan's arrays already loaded, ``read_plan`` through every pack: ids in memory
(``load_ok_samples(with_ids=True)``, as at or below ``packing.partition_samples``), writing the id store
``ok-ids`` (``ok_id_store``), and from the store (``ids_on_disk=True``): peak RSS (``VmHWM``) over the RSS
before, and the ids read compared across the ways (a digest).
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from vlmpack_offline.manifest import Manifest, SampleRecord, ShardRecord, manifest_path, write_shard_part
from vlmpack_offline.manifest_parts import sums_of
from vlmpack_offline.stages._ok_samples import load_ok_samples


def shard_rows(shard: str, n: int, rng: random.Random) -> list[SampleRecord]:
    rows = []
    for seq in range(n):
        token_len = rng.randint(64, 4096)
        dropped = rng.random() < 0.05
        rows.append(SampleRecord(
            id=f"{shard}/k{seq:07d}", shard=shard, seq=seq, key=f"k{seq:07d}", media_type="image",
            token_len=0 if dropped else token_len, media_tokens=0 if dropped else token_len // 2, n_images=1,
            n_videos=0, members=(("json", 512 * seq, 300), ("jpg", 512 * seq + 512, 40_000)),
            status="corrupt_media" if dropped else "ok", error="cut JPEG" if dropped else "",
            encoder_patches=token_len * 2, encoder_attention=(token_len * 2) ** 2,
        ))
    return rows


def build(work: Path, layout: str, samples: int, shards: int) -> tuple[float, float]:
    """(seconds the tasks spent writing rows, seconds the driver spent committing)."""
    rng = random.Random(0)
    task_s = driver_s = 0.0
    per_shard = samples // shards
    with Manifest(manifest_path(work)) as manifest:
        manifest.set_meta({"manifest_layout": layout})
        for i in range(shards):
            shard = f"src/shard-{i:06d}.tar"
            rows = shard_rows(shard, per_shard, rng)
            record = ShardRecord(shard=shard, path=f"/data/{shard}", size=1, mtime_ns=1, n_samples=len(rows))
            if layout == "single":
                start = time.perf_counter()
                manifest.write_shard(record, rows)
                driver_s += time.perf_counter() - start
            else:
                start = time.perf_counter()
                write_shard_part(work, shard, rows)
                sums = sums_of(shard, rows)
                task_s += time.perf_counter() - start
                start = time.perf_counter()
                manifest.commit_part(record, sums)
                driver_s += time.perf_counter() - start
    return task_s, driver_s


# VmHWM, not ru_maxrss: Linux carries the forking parent's high-water mark into ru_maxrss across exec
_PEAK = """
import sys, time
from vlmpack_offline.stages._ok_samples import load_ok_samples
def kib(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key))
before, start = kib("VmRSS:"), time.perf_counter()
samples = load_ok_samples(sys.argv[1], in_memory_up_to=None if sys.argv[2] == "none" else int(sys.argv[2]))
seconds = time.perf_counter() - start
print(samples.n, before, kib("VmHWM:"), seconds)
"""


def peak_rss(work: Path, in_memory_up_to: int | None) -> tuple[int, float, float]:
    """(ok samples, MiB the load added to the process's peak RSS, seconds) in a fresh process."""
    out = subprocess.run([sys.executable, "-c", _PEAK, str(work), str(in_memory_up_to).lower()], check=True,
                         capture_output=True, text=True).stdout.split()
    n, before, peak, seconds = int(out[0]), int(out[1]), int(out[2]), float(out[3])
    return n, (peak - before) / 1024, seconds


_IDS = """
import hashlib, sys, time
from vlmpack_offline.plan_file import read_plan, read_plan_arrays
from vlmpack_offline.stages._ok_samples import ok_id_store
def kib(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key))
plan = read_plan_arrays(sys.argv[1])
before, start, digest, n = kib("VmRSS:"), time.perf_counter(), hashlib.sha256(), 0
if sys.argv[2] == "write-store":
    n = ok_id_store(sys.argv[1]).n
else:
    for pack in read_plan(sys.argv[1], plan, ids_on_disk=sys.argv[2] == "store"):
        digest.update("\\0".join(pack.sample_ids).encode())
        n += len(pack.sample_ids)
print(n, before, kib("VmHWM:"), time.perf_counter() - start, digest.hexdigest()[:16])
"""


def ids_rss(work: Path) -> None:
    """Write a plan over every ok sample beside the manifest, then each way of reading its ids in a fresh process."""
    from vlmpack_offline.plan_file import PlanArrays, write_plan_arrays
    from vlmpack_offline.stages._ok_samples import manifest_fingerprint

    with Manifest(manifest_path(work)) as manifest:
        manifest.set_meta({"fingerprint": "bench-ids"})
        n_ok = manifest.status_counts()["ok"]
    order = np.random.default_rng(0).permutation(n_ok)
    n_packs = -(-n_ok // 8)
    write_plan_arrays(work, PlanArrays(
        pack_offsets=np.minimum(np.arange(n_packs + 1, dtype=np.int64) * 8, n_ok), token_len=np.ones(n_ok, np.int32),
        split=np.zeros(n_packs, np.int8), group=np.zeros(n_packs, np.int8), media_tokens=np.zeros(n_packs, np.int64),
        group_names=("image",), sample_index=order), {"manifest_fingerprint": manifest_fingerprint(work)})
    for way in ("in memory", "write-store", "store"):
        out = subprocess.run([sys.executable, "-c", _IDS, str(work), way], check=True, capture_output=True,
                             text=True).stdout.split()
        n, mib, seconds = int(out[0]), (int(out[2]) - int(out[1])) / 1024, float(out[3])
        print(f"ids {way:11s}: +{mib:8.1f} MiB peak RSS ({mib * 2**20 / n:5.1f} bytes/sample), {seconds:6.2f} s, "
              f"{n:,} ids" + (f", digest {out[4]}" if way != "write-store" else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2_000_000)
    parser.add_argument("--shards", type=int, default=200)
    parser.add_argument("--layouts", nargs="+", choices=("single", "parts"), default=["single", "parts"])
    parser.add_argument("--peak-rss", action="store_true", help="bucket's load in memory and mapped: peak RSS")
    parser.add_argument("--ids-rss", action="store_true", help="write's ids in memory and from ok-ids: peak RSS")
    args = parser.parse_args()
    loaded = {}
    with tempfile.TemporaryDirectory() as tmp:
        for layout in args.layouts:
            work = Path(tmp) / layout
            task_s, driver_s = build(work, layout, args.samples, args.shards)
            size = manifest_path(work).stat().st_size / 2**20
            start = time.perf_counter()
            loaded[layout] = load_ok_samples(work, with_ids=True)
            read_s = time.perf_counter() - start
            print(f"{layout:6s}: tasks write rows {task_s:6.2f} s, driver commits {driver_s:6.2f} s, "
                  f"manifest.sqlite {size:8.1f} MiB, load_ok_samples {read_s:5.2f} s ({loaded[layout].n:,} ok rows)")
            if args.ids_rss:
                ids_rss(work)
            if args.peak_rss:
                loaded.pop(layout, None)
                for way, up_to in (("in memory", None), ("mapped", 1000)):
                    n, mib, seconds = peak_rss(work, up_to)
                    print(f"{layout:6s}: bucket's load {way:9s}: +{mib:8.1f} MiB peak RSS ({mib * 2**20 / n:5.1f} "
                          f"bytes/sample), {seconds:5.2f} s, {n:,} ok rows")
    if len(loaded) < 2:
        return
    a, b = loaded["single"], loaded["parts"]
    assert np.array_equal(a.token_len, b.token_len) and a.id_chunks == b.id_chunks, "the layouts read differently"


if __name__ == "__main__":
    main()
