"""Benchmark ``vlmpack write`` against a plain sequential copy of the same source bytes.

    python benchmarks/bench_write.py                       # defaults below
    python benchmarks/bench_write.py --samples 4000 --mean-media-kb 200 --workers 1

What is timed, honestly, in the same run on the same (page-cached) source tars:
  * write: ``stages.write.run`` end to end, from the plan on disk to finished shards
    (sizing pass over the source JSON members, conversation parsing, tar headers,
    .tar.idx, rename per shard, one fsync of every shard at the end, .nv-meta files);
  * copy:  for every pack in plan order, ``os.pread`` of each sample's JSON member and
    media members (the same byte ranges write reads) appended to ONE file, fsync once.
Before each timed run the other side's output (same size) is deleted and the page cache
synced (untimed), so both meet the same background work.
ratio = copy seconds / write seconds (1.0 = write is as fast as a bare copy; target >= 0.9).
Each side runs --repeats times, alternating copy/write; the headline is the median of
the per-pair ratios (each pair ran back to back, so slow drifts in machine load cancel),
with the ratio of medians and of the best runs next to it. Media parts are
random bytes (write never decodes them, so their content does not matter).
"""

from __future__ import annotations

import argparse
import os
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.manifest import Manifest, SampleRecord, ShardRecord, manifest_path
from vlmpack_offline.output.pack_builder import json_part_of
from vlmpack_offline.plan_file import Pack, write_plan
from vlmpack_offline.stages import write
from vlmpack_offline.synthetic.shards import SyntheticSample, write_shard
from vlmpack_offline.tario import iter_samples

CAPACITY = 8192


def build(root: Path, n_samples: int, per_shard: int, mean_media_kb: int, pack_size: int) -> tuple[dict, list[Pack]]:
    rng = random.Random(0)
    raw = {"data": {"wds_dir": str(root / "src"), "work_dir": str(root / "work"), "packed_wds_dir": ""},
           "sample": {"max_token_len": CAPACITY}}
    config = config_from_dict(raw, source="bench")
    ok: list[tuple[str, int]] = []
    with Manifest(manifest_path(config.work_dir)) as manifest:
        for shard_no in range(-(-n_samples // per_shard)):
            name = f"part-{shard_no:05d}.tar"
            samples = []
            for i in range(min(per_shard, n_samples - shard_no * per_shard)):
                n_media = rng.choice((0, 1, 1, 2))
                media = {f"img{j}.jpg": rng.randbytes(int(rng.expovariate(1 / (mean_media_kb * 1024))) + 1)
                         for j in range(n_media)}
                content = [{"type": "image", "image": p} for p in media] + [{"type": "text", "text": f"q {i}"}]
                js = {"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": "a"}]}
                samples.append(SyntheticSample(key=f"k{shard_no:05d}_{i:05d}", json=js, media=media))
            path = write_shard(root / "src" / name, samples)
            records = []
            for seq, s in enumerate(iter_samples(path)):
                records.append(SampleRecord(
                    id=f"{name}/{s.key}", shard=name, seq=seq, key=s.key, media_type="image", token_len=100,
                    media_tokens=0, n_images=len(s.members) - 1, n_videos=0,
                    members=tuple((m.part, m.offset, m.size) for m in s.members)))
                ok.append((records[-1].id, 100))
            stat = path.stat()
            manifest.write_shard(ShardRecord(shard=name, path=str(path), size=stat.st_size,
                                             mtime_ns=stat.st_mtime_ns, n_samples=len(records)), records)
    packs = [Pack(pack_id=i, split="train", media_type="image",
                  sample_ids=tuple(s for s, _ in ok[j : j + pack_size]),
                  sample_token_lens=tuple(n for _, n in ok[j : j + pack_size]))
             for i, j in enumerate(range(0, len(ok), pack_size))]
    rng.shuffle(packs)
    packs = [Pack(pack_id=i, split=p.split, media_type=p.media_type, sample_ids=p.sample_ids,
                  sample_token_lens=p.sample_token_lens) for i, p in enumerate(packs)]
    write_plan(config.work_dir, packs, {"fingerprint": "bench", "capacity": CAPACITY})
    return raw, packs


def plain_copy(raw: dict, packs: list[Pack], target: Path) -> tuple[float, int]:
    config = config_from_dict(raw, source="bench")
    started = time.perf_counter()
    with Manifest(manifest_path(config.work_dir)) as manifest:
        paths = {s.shard: s.path for s in manifest.shards()}
        handles = {shard: open(path, "rb") for shard, path in paths.items()}  # noqa: SIM115
        total = 0
        with open(target, "wb") as out:
            for pack in packs:
                records = manifest.get_samples(pack.sample_ids)
                for sample_id in pack.sample_ids:
                    record = records[sample_id]
                    json_part = json_part_of(record)
                    ranges = [record.member(json_part)] + [(o, n) for p, o, n in record.members if p != json_part]
                    for offset, size in ranges:
                        total += out.write(os.pread(handles[record.shard].fileno(), size, offset))
            out.flush()
            os.fsync(out.fileno())
        for handle in handles.values():
            handle.close()
    return time.perf_counter() - started, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument("--per-shard", type=int, default=500)
    parser.add_argument("--mean-media-kb", type=int, default=100)
    parser.add_argument("--pack-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--maxcount", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temp dir)")
    args = parser.parse_args(argv)
    print("command:", shlex.join([sys.executable, *sys.argv]))
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        raw, packs = build(root, args.samples, args.per_shard, args.mean_media_kb, args.pack_size)
        for tar in (root / "src").glob("*.tar"):  # warm the page cache for both sides alike
            tar.read_bytes()
        write_times, copy_times, out_bytes = [], [], 0
        for rep in range(args.repeats):
            # each side starts after the other's output (same size) was deleted and synced, so both
            # meet the same background work (this ext4 mounts with discard: a delete issues trims)
            shutil.rmtree(root / f"packed-{rep - 1}", ignore_errors=True)
            os.sync()  # untimed: neither side waits on the other's dirty pages
            copy_s, copied = plain_copy(raw, packs, root / f"copy-{rep}.bin")
            copy_times.append(copy_s)
            (root / f"copy-{rep}.bin").unlink()
            os.sync()
            raw["data"]["packed_wds_dir"] = str(root / f"packed-{rep}")
            raw["packed_wds"] = {"maxcount": args.maxcount}
            raw["process"] = {"workers": args.workers}
            result = write.run(config_from_dict(raw, source="bench"))
            write_times.append(result.seconds)
            out_bytes = result.counts["bytes"]
        write_s, copy_s = statistics.median(write_times), statistics.median(copy_times)
        best_ratio = min(copy_times) / min(write_times)
        paired = statistics.median(c / w for c, w in zip(copy_times, write_times, strict=True))
        print(f"source: {args.samples} samples, {len(packs)} packs, {copied / 1e6:.1f} MB of member bytes; "
              f"output {out_bytes / 1e6:.1f} MB in {result.counts['shards']} shards, workers={args.workers}")
        print(f"write: {write_s:.3f} s  ({copied / 1e6 / write_s:.0f} MB/s)   runs {[round(t, 3) for t in write_times]}")
        print(f"copy:  {copy_s:.3f} s  ({copied / 1e6 / copy_s:.0f} MB/s)   runs {[round(t, 3) for t in copy_times]}")
        print(f"ratio (copy s / write s): median of paired runs {paired:.2f}  "
              f"(of medians {copy_s / write_s:.2f}, of best-of-{args.repeats} {best_ratio:.2f})   target >= 0.90")
    return 0


if __name__ == "__main__":
    sys.exit(main())
