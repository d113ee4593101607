"""``vlmpack stats``: the packing-quality table, ``stats.json`` and ``stats.png`` for the current plan."""

from __future__ import annotations

import time

import numpy as np

from ..config import Config
from ..errors import StaleArtifactError
from ..manifest import Manifest, manifest_path
from ..plan_file import plan_path, read_plan, read_plan_meta
from ..stage_result import StageResult
from ..stats import PackStats, compute_stats, read_stats, stats_paths, write_stats
from .plan import plan_fingerprint

__all__ = ["run"]


def run(config: Config) -> StageResult:
    started = time.perf_counter()
    _, expected = plan_fingerprint(config)
    meta = read_plan_meta(config.work_dir)
    if meta is None or not plan_path(config.work_dir).exists():
        raise StaleArtifactError(f"no plan in {config.work_dir}: run `vlmpack plan --config ...` first")
    if meta.get("fingerprint") != expected:
        raise StaleArtifactError(
            f"{plan_path(config.work_dir)} was built from other bins or config: rerun `vlmpack bucket` and `vlmpack plan`"
        )
    done = read_stats(config.work_dir)
    if done is not None and done.get("plan_fingerprint") == expected and stats_paths(config.work_dir)[1].exists():
        stats = PackStats(**{k: v for k, v in done.items() if k != "plan_fingerprint"})
        return StageResult(stage="stats", skipped=True, summary=stats.table_lines(), counts={"packs": stats.packs})

    lengths, totals, sizes, groups = [], [], [], []
    for pack in read_plan(config.work_dir):
        lengths.extend(pack.sample_token_lens)
        groups.extend([pack.media_type] * len(pack.sample_ids))
        totals.append(pack.total_token_len)
        sizes.append(len(pack.sample_ids))
    with Manifest(manifest_path(config.work_dir)) as manifest:
        drops = {k: v for k, v in manifest.status_counts().items() if k != "ok"}
    lengths_arr = np.asarray(lengths, dtype=np.int64)
    totals_arr = np.asarray(totals, dtype=np.int64)
    stats = compute_stats(
        lengths_arr, totals_arr, np.asarray(sizes), int(meta["capacity"]), drops, sample_groups=np.asarray(groups)
    )
    write_stats(config.work_dir, stats, expected, lengths_arr, totals_arr)
    return StageResult(stage="stats", summary=stats.table_lines(), counts={"packs": stats.packs},
                       seconds=time.perf_counter() - started)
