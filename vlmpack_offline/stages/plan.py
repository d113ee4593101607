"""``vlmpack plan``: bins -> ``work_dir/pack_plan.jsonl`` (format: ``plan_file``), in training order.

Order: packs are shuffled with ``packing.seed`` (numpy ``default_rng``; no length
curriculum). The first ``split.val_packs`` (or ``round(val_ratio * packs)``) of
that order form the ``val`` split, written after all ``train`` packs. With
``packing.balance_world_size: N`` each split is then sorted by visual tokens,
cut into groups of N consecutive packs and the groups are shuffled whole (a short
remainder group stays last), so the
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
from ..plan_file import Pack, plan_meta_path, plan_path, read_plan_meta, write_plan
from ..stage_result import StageResult
from ..stats import compute_stats, write_stats
from ._ok_samples import OkSamples, load_ok_samples, manifest_fingerprint
from .bucket import bins_dir, bins_fingerprint, read_bins_meta

__all__ = ["run", "plan_fingerprint", "order_packs", "validate", "iter_packs"]


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
    """Whole groups of ``world`` packs shuffled; a short last group stays last so groups stay aligned."""
    ranked = order[np.argsort(pack_media[order], kind="stable")]
    n_full = len(ranked) // world
    groups = ranked[: n_full * world].reshape(n_full, world)[rng.permutation(n_full)]
    return np.concatenate([groups.reshape(-1), ranked[n_full * world :]])


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

    plan_meta_path(config.work_dir).unlink(missing_ok=True)  # a killed run must not leave an old meta beside a new plan
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
    write_plan(config.work_dir, iter_packs(order, splits, indexes, offsets, groups, samples, pack_media), meta)

    totals = np.add.reduceat(samples.token_len[indexes].astype(np.int64), offsets[:-1]) if indexes.size \
        else np.zeros(0, np.int64)
    sizes = np.diff(offsets)
    stats = compute_stats(
        samples.token_len[indexes], totals, sizes, capacity, samples.drops,
        sample_groups=np.repeat(np.asarray(groups), sizes),
    )
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


def iter_packs(order, splits, indexes, offsets, groups, samples: OkSamples, pack_media, *, block: int = 20_000):
    """Pack records in training order; ids and lengths are gathered a block of packs at a time."""
    bar = tqdm(total=len(order), desc="plan", unit="pack", disable=len(order) < 10 * block)
    for first in range(0, len(order), block):
        chosen = order[first : first + block]
        sizes = offsets[chosen + 1] - offsets[chosen]
        starts = np.repeat(offsets[chosen], sizes)  # position of each member in ``indexes``:
        within = np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        members = indexes[starts + within]
        ids = samples.ids_of(members.astype(np.int64))
        lens = samples.token_len[members].tolist()
        media = pack_media[chosen].tolist()
        cut = 0
        for k, (p, size) in enumerate(zip(chosen.tolist(), sizes.tolist(), strict=True)):
            yield Pack(
                pack_id=first + k, split=splits[first + k], media_type=groups[p],
                sample_ids=tuple(ids[cut : cut + size]), sample_token_lens=tuple(lens[cut : cut + size]),
                media_tokens=media[k],
            )
            cut += size
        bar.update(len(chosen))
    bar.close()
