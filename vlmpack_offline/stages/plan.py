"""``vlmpack plan``: bins -> ``work_dir/pack_plan.npz`` (format: ``plan_file``), in training order.

Order: packs are shuffled with ``packing.seed`` (numpy ``default_rng``; no length
curriculum). The first ``split.val_packs`` (or ``round(val_ratio * packs)``) of
that order form the ``val`` split, written after all ``train`` packs. Every pack gets
a training cost (``packing/cost.py``). With ``parallel.data_parallel_size: D`` the
train packs are laid out as the balanced schedule (``schedule.py``): slots of D packs of
near-equal cost, one per rank, written rank-major, then the few packs that fill
no slot; the val split keeps its shuffled order.

Plan reads only ``bins/`` (numpy end to end, no ids: they are resolved from the
manifest when the plan is read). Before the file is final the plan is checked:
every ok sample of the manifest exactly once, in a pack or in bucket's overlong
drops; every pack within ``sample.max_token_len``, each sub-sample counted at its
aligned length (``packing/alignment.py``; the plan keeps the real token_len, its
meta the alignment). Any breach is a ``PlanError``.
The readable ``pack_plan.jsonl`` is written only on request:
``plan_file.export_jsonl(work_dir)`` or ``python -m vlmpack_offline.plan_file WORK_DIR``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap

from ..artifacts import fingerprint
from ..config import Config, section_fingerprint_payload
from ..errors import PlanError, StaleArtifactError
from ..packing._chunked import CHUNK, RELEASE_EVERY, pack_chunks, pack_sums, release
from ..packing.cost import CostModel, cost_model_for, pack_costs
from ..packing.interleave import Mix, StepMix, window_deviation
from ..plan_file import PlanArrays, jsonl_path, plan_meta_path, plan_path, read_plan_meta, write_plan_arrays
from ..provenance import flat_settings
from ..reasons import Reason
from ..schedule import Schedule, balance, step_ratios
from ..stage_result import StageResult
from ..stats import compute_stats, stats_paths, write_stats
from ._freshness import check_upstream
from ._ok_samples import manifest_fingerprint
from .bucket import bins_dir, bins_fingerprint, closed_gate, read_bins_meta

__all__ = ["run", "plan_fingerprint", "order_packs", "validate", "make_plan"]


def plan_settings(config: Config) -> dict:
    """What the plan depends on besides the bins, flat by name (``provenance.flat_settings``).
    ``packing.partition_samples`` is not among them: it changes the bins (their fingerprint is the plan's), never
    the plan made from them (streamed past it, the same bytes)."""
    sections = section_fingerprint_payload(config, "sample", "packing", "parallel", "split")
    sections["packing"].pop("partition_samples")
    return flat_settings({"cost_model": cost_model(config).record(), **sections})


def plan_fingerprint(config: Config) -> tuple[str, str]:
    """(expected bins fingerprint, expected plan fingerprint) for the current manifest and config."""
    bins_fp = bins_fingerprint(config, manifest_fingerprint(config.work_dir))
    return bins_fp, fingerprint({"bins": bins_fp, "settings": plan_settings(config)})


def cost_model(config: Config) -> CostModel:
    return cost_model_for(config.packing.cost, config.model.processor_kwargs.get("pretrained_model_name_or_path"))


def order_packs(costs: np.ndarray, config: Config,
                mix: Mix | None = None) -> tuple[np.ndarray, np.ndarray, Schedule | None]:
    """Pure: (train pack order, val pack order, the train split's schedule or None) as arrays of pack numbers.

    With a mixture (``mix``) the train packs, or the balanced slots, are interleaved by source
    (``packing/interleave.py``) instead of shuffled."""
    n = len(costs)
    rng = np.random.default_rng(config.packing.seed)
    perm = rng.permutation(n)
    split = config.split
    n_val = split.val_packs if split.val_packs is not None else int(round(split.val_ratio * n))
    n_val = min(n_val, n)
    val, train = perm[:n_val], perm[n_val:]
    world = config.data_parallel_size
    if not world:
        return (train if mix is None else train[mix.interleaved(train[:, None], rng)]), val, None
    parallel = config.parallel
    scheduled, rest, schedule = balance(
        costs[train], world, parallel.micro_batches_per_step, parallel.loader_workers, rng,
        slot_order=None if mix is None else lambda slots: mix.interleaved(train[slots], rng),
        pack_class=None if mix is None else mix.dominant()[train])
    return np.concatenate([train[scheduled], train[rest]]), val, schedule


def validate(indexes: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, n_ok: int, capacity: int,
             overlong: np.ndarray | None = None, uses: np.ndarray | None = None,
             unfit: np.ndarray | None = None, *, rows_at_once: int | None = None) -> None:
    """Every ok sample in as many packs as its ``uses`` (default 1; ``packing/mixture.py``) or, once, in
    ``overlong`` or ``unfit`` (bucket's drop lists); every pack within capacity; PlanError on a breach.

    ``rows_at_once``: count the samples' appearances for this many ok samples at a time (one pass over
    ``indexes`` each), so the count costs 4 bytes times this, not times every sample (``packing.
    partition_samples``); None: all at once. The same checks, the same first breach named, either way."""
    over = np.zeros(0, np.int64) if overlong is None else np.asarray(overlong)
    if unfit is not None and unfit.size:
        if over.size and (lengths[unfit] > capacity).any():
            raise PlanError("bins drop a sample as layout_unfit that is overlong: rerun `vlmpack bucket`")
        over_only = over
        over = np.concatenate([over, np.asarray(unfit)]).astype(np.int64)
    else:
        over_only = over
    if (indexes.size and int(indexes.max()) >= n_ok) or (over.size and int(over.max()) >= n_ok):
        raise PlanError(f"bins name a sample past the manifest's {n_ok} ok samples: rerun `vlmpack bucket`")
    if (indexes.size and int(indexes.min()) < 0) or (over.size and int(over.min()) < 0):
        raise PlanError("bins name a negative sample index: rerun `vlmpack bucket`")
    if uses is not None and over.size and uses[over].any():
        raise PlanError(f"ok sample #{int(over[uses[over] > 0][0])} is dropped by bucket but planned to be used: "
                        "rerun `vlmpack bucket`")
    dropped = np.zeros(0, np.int64) if not over.size else np.sort(over)
    span = max(n_ok, 1) if rows_at_once is None else rows_at_once
    spans = None if span >= n_ok else _chunk_spans(indexes)
    for low in range(0, n_ok, span):
        high = min(low + span, n_ok)
        seen = _times_seen(indexes, low, high, spans)
        mine = dropped[np.searchsorted(dropped, low) : np.searchsorted(dropped, high)]
        seen[mine - low] += 1
        for first in range(low, high, CHUNK):  # expected: uses (default 1), 1 for a dropped sample
            last = min(first + CHUNK, high)
            expected = np.ones(last - first, np.uint32) if uses is None else uses[first:last].astype(np.uint32)
            expected[dropped[np.searchsorted(dropped, first) : np.searchsorted(dropped, last)] - first] = 1
            wrong = seen[first - low : last - low] != expected
            if wrong.any():
                bad = int(np.flatnonzero(wrong)[0])
                raise PlanError(f"ok sample #{first + bad} is in {int(seen[first - low + bad])} packs or drop lists, "
                                f"expected exactly {int(expected[bad])}: rerun `vlmpack bucket`")
        del seen
        release(uses)
    if over_only.size and (lengths[over_only] <= capacity).any():
        bad = int(over_only[lengths[over_only] <= capacity][0])
        raise PlanError(f"ok sample #{bad} is dropped as overlong but fits {capacity}: rerun `vlmpack bucket`")
    totals = pack_sums(lengths, indexes, offsets)
    if (totals > capacity).any():
        p = int(np.flatnonzero(totals > capacity)[0])
        raise PlanError(f"pack {p} holds {int(totals[p])} tokens > sample.max_token_len {capacity}: rerun bucket")


def _times_seen(indexes: np.ndarray, low: int, high: int,
                spans: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """uint32 [high - low]: how many times each of the samples ``low..high-1`` is in ``indexes`` (``np.bincount``
    in 4 bytes a sample, not its 8 plus an int64 copy of the input), counted a chunk at a time. ``spans``: each
    chunk's (smallest, largest) index (``_chunk_spans``), so a chunk that holds none of the range is skipped:
    a partitioned bins' chunk holds one partition's samples, and every range reads only its own chunks;
    None: every index is in the range."""
    seen = np.zeros(high - low, np.uint32)
    for step, first in enumerate(range(0, indexes.size, CHUNK), 1):
        if spans is not None and (spans[1][first // CHUNK] < low or spans[0][first // CHUNK] >= high):
            continue
        part = indexes[first : first + CHUNK]
        if spans is not None:
            part = part[(part >= low) & (part < high)] - low
        present, times = np.unique(part, return_counts=True)
        seen[present] += times.astype(np.uint32)
        if step % RELEASE_EVERY == 0:
            release(indexes)
    release(indexes)
    return seen


def _chunk_spans(indexes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per ``CHUNK`` of ``indexes``, its smallest and its largest index (one pass)."""
    starts = range(0, indexes.size, CHUNK)
    spans = [(int(indexes[a : a + CHUNK].min()), int(indexes[a : a + CHUNK].max())) for a in starts]
    release(indexes)
    return np.array([a for a, _ in spans], np.int64), np.array([b for _, b in spans], np.int64)


def make_plan(indexes: np.ndarray, offsets: np.ndarray, pack_group: np.ndarray, group_names: tuple[str, ...],
              lengths: np.ndarray, media_tokens: np.ndarray, config: Config,
              costs: np.ndarray, mix: Mix | None = None, *,
              scratch: Path | None = None) -> tuple[PlanArrays, Schedule | None]:
    """Pure: the bins' packs in training order as flat arrays (``plan_file.PlanArrays``), and the schedule.

    ``costs``: per bins pack (``packing.cost.pack_costs``); ``mix``: per bins pack, per source (a mixture).
    ``scratch``: a folder for the two per-sample arrays (``sample_index``, ``token_len``: 12 bytes a sample),
    which are then memory-mapped ``.npy`` files there, filled and released (``_chunked.release``) whole packs
    at a time; None: in memory. The same values either way; the caller deletes the folder's files."""
    pack_media = pack_sums(media_tokens, indexes, offsets)
    train, val, schedule = order_packs(costs, config, mix)
    order, n_train = np.concatenate([train, val]).astype(np.int64), len(train)
    del train, val
    sizes = np.diff(offsets)[order]
    new_offsets = np.zeros(len(order) + 1, np.int64)
    np.cumsum(sizes, out=new_offsets[1:])
    del sizes
    n_rows = int(new_offsets[-1])
    if scratch is None:
        sample_index, token_len = np.empty(n_rows, np.int64), np.empty(n_rows, lengths.dtype)
    else:
        scratch.mkdir(parents=True, exist_ok=True)
        sample_index = open_memmap(scratch / "sample_index.npy", "w+", np.int64, (n_rows,))
        token_len = open_memmap(scratch / "token_len.npy", "w+", lengths.dtype, (n_rows,))
    # the members of the packs in the new order, whole packs at a time
    for first, last in pack_chunks(new_offsets, mapped=(sample_index, token_len, lengths, indexes)):
        lo, hi = int(new_offsets[first]), int(new_offsets[last])
        packs = order[first:last]
        starts, counts = offsets[packs], offsets[packs + 1] - offsets[packs]
        within = np.arange(hi - lo, dtype=np.int64) - np.repeat(new_offsets[first:last] - lo, counts)
        members = indexes[np.repeat(starts, counts) + within]
        sample_index[lo:hi] = members
        token_len[lo:hi] = lengths[members]
    split = np.zeros(len(order), np.int8)
    split[n_train:] = 1
    return PlanArrays(
        pack_offsets=new_offsets, sample_index=sample_index, token_len=token_len,
        split=split, group=pack_group[order].astype(np.int8), media_tokens=pack_media[order],
        group_names=group_names, cost=costs[order].astype(np.float64),
    ), schedule


def run(config: Config) -> StageResult:
    started = time.perf_counter()
    check_upstream(config, "plan")  # the manifest and the bins are this config's, or it says what changed
    bins_fp, expected = plan_fingerprint(config)
    bins_meta = read_bins_meta(config)
    if closed := closed_gate(config):  # bucket said the same and exited 1: nothing is planned from data that lost this much
        return StageResult(stage="plan", summary=[closed], exit_code=1)
    meta = read_plan_meta(config.work_dir)
    if meta is not None and meta.get("fingerprint") == expected and plan_path(config.work_dir).exists() \
            and _stats_done(config.work_dir, expected):
        return StageResult(stage="plan", skipped=True, summary=[f"plan up to date ({plan_path(config.work_dir)})"])
    # else (re)build all: the plan is deterministic, so a run killed before its stats redoes it byte-identical

    plan_meta_path(config.work_dir).unlink(missing_ok=True)  # a killed run must not leave an old meta beside a new plan
    out = bins_dir(config)
    n_ok = int(bins_meta["n_ok"])
    # past packing.partition_samples the per-sample columns stay in their files (memory-mapped, pages released
    # after each pass) and the plan's per-sample arrays go through files in scratch: memory bounded by the setting
    mapped = n_ok > config.packing.partition_samples
    scratch = _scratch_dir(config) if mapped else None

    def column(name: str) -> np.ndarray:
        return np.load(out / name, mmap_mode="r" if mapped else None)

    lengths, media_tokens = column("lengths.npy"), column("media_tokens.npy")
    for name in ("encoder_patches.npy", "audio_frames.npy"):
        if not (out / name).is_file():
            raise StaleArtifactError(f"{out} has no {name} (bins of an older vlmpack): rerun `vlmpack bucket`")
    patches, blocks = column("encoder_patches.npy"), column("encoder_attention.npy")
    audio = column("audio_frames.npy"), column("audio_attention.npy")
    overlong = np.load(out / "overlong.npy")
    unfit = np.load(out / "layout_unfit.npy") if (out / "layout_unfit.npy").is_file() else np.zeros(0, np.int32)
    if not (out / "uses.npy").is_file():
        raise StaleArtifactError(f"{out} has no uses.npy (bins of an older vlmpack): rerun `vlmpack bucket`")
    uses, source = column("uses.npy"), column("source.npy")
    indexes, offsets, pack_group, group_names = _load_bins(config, bins_meta, scratch)
    capacity = config.sample.max_token_len
    if lengths.size != n_ok:
        raise PlanError(f"bins/lengths.npy has {lengths.size} samples, bins/meta.json says {n_ok}: rerun bucket")
    alignment = config.alignment
    aligned = _aligned(alignment, lengths, scratch)
    validate(indexes, offsets, aligned, n_ok, capacity, overlong, uses, unfit,
             rows_at_once=config.packing.partition_samples if mapped else None)
    model = cost_model(config)
    costs = pack_costs(model, aligned, patches, blocks, indexes, offsets, audio=audio)
    del aligned
    mixture = bins_meta.get("mixture") if config.data.sources else None
    mix = mix_of(mixture, source, lengths, indexes, offsets)
    plan_arrays, schedule = make_plan(indexes, offsets, pack_group, group_names, lengths, media_tokens, config, costs,
                                      mix, scratch=scratch)
    del indexes, costs
    n_train = int(np.count_nonzero(plan_arrays.split == 0))
    drops = dict(bins_meta.get("manifest_drops", {}))
    drops[Reason.OVERLONG] = drops.get(Reason.OVERLONG, 0) + int(overlong.size)
    if unfit.size:
        drops[Reason.LAYOUT_UNFIT] = int(unfit.size)
    meta = {
        "stage": "plan", "fingerprint": expected, "bins_fingerprint": bins_fp, "capacity": capacity,
        "settings": plan_settings(config),
        "manifest_fingerprint": manifest_fingerprint(config.work_dir),
        "seed": config.packing.seed, "n_packs": plan_arrays.n_packs, "n_samples": int(plan_arrays.sample_index.size),
        "n_left_out": int(bins_meta.get("n_left_out", 0)),
        "n_train_packs": n_train, "n_val_packs": plan_arrays.n_packs - n_train, "n_overlong": int(overlong.size),
        "n_layout_unfit": int(unfit.size), "losses": bins_meta["losses"],
        "drops": dict(sorted(drops.items())), "alignment": alignment.record(),
        "cost_model": model.record(), "schedule": schedule.record() if schedule else None,
    }
    mixture_series = None
    if mixture is not None:
        written = mix_of(mixture, source, lengths, plan_arrays.sample_index, plan_arrays.pack_offsets)
        meta["mixture"], mixture_series = mixture_record(mixture, written, schedule, n_train)
    ratios = step_ratios(plan_arrays.cost, schedule, config.packing.seed) if schedule else None
    totals = plan_arrays.aligned_pack_totals(alignment.multiple)
    stats = compute_stats(
        plan_arrays.token_len, totals, plan_arrays.pack_sizes, capacity, drops,
        sample_groups=np.repeat(plan_arrays.group, plan_arrays.pack_sizes), multiple=alignment.multiple,
        pack_costs=plan_arrays.cost, step_ratios=ratios, mixture=meta.get("mixture"),
    )
    meta["balance"] = stats.step_balance
    write_plan_arrays(config.work_dir, plan_arrays, meta)
    jsonl_path(config.work_dir).unlink(missing_ok=True)  # an export of an older plan would mislead
    write_stats(config.work_dir, stats, expected, plan_arrays.token_len, totals,
                pack_groups=plan_arrays.group, group_names=group_names, pack_sizes=plan_arrays.pack_sizes,
                drop_lengths=lengths[overlong], pack_costs=plan_arrays.cost, step_ratios=ratios,
                mixture_series=mixture_series)
    balance_lines = _balance_lines(plan_arrays, schedule)
    del plan_arrays
    _remove_scratch(config)  # the plan's per-sample arrays are in pack_plan.npz now (or a killed run's, left)
    if media_tokens.any() and not patches.any() and not audio[0].any():
        balance_lines.append("the scan recorded no vision-encoder patches (a model family counted by its processor, "
                             "tokens/slow.py): pack costs leave the vision encoder out")
    return StageResult(stage="plan", summary=[*stats.table_lines(), model.describe(), *balance_lines],
                       seconds=time.perf_counter() - started,
                       counts={"packs": meta["n_packs"], "val_packs": meta["n_packs"] - n_train,
                               "samples": stats.samples})


_SCRATCH_FILES = ("aligned.npy", "indexes.npy", "sample_index.npy", "token_len.npy")


def _scratch_dir(config: Config) -> Path:
    """Where a plan past ``packing.partition_samples`` keeps its per-sample arrays while it runs (deleted when any
    plan is written, partitioned or not: a killed run's are gigabytes at a billion samples)."""
    return config.work_dir / "plan-scratch"


def _remove_scratch(config: Config) -> None:
    scratch = _scratch_dir(config)
    for name in _SCRATCH_FILES:
        (scratch / name).unlink(missing_ok=True)
    if scratch.is_dir():
        scratch.rmdir()


def _aligned(alignment, lengths: np.ndarray, scratch: Path | None) -> np.ndarray:
    """``alignment.aligned_int32(lengths)``; with ``scratch``, an alignment's lengths are written there a chunk at a
    time (a memory-mapped file, released as it is filled) instead of held whole (the lengths themselves when
    nothing is aligned)."""
    if scratch is None or alignment.multiple == 1:
        return alignment.aligned_int32(lengths)
    scratch.mkdir(parents=True, exist_ok=True)
    out = open_memmap(scratch / "aligned.npy", "w+", np.int64 if _overflows(alignment, lengths) else np.int32,
                      (lengths.size,))
    for first in range(0, lengths.size, CHUNK):
        out[first : first + CHUNK] = alignment.aligned(lengths[first : first + CHUNK])
        if (first // CHUNK + 1) % RELEASE_EVERY == 0:
            release(out, lengths)
    release(out, lengths)
    return out


def _overflows(alignment, lengths: np.ndarray) -> bool:
    """An aligned length would not fit an int32 (``Alignment.aligned_int32``'s own test)."""
    top = max((int(lengths[first : first + CHUNK].max()) for first in range(0, lengths.size, CHUNK)), default=0)
    return top > np.iinfo(np.int32).max - alignment.multiple


def mix_of(mixture: dict | None, source: np.ndarray, lengths: np.ndarray, indexes: np.ndarray,
            offsets: np.ndarray) -> Mix | None:
    """Each pack's content per source, in ``offsets``' pack order (None without a mixture)."""
    if mixture is None:
        return None
    rows = mixture["sources"]
    return Mix.of_packs(source, lengths, indexes, offsets, tuple(r["name"] for r in rows),
                        np.array([r["target"] for r in rows], np.float64), mixture["by"] == "tokens")


def mixture_record(mixture: dict, mix: Mix, schedule: Schedule | None, n_train: int) -> tuple[dict, np.ndarray]:
    """bins' per-source accounting plus what the written train order (``mix``) reached: each source's share
    of the train split and its worst share over every window of ``WINDOW_STEPS`` steps (all ranks together;
    without a schedule a step is one pack); and each source's share along the run, thinned for mixture.png."""
    run = StepMix.of_run(mix, n_train, schedule)
    worst, window, series = window_deviation(run.step, run.source, run.amount, run.n_steps, mix.asked)
    train = mix.pack < n_train
    per_source = np.bincount(mix.source[train], weights=mix.amount[train], minlength=len(mix.names))
    total = per_source.sum()
    record = {**mixture, "window_steps": window, "steps": run.n_steps, "train_packs": n_train,
              "worst_window_deviation": float(worst.max()) if worst.size else 0.0}
    record["sources"] = [
        {**row, "asked_share": float(mix.asked[i]), "train_share": float(per_source[i] / total) if total else 0.0,
         "worst_window_deviation": float(worst[i])}
        for i, row in enumerate(mixture["sources"])
    ]
    return record, series


def _balance_lines(plan: PlanArrays, schedule: Schedule | None) -> list[str]:
    """The schedule in words (its balance per step is in the stats table above these lines)."""
    if schedule is None:
        return ["no step balancing (parallel.data_parallel_size: null)"]
    rest = schedule.unscheduled
    rest_samples = int(plan.pack_offsets[schedule.scheduled + rest] - plan.pack_offsets[schedule.scheduled])
    lines = [f"balanced for {schedule.data_parallel_size} data-parallel ranks x {schedule.micro_batches_per_step} "
             f"micro-batches: {schedule.steps} steps of {schedule.micro_batches_per_step} packs per rank"]
    if rest:
        lines.append(f"  {rest} train packs ({rest_samples} samples) fill no step and are read by no "
                     f"balanced loader (fewer than one block of {schedule.data_parallel_size} ranks x "
                     f"{schedule.block} packs, lcm of micro_batches_per_step and loader_workers)")
    return lines


def _stats_done(work_dir, plan_fp: str) -> bool:
    """stats.json (written last) of this plan, beside its stats.png, and no temporary left by a killed run."""
    json_path, png_path = stats_paths(work_dir)
    leftovers = [p.with_name(p.name + ".tmp") for p in (json_path, png_path, plan_path(work_dir))]
    if not png_path.is_file() or not json_path.is_file() or any(p.exists() for p in leftovers):
        return False
    try:
        return json.loads(json_path.read_text()).get("plan_fingerprint") == plan_fp
    except ValueError:
        return False


def _load_bins(config: Config, bins_meta: dict,
               scratch: Path | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]:
    """All groups' packs as one (indexes, offsets), the group code of each pack, and the group names.
    ``scratch``: the groups' indexes are memory-mapped and joined into a mapped file there (``indexes.npy``) a
    chunk at a time, so they are held by no one (4 bytes a sample); None: joined in memory."""
    parts, offs, codes, base, names = [], [np.zeros(1, np.int64)], [], 0, []
    for code, group in enumerate(bins_meta["groups"]):
        idx = np.load(bins_dir(config) / f"{group['name']}.indexes.npy", mmap_mode=None if scratch is None else "r")
        off = np.load(bins_dir(config) / f"{group['name']}.offsets.npy")
        parts.append(idx)
        offs.append(off[1:] + base)
        base += int(off[-1])
        codes.append(np.full(len(off) - 1, code, np.int8))
        names.append(group["name"])
    if scratch is None:
        indexes = np.concatenate(parts) if parts else np.zeros(0, np.int32)
    else:
        scratch.mkdir(parents=True, exist_ok=True)
        indexes = open_memmap(scratch / "indexes.npy", "w+", np.int32, (sum(part.size for part in parts),))
        at = 0
        for part in parts:
            for first in range(0, part.size, CHUNK):
                piece = part[first : first + CHUNK]
                indexes[at : at + piece.size] = piece
                at += piece.size
                if (first // CHUNK + 1) % RELEASE_EVERY == 0:
                    release(part, indexes)
            release(part, indexes)
    pack_group = np.concatenate(codes) if codes else np.zeros(0, np.int8)
    return indexes, np.concatenate(offs), pack_group, tuple(names)
