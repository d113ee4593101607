"""``vlmpack stats``: the packing-quality table, ``stats.json`` and ``stats.png`` for the current plan."""

from __future__ import annotations

import time

import numpy as np

from ..config import Config
from ..errors import StaleArtifactError
from ..manifest import Manifest, manifest_path
from ..plan_file import plan_path, read_plan_arrays, read_plan_meta
from ..schedule import Schedule, step_ratios
from ..stage_result import StageResult
from ..stats import PackStats, compute_stats, read_stats, stats_paths, write_stats
from .bucket import bins_dir
from .plan import mix_of, mixture_record, plan_fingerprint

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
        stats = PackStats(**{k: v for k, v in done.items() if k not in ("plan_fingerprint", "png_panels")})
        return StageResult(stage="stats", skipped=True, summary=stats.table_lines(), counts={"packs": stats.packs})

    plan = read_plan_arrays(config.work_dir)
    drops = meta.get("drops")
    if drops is None:  # a plan written by ``write_plan`` (no bucket drops recorded): the manifest's drops
        with Manifest(manifest_path(config.work_dir)) as manifest:
            drops = {k: v for k, v in manifest.status_counts().items() if k != "ok"}
    bins = bins_dir(config)
    drop_lengths = None
    if (bins / "overlong.npy").exists() and (bins / "lengths.npy").exists():
        drop_lengths = np.load(bins / "lengths.npy")[np.load(bins / "overlong.npy")]
    multiple = int((meta.get("alignment") or {}).get("multiple", 1))
    totals = plan.aligned_pack_totals(multiple)
    schedule = Schedule.from_record(meta.get("schedule"))
    ratios = step_ratios(plan.cost, schedule, int(meta.get("seed", 0))) if schedule and plan.cost is not None else None
    mixture, series = meta.get("mixture"), None
    if mixture is not None:  # each train step's content per source, from the plan and bucket's source column
        written = mix_of(mixture, np.load(bins / "source.npy"), np.load(bins / "lengths.npy"), plan.sample_index,
                         plan.pack_offsets)
        series = mixture_record(mixture, written, schedule, mixture["train_packs"])[1]
    stats = compute_stats(plan.token_len, totals, plan.pack_sizes, int(meta["capacity"]), drops,
                          sample_groups=np.repeat(plan.group, plan.pack_sizes), multiple=multiple,
                          pack_costs=plan.cost, step_ratios=ratios, mixture=mixture)
    write_stats(config.work_dir, stats, expected, plan.token_len, totals, pack_groups=plan.group,
                group_names=plan.group_names, pack_sizes=plan.pack_sizes, drop_lengths=drop_lengths,
                pack_costs=plan.cost, step_ratios=ratios, mixture_series=series)
    return StageResult(stage="stats", summary=stats.table_lines(), counts={"packs": stats.packs},
                       seconds=time.perf_counter() - started)
