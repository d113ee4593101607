"""Ray executor vs local executor, 2 workers each, on the same generated shards: same bytes, throughput.

    python benchmarks/bench_ray.py [--samples 800] [--shards 8] [--workers 2]
    python benchmarks/bench_ray.py --nodes 4 [--cpus-per-node 1] [--samples 2400] [--shards 16]

Shards as in ``bench_scan.py`` (1-2 JPEG images of 300-1500 px per sample). Both executors run
``scan`` (one task per source shard), then, on one plan (``bucket`` + ``plan`` of the local scan),
``write`` (one task per chunk of packs and per output shard). Asserted: manifest.jsonl and every
file under packed_wds_dir (tars, .tar.idx, .nv-meta) byte-identical. The local Ray cluster
(``ray.init(num_cpus=workers)``) is started before the clock and its start time printed apart;
the local executor's times include forking its pool. A cold Ray scan also pays for starting
its worker processes (fresh interpreters importing transformers), so a second Ray scan with
the workers warm is timed too.

``--nodes N``: the scan alone on simulated Ray clusters (``ray.cluster_utils.Cluster``: a head
node with no CPU, where the driver runs, and worker nodes of ``--cpus-per-node`` CPUs, each its
own raylet, object store and worker processes) of N nodes and of one node, in the same run,
cold and warm, each manifest.jsonl asserted identical to a local scan's (``--workers`` processes).
All nodes share this machine's cores: beyond its core count more nodes add scheduling and
transfer overhead, not speed, so on a small machine this measures what the cluster costs.
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


def _cluster_scans(root: Path, processor_dir: Path, nodes: int, cpus: int) -> tuple[float, float, float, bool]:
    """(start s, cold scan s, warm scan s, manifest.jsonl as the local scan's) on ``nodes`` worker nodes."""
    from ray.cluster_utils import Cluster

    start = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
    for _ in range(nodes):
        cluster.add_node(num_cpus=cpus)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    started = time.perf_counter() - start
    try:
        cold, warm = (f"work_{nodes}n_cold", f"work_{nodes}n_warm")
        _, cold_s = _timed(scan, _config(root, processor_dir, cold, "unused", nodes * cpus, "ray"))
        _, warm_s = _timed(scan, _config(root, processor_dir, warm, "unused", nodes * cpus, "ray"))
    finally:
        ray.shutdown()
        cluster.shutdown()
    reference = (root / "work_local/manifest.jsonl").read_bytes()
    same = all((root / work / "manifest.jsonl").read_bytes() == reference for work in (cold, warm))
    return started, cold_s, warm_s, same


def _cluster_main(args: argparse.Namespace) -> int:
    """The scan on a simulated ``--nodes`` cluster vs a one-node cluster (same CPUs per node)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        processor_dir = build_processor_dir(root / "processor", "qwen2_5_vl")
        make_shards(root / "wds", args.samples, args.shards)
        counts, local_s = _timed(scan, _config(root, processor_dir, "work_local", "unused", args.workers, "local"))
        runs = {n: _cluster_scans(root, processor_dir, n, args.cpus_per_node) for n in (1, args.nodes)}
    samples = counts["samples"]
    print(f"command: python benchmarks/bench_ray.py --nodes {args.nodes} --cpus-per-node {args.cpus_per_node} "
          f"--samples {args.samples} --shards {args.shards} --workers {args.workers}")  # fmt: skip
    print("simulated nodes share this machine's cores: past its core count a node adds overhead, not speed")
    print(f"scan local executor ({args.workers} workers): {local_s:.2f}s {samples / local_s:.0f} samples/s")
    for n, (started, cold_s, warm_s, same) in runs.items():
        print(f"scan ray, {n} node(s) x {args.cpus_per_node} CPU (start {started:.1f}s, not timed): "
              f"cold {cold_s:.2f}s {samples / cold_s:.0f} samples/s | warm {warm_s:.2f}s "
              f"{samples / warm_s:.0f} samples/s | manifest.jsonl identical to local: {same}")  # fmt: skip
    one, many = runs[1], runs[args.nodes]
    print(f"{args.nodes} nodes / 1 node throughput: cold {one[1] / many[1]:.2f}, warm {one[2] / many[2]:.2f}")
    assert all(run[3] for run in runs.values()), "a cluster scan's manifest differs from the local scan's"
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=800)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--nodes", type=int, default=0, help="scan on a simulated cluster of N nodes vs 1 node")
    parser.add_argument("--cpus-per-node", type=int, default=1)
    args = parser.parse_args(argv)
    if args.nodes:
        return _cluster_main(args)
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
