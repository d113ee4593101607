"""Ray executor vs local executor, 2 workers each, on the same generated shards: same bytes, throughput.

    python benchmarks/bench_ray.py [--samples 800] [--shards 8] [--workers 2]

Shards as in ``bench_scan.py`` (1-2 JPEG images of 300-1500 px per sample). Both executors run
``scan`` (one task per source shard), then, on one plan (``bucket`` + ``plan`` of the local scan),
``write`` (one task per chunk of packs and per output shard). Asserted: manifest.jsonl and every
file under packed_wds_dir (tars, .tar.idx, .nv-meta) byte-identical. The local Ray cluster
(``ray.init(num_cpus=workers)``) is started before the clock and its start time printed apart;
the local executor's times include forking its pool. A cold Ray scan also pays for starting
its worker processes (fresh interpreters importing transformers), so a second Ray scan with
the workers warm is timed too.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import tempfile
import time
from pathlib import Path

import ray
from bench_scan import make_shards  # benchmarks/ is on sys.path when this file runs as a script

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.stages import bucket, plan, scan, write
from vlmpack_offline.synthetic.processor_dir import build_processor_dir


def _config(root: Path, processor_dir: Path, work: str, packed: str, workers: int, executor: str):
    return config_from_dict(
        {
            "data": {"wds_dir": str(root / "wds"), "work_dir": str(root / work), "packed_wds_dir": str(root / packed)},
            "sample": {"max_token_len": 16384},
            "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
            "packed_wds": {"maxcount": 16},
            "process": {"workers": workers, "executor": executor},
        },
        source="bench",
    )


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


def _timed(fn, config) -> tuple[dict, float]:
    start = time.perf_counter()
    result = fn.run(config)
    return result.counts, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=800)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        processor_dir = build_processor_dir(root / "processor", "qwen2_5_vl")
        make_shards(root / "wds", args.samples, args.shards)
        start = time.perf_counter()
        ray.init(num_cpus=args.workers, include_dashboard=False, log_to_driver=False)
        ray_start = time.perf_counter() - start
        local = _config(root, processor_dir, "work_local", "packed_local", args.workers, "local")
        on_ray = _config(root, processor_dir, "work_ray", "packed_ray", args.workers, "ray")
        scan_counts, scan_local_s = _timed(scan, local)
        _, scan_ray_s = _timed(scan, on_ray)
        # again into another work_dir: Ray's worker processes are up and have imported everything
        # (the tokenizer is loaded again: another work_dir is another config)
        _, scan_warm_s = _timed(scan, _config(root, processor_dir, "work_warm", "packed_warm", args.workers, "ray"))
        same_manifest = (root / "work_local/manifest.jsonl").read_bytes() == (root / "work_ray/manifest.jsonl").read_bytes()
        bucket.run(local)
        plan.run(local)
        # one plan for both writes: the Ray write reads the local work_dir, writes its own packed dir
        on_ray_write = _config(root, processor_dir, "work_local", "packed_ray", args.workers, "ray")
        write_counts, write_local_s = _timed(write, local)
        _, write_ray_s = _timed(write, on_ray_write)
        same_output = _hashes(root / "packed_local") == _hashes(root / "packed_ray")
        ray.shutdown()
    samples, mb = scan_counts["samples"], write_counts["bytes"] / 1e6
    print(f"command: python benchmarks/bench_ray.py --samples {args.samples} --shards {args.shards} --workers {args.workers}")
    print(f"identical artifacts: manifest.jsonl {same_manifest}, packed_wds_dir (tars, idx, .nv-meta) {same_output}")
    print(f"ray.init(num_cpus={args.workers}) (not timed below): {ray_start:.1f}s")
    print(f"scan  local: {scan_local_s:.2f}s {samples / scan_local_s:.0f} samples/s | ray: {scan_ray_s:.2f}s "
          f"{samples / scan_ray_s:.0f} samples/s | ray/local throughput {scan_local_s / scan_ray_s:.2f}")  # fmt: skip
    print(f"scan  ray with its workers warm (second scan, new work_dir): {scan_warm_s:.2f}s "
          f"{samples / scan_warm_s:.0f} samples/s | ray/local throughput {scan_local_s / scan_warm_s:.2f}")  # fmt: skip
    print(f"write local: {write_local_s:.2f}s {mb / write_local_s:.0f} MB/s | ray: {write_ray_s:.2f}s "
          f"{mb / write_ray_s:.0f} MB/s | ray/local throughput {write_local_s / write_ray_s:.2f} "
          f"({write_counts['packs']} packs, {write_counts['shards']} shards, {mb:.0f} MB)")  # fmt: skip
    assert same_manifest and same_output, "the executors' artifacts differ"
    return 0


if __name__ == "__main__":
    sys.exit(main())
