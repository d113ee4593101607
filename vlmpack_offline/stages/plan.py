"""``vlmpack plan``: bins -> ``work_dir/pack_plan.jsonl`` (format: ``plan_file``), in training order.

Order: packs are shuffled with ``packing.seed`` (numpy ``default_rng``; no length
curriculum). The first ``split.val_packs`` (or ``round(val_ratio * packs)``) of
that order form the ``val`` split, written after all ``train`` packs. With
``packing.balance_world_size: N`` each split is then sorted by visual tokens,
cut into groups of N consecutive packs and the groups are shuffled whole, so the
N data-parallel ranks of one step get similar ViT load.

Before the file is final the plan is checked: every ok sample exactly once,
every pack within ``sample.max_token_len``, and the lengths bucket planned with
equal to the manifest's now. Any breach is a ``PlanError``.
"""

from __future__ import annotations

import time

import numpy as np
from tqdm import tqdm

from ..artifacts import fingerprint
from ..config import Config, section_fingerprint_payload
from ..errors import PlanError, StaleArtifactError
from ..manifest import Manifest, manifest_path
from ..plan_file import Pack, plan_path, read_plan_meta, write_plan
from ..stage_result import StageResult
from ..stats import compute_stats, write_stats
from ._ok_samples import OkSamples, load_ok_samples, manifest_fingerprint
from .bucket import bins_dir, bins_fingerprint, read_bins_meta

__all__ = ["run", "plan_fingerprint", "order_packs", "validate"]


def plan_fingerprint(config: Config) -> tuple[str, str]:
    """(expected bins fingerprint, expected plan fingerprint) for the current manifest and config."""
    bins_fp = bins_fingerprint(config, manifest_fingerprint(config.work_dir))
    payload = {"bins": bins_fp, "config": section_fingerprint_payload(config, "sample", "packing", "split")}
    return bins_fp, fingerprint(payload)


def order_packs(pack_media: np.ndarray, config: Config) -> tuple[np.ndarray, np.ndarray]:
    """Pure: (train pack order, val pack order) as arrays of pack numbers."""
    n = len(pack_media)
    rng = np.random.default_rng(config.packing.seed)
    perm = rng.permutation(n)
    split = config.split
    n_val = split.val_packs if split.val_packs is not None else int(round(split.val_ratio * n))
    n_val = min(n_val, n)
    val, train = perm[:n_val], perm[n_val:]
    world = config.packing.balance_world_size
    if world and world > 1:
        train, val = _balance(train, pack_media, world, rng), _balance(val, pack_media, world, rng)
    return train, val


def _balance(order: np.ndarray, pack_media: np.ndarray, world: int, rng: np.random.Generator) -> np.ndarray:
    ranked = order[np.argsort(pack_media[order], kind="stable")]
    groups = [ranked[i : i + world] for i in range(0, len(ranked), world)]
    return np.concatenate([groups[g] for g in rng.permutation(len(groups))]) if groups else ranked


def validate(indexes: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, n_ok: int, capacity: int) -> None:
    """Every ok sample exactly once, every pack within capacity; PlanError naming the first breach."""
    seen = np.bincount(indexes, minlength=n_ok) if indexes.size else np.zeros(n_ok, np.int64)
    if len(seen) > n_ok:
        raise PlanError(f"bins name sample #{len(seen) - 1}, but the manifest has {n_ok} ok samples: rerun bucket")
    if (seen != 1).any():
        bad = int(np.flatnonzero(seen != 1)[0])
        raise PlanError(f"ok sample #{bad} is in {int(seen[bad])} packs, expected exactly 1: rerun `vlmpack bucket`")
    totals = np.add.reduceat(lengths[indexes].astype(np.int64), offsets[:-1]) if indexes.size else np.zeros(0)
    if (totals > capacity).any():
        p = int(np.flatnonzero(totals > capacity)[0])
        raise PlanError(f"pack {p} holds {int(totals[p])} tokens > sample.max_token_len {capacity}: rerun bucket")


def run(config: Config) -> StageResult:
    started = time.perf_counter()
    bins_fp, expected = plan_fingerprint(config)
    bins_meta = read_bins_meta(config)
    if bins_meta is None:
        raise StaleArtifactError(f"no bins in {bins_dir(config)}: run `vlmpack bucket --config ...` first")
    if bins_meta.get("fingerprint") != bins_fp:
        raise StaleArtifactError(
            f"{bins_dir(config)} was built from another manifest or sample/packing config "
            f"(fingerprint {bins_meta.get('fingerprint')} != {bins_fp}): rerun `vlmpack bucket`"
        )
    meta = read_plan_meta(config.work_dir)
    if meta is not None and meta.get("fingerprint") == expected and plan_path(config.work_dir).exists():
        return StageResult(stage="plan", skipped=True, summary=[f"plan up to date ({plan_path(config.work_dir)})"])

    samples = load_ok_samples(config.work_dir, with_ids=True)
    indexes, offsets, groups = _load_bins(config, bins_meta)
    planned = np.load(bins_dir(config) / "lengths.npy")
    if planned.shape != samples.token_len.shape or (planned != samples.token_len).any():
        raise PlanError(
            f"the manifest's ok samples changed since bucket ({planned.size} planned, {samples.n} now, "
            "or other token lengths): rerun `vlmpack bucket`"
        )
    capacity = config.sample.max_token_len
    validate(indexes, offsets, samples.token_len, samples.n, capacity)

    pack_media = np.add.reduceat(samples.media_tokens[indexes].astype(np.int64), offsets[:-1]) if indexes.size \
        else np.zeros(0, np.int64)
    train, val = order_packs(pack_media, config)
    order = np.concatenate([train, val]).astype(np.int64)
    splits = ["train"] * len(train) + ["val"] * len(val)
    meta = {
        "stage": "plan", "fingerprint": expected, "bins_fingerprint": bins_fp, "capacity": capacity,
        "seed": config.packing.seed, "n_packs": int(len(order)), "n_samples": samples.n,
        "n_train_packs": int(len(train)), "n_val_packs": int(len(val)),
        "balance_world_size": config.packing.balance_world_size,
    }
    write_plan(config.work_dir, _packs(order, splits, indexes, offsets, groups, samples, pack_media), meta)

    totals = np.add.reduceat(samples.token_len[indexes].astype(np.int64), offsets[:-1]) if indexes.size \
        else np.zeros(0, np.int64)
    stats = compute_stats(samples.token_len, totals, np.diff(offsets), capacity, _drops(config))
    write_stats(config.work_dir, stats, expected, samples.token_len, totals)
    return StageResult(stage="plan", summary=stats.table_lines(), seconds=time.perf_counter() - started,
                       counts={"packs": int(len(order)), "val_packs": int(len(val)), "samples": samples.n})


def _load_bins(config: Config, bins_meta: dict) -> tuple[np.ndarray, np.ndarray, list[str]]:
    parts, offs, groups, base = [], [np.zeros(1, np.int64)], [], 0
    for group in bins_meta["groups"]:
        idx = np.load(bins_dir(config) / f"{group['name']}.indexes.npy")
        off = np.load(bins_dir(config) / f"{group['name']}.offsets.npy")
        parts.append(idx)
        offs.append(off[1:] + base)
        base += int(off[-1])
        groups += [group["name"]] * (len(off) - 1)
    indexes = np.concatenate(parts) if parts else np.zeros(0, np.int32)
    return indexes, np.concatenate(offs), groups


def _packs(order, splits, indexes, offsets, groups, samples: OkSamples, pack_media):
    ids, id_off, lengths = samples.id_bytes, samples.id_offsets, samples.token_len
    rows = zip(order.tolist(), splits, strict=True)
    for pack_id, (p, split) in enumerate(tqdm(rows, total=len(order), desc="plan", unit="pack",
                                              disable=len(order) < 10_000)):
        members = indexes[offsets[p] : offsets[p + 1]].tolist()
        yield Pack(
            pack_id=pack_id, split=split, media_type=groups[p],
            sample_ids=tuple(ids[id_off[i] : id_off[i + 1]].decode() for i in members),
            sample_token_lens=tuple(int(lengths[i]) for i in members), media_tokens=int(pack_media[p]),
        )


def _drops(config: Config) -> dict[str, int]:
    with Manifest(manifest_path(config.work_dir)) as manifest:
        return {k: v for k, v in manifest.status_counts().items() if k != "ok"}
