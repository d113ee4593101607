"""Write the demo inputs that ``configs/demo.yaml`` packs: synthetic shards and a processor.

    python -m vlmpack_offline.synthetic.demo demo_out
    ->  demo_out/data/shard-00000{0,1,2}.tar, demo_out/data/sub/shard-000003.tar
        demo_out/processor/   (Qwen2.5-VL tokenizer + preprocessor settings)

A marker file records what was written (parameters + sha256 of each shard), so a
second run with the same parameters does nothing, and a changed or damaged
output is rebuilt.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

from .processor_dir import build_processor_dir
from .shards import generate_dataset

__all__ = ["MARKER", "write_demo", "main"]

MARKER = ".vlmpack-demo.json"  # in OUT_DIR: parameters and shard hashes of the last write


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _current(out_dir: Path, params: dict) -> bool:
    marker = out_dir / MARKER
    if not marker.is_file():
        return False
    recorded = json.loads(marker.read_text())
    if recorded.get("params") != params or not (out_dir / "processor" / "tokenizer.json").is_file():
        return False
    shards = recorded.get("shards", {})
    return bool(shards) and all(
        (out_dir / rel).is_file() and _sha256(out_dir / rel) == digest for rel, digest in shards.items()
    )


def write_demo(
    out_dir: str | Path, *, seed: int = 0, n_shards: int = 4, samples_per_shard: int = 48, force: bool = False
) -> tuple[bool, list[Path]]:
    """Write (or keep) the demo data; returns (written, shard paths)."""
    out_dir = Path(out_dir)
    params = {"seed": seed, "n_shards": n_shards, "samples_per_shard": samples_per_shard, "include_faults": True,
              "processor": "qwen2_5_vl"}
    data_dir = out_dir / "data"
    if not force and _current(out_dir, params):
        recorded = json.loads((out_dir / MARKER).read_text())
        return False, [out_dir / rel for rel in recorded["shards"]]
    if data_dir.exists():
        shutil.rmtree(data_dir)
    paths = generate_dataset(
        data_dir, seed=seed, n_shards=n_shards, samples_per_shard=samples_per_shard, include_faults=True
    )
    build_processor_dir(out_dir / "processor", "qwen2_5_vl")
    shards = {str(p.relative_to(out_dir)): _sha256(p) for p in paths}
    (out_dir / MARKER).write_text(json.dumps({"params": params, "shards": shards}, indent=2) + "\n")
    return True, paths


def packed_demo(root: str | Path, *, max_token_len: int = 2048, **sections: dict) -> Path:
    """The demo shards packed by the real stages (scan -> bucket -> plan -> write) under ``root``; the packed dir.

    For the examples' ``--demo``: tiny videos, every drop allowed (the demo holds one faulty sample per
    drop reason on purpose); ``sections`` are config sections on top. A failed stage exits with its summary.
    """
    from ..config import config_from_dict
    from ..stages import bucket, plan, scan, write

    root = Path(root)
    write_demo(root, n_shards=2, samples_per_shard=16)
    raw = {
        "data": {"wds_dir": str(root / "data"), "work_dir": str(root / "work"), "packed_wds_dir": str(root / "packed")},
        "sample": {"max_token_len": max_token_len},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(root / "processor")}},
        "video": {"min_pixels": 4 * 28 * 28, "max_pixels": 16 * 28 * 28},
        "scan": {"max_drop_ratio": 1.0},
    }  # fmt: skip
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    config = config_from_dict(raw, source="demo")
    for stage in (scan, bucket, plan, write):
        result = stage.run(config)
        if result.exit_code != 0:
            raise SystemExit(f"{stage.__name__.rsplit('.', 1)[-1]} failed: {result.summary}")
    return config.packed_wds_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vlmpack_offline.synthetic.demo",
        description="Write synthetic demo shards (with one faulty sample per drop reason) and a Qwen2.5-VL "
        "processor directory; then run `bash scripts/pack_wds.sh configs/demo.yaml`.",
    )
    parser.add_argument("out_dir", type=Path, help="output folder (configs/demo.yaml expects ./demo_out)")
    parser.add_argument("--seed", type=int, default=0, help="content seed (default 0)")
    parser.add_argument("--shards", type=int, default=4, help="number of shards (default 4)")
    parser.add_argument("--samples-per-shard", type=int, default=48, help="good samples per shard (default 48)")
    parser.add_argument("--force", action="store_true", help="rewrite even if the output is current")
    args = parser.parse_args(argv)
    written, paths = write_demo(
        args.out_dir, seed=args.seed, n_shards=args.shards, samples_per_shard=args.samples_per_shard, force=args.force
    )
    verb = "wrote" if written else "kept (already current)"
    total = sum(p.stat().st_size for p in paths)
    print(f"{verb} {len(paths)} shards ({total / 1e6:.1f} MB) under {args.out_dir / 'data'}")
    for path in paths:
        print(f"  {path}")
    print(f"{verb} processor directory {args.out_dir / 'processor'} (qwen2_5_vl)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
