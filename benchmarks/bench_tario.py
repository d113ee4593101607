"""Tar member reading: the fast header reader against stdlib ``tarfile``, in the same run.

Builds one shard of ``--samples`` webdataset samples (a small ``.json`` and a small ``.jpg`` member each:
the shape where per-member header cost dominates a scan) in a temporary folder, checks that both readers
give the same members, then times ``tario.iter_members(path, reader=...)`` over the whole shard for each
reader, ``--repeats`` passes alternating between them, and reports members/s (min / median / max) and the
ratio of the medians. ``--format pax`` writes a PAX header before every member, ``gnu`` none.

    python benchmarks/bench_tario.py [--samples 5000] [--repeats 5] [--format gnu|pax]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vlmpack_offline.synthetic.shards import SyntheticSample, write_shard  # noqa: E402
from vlmpack_offline.tario import iter_members  # noqa: E402

READERS = ("fast", "tarfile")


def build_shard(folder: Path, n_samples: int, fmt: str) -> Path:
    samples = [
        SyntheticSample(key=f"{i // 1000:03d}/sample{i:08d}", json={"i": i, "text": "x" * (i % 300)},
                        media={"jpg": bytes([i % 256]) * (200 + i % 1500)})
        for i in range(n_samples)
    ]  # fmt: skip
    return write_shard(folder / "shard.tar", samples, pax=fmt == "pax")


def one_pass(path: Path, reader: str) -> tuple[float, int]:
    start = time.perf_counter()
    count = sum(1 for _ in iter_members(path, reader=reader))
    return time.perf_counter() - start, count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=5000, help="samples in the shard (two members each)")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per reader")
    parser.add_argument("--format", choices=("gnu", "pax"), default="gnu", help="tar header format")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        path = build_shard(Path(tmp), args.samples, args.format)
        fast, reference = (list(iter_members(path, reader=r)) for r in READERS)
        if fast != reference:
            print("the readers disagree on this shard: not timing them", file=sys.stderr)
            return 1
        rates: dict[str, list[float]] = {r: [] for r in READERS}
        for _ in range(args.repeats):
            for reader in READERS:
                seconds, count = one_pass(path, reader)
                rates[reader].append(count / seconds)
        size = path.stat().st_size
    print(f"shard: {len(fast):,} members ({args.samples:,} samples, {args.format} headers), {size / 2**20:.1f} MiB")
    for reader in READERS:
        low, mid, high = min(rates[reader]), statistics.median(rates[reader]), max(rates[reader])
        print(f"  {reader:8s} members/s  min {low:>10,.0f}  median {mid:>10,.0f}  max {high:>10,.0f}")
    ratio = statistics.median(rates["fast"]) / statistics.median(rates["tarfile"])
    print(f"  fast / tarfile (medians): {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
