"""``vlmpack bucket``: manifest -> ``work_dir/bins/``, which samples share a pack.

::

    bins/
      lengths.npy              int32 [n_ok]   token_len of every ok sample, manifest order
      media_tokens.npy         int32 [n_ok]   visual tokens of every ok sample
      encoder_patches.npy      int32 [n_ok]   vision-encoder patches of every ok sample   } the plan's cost
      encoder_attention.npy    int64 [n_ok]   sum of its squared attention blocks          } model reads them
      audio_frames.npy         int32 [n_ok]   audio-encoder frames of every ok sample      }
      audio_attention.npy      int64 [n_ok]   sum of its squared attention windows         }
      <group>.indexes.npy      int32          ok-sample indexes, packs concatenated
      <group>.offsets.npy      int64 [P + 1]  pack p = indexes[offsets[p]:offsets[p+1]]
      overlong.npy             int32 [n_over] ok-sample indexes with token_len > C (in no pack)
      overlong.jsonl           the drop report of those: {"id", "status": "overlong", "token_len", "error"}
      layout_unfit.npy         int32 [n_unfit] ok-sample indexes a published sample.sample_type cannot hold
      layout_unfit.jsonl       the drop report of those: {"id", "status": "layout_unfit", "token_len", "error"}
      meta.json                fingerprint, settings, capacity, alignment, algorithm, groups, n_overlong,
                               n_layout_unfit, drops, losses (the drop gate's count); written last

A group is a media type (``packing.group_by: media_type``) or ``mixed`` (``none``).
The capacity C = ``sample.max_token_len`` is applied here, not in the scan: the scan
records every countable sample as ``ok`` with its token_len, and bucket drops those
longer than C as ``overlong`` (``bins/overlong.*``), so a new C reruns bucket and
plan only. A published layout (``sample.sample_type``, ``layouts/``) that cannot hold a sample
(a system prompt in ``packed_multi_mix_qa`` ...) has it dropped here as ``layout_unfit``, from
what the scan recorded per sample: the rest is packed, and ``write`` never meets it. A sample both
overlong and unfit counts as overlong. Input samples = packed + overlong + layout_unfit + the
manifest's drops; plan, stats and verify all count them from these files, and the drop gate
(``drop_gate.py``, ``scan.max_drop_ratio``) weighs them all.
With an alignment (``parallel:`` / ``packing.align_to``, ``packing/alignment.py``) every
length here counts as its aligned length: what fits, what is overlong, what packs
take and the lower bound; ``lengths.npy`` keeps the real token_len.
meta.json is removed first and written last, so a killed run leaves no bins that
look complete; ``.npy`` files have no timestamps, so the bytes depend only on inputs.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

from ..artifacts import atomic_open, atomic_write_text, canonical_json, fingerprint
from ..config import Config, section_fingerprint_payload
from ..drop_gate import Losses, gate_line, gated
from ..errors import ConfigError, StaleArtifactError
from ..families.media_mix import check_group_by
from ..layouts import layout_for
from ..manifest import Manifest, manifest_path
from ..model_type import resolved_model_type
from ..packing import PackLimits, lower_bound, pack_samples
from ..packing._chunked import CHUNK, flatnonzero32, pack_sums, rows
from ..packing.alignment import round_up
from ..packing.copies import copies, separate_copies
from ..packing.mixture import rules_of, source_slices, use_counts, uses_text
from ..provenance import flat_settings
from ..reasons import Reason
from ..scan_inputs import check_manifest_current, manifest_report
from ..stage_result import StageResult
from ._ok_samples import (
    OkSamples,
    UnfitRows,
    load_layout_unfit,
    load_ok_samples,
    manifest_fingerprint,
    remove_scratch,
    source_counts,
)

__all__ = ["run", "bins_dir", "bins_settings", "bins_fingerprint", "read_bins_meta", "build_bins", "overlong_error",
           "read_bucket_drops", "drop_reports", "closed_gate", "UNFIT_REPORT"]


UNFIT_REPORT = "layout_unfit.jsonl"


def bins_dir(config: Config) -> Path:
    return config.work_dir / "bins"


# settings only the plan reads (order, step balancing, costs): changing them reruns plan, not bucket
_PLAN_ONLY = {"packing": ("seed", "balance_world_size", "cost"),
              "parallel": ("data_parallel_size", "micro_batches_per_step", "loader_workers")}


def bins_settings(config: Config, n_ok: int | None = None) -> dict:
    """What the bins depend on besides the manifest, flat by name (``provenance.flat_settings``).

    ``packing.partition_samples`` only where it applies (``partitioned``): at or below it the bins are the bytes
    of no partitioning, so a changed value there rebuilds nothing (and bins made before the setting existed stay
    current)."""
    sections = section_fingerprint_payload(config, "sample", "packing", "parallel")
    for section, keys in _PLAN_ONLY.items():
        for key in keys:
            sections[section].pop(key)
    if not partitioned(config, n_ok):
        sections["packing"].pop("partition_samples")
    if config.data.sources:  # the mixture's rules and the seed of its draws (not the sources' shards: the scan's)
        sections["mixture"] = {"rules": {r.name: {"kind": r.kind, "value": r.value} for r in rules_of(config)},
                               "order": [r.name for r in rules_of(config)], "by": config.data.mix_by,
                               "epochs": config.plan.epochs, "seed": config.packing.seed,
                               "allow_empty": config.data.allow_empty_sources}
    return flat_settings(sections)


def bins_fingerprint(config: Config, manifest_fp: str, n_ok: int | None = None) -> str:
    return fingerprint({"settings": bins_settings(config, n_ok), "manifest": manifest_fp})


def partitioned(config: Config, n_ok: int | None = None) -> bool:
    """Whether bucket packs the ok samples in partitions (more of them than ``packing.partition_samples``).
    ``n_ok``: their number; None: the one the current bins record (where there are none, or they were built from
    another manifest, the bins are rebuilt whatever this says, and their record is then made with the count)."""
    if n_ok is None:
        n_ok = (read_bins_meta(config) or {}).get("n_ok")
    return n_ok is None or n_ok > config.packing.partition_samples


def read_bins_meta(config: Config) -> dict | None:
    path = bins_dir(config) / "meta.json"
    return json.loads(path.read_text()) if path.exists() else None


def overlong_error(token_len: int, capacity: int, multiple: int = 1) -> str:
    if multiple == 1:
        return (f"sample is too long ({token_len} > {capacity} tokens): raise sample.max_token_len "
                "or leave it dropped")
    aligned = round_up(token_len, multiple)
    return (f"sample is too long ({token_len} tokens, {aligned} aligned to a multiple of {multiple} > {capacity}): "
            "raise sample.max_token_len or leave it dropped")


def read_bucket_drops(config: Config) -> dict[str, str]:
    """Id -> reason of every sample bucket dropped (``bins/overlong.jsonl`` and ``bins/layout_unfit.jsonl``)."""
    out: dict[str, str] = {}
    for name in ("overlong.jsonl", UNFIT_REPORT):
        path = bins_dir(config) / name
        if path.exists():
            with open(path) as handle:
                out.update((row["id"], row["status"]) for row in map(json.loads, filter(str.strip, handle)))
    return out


def build_bins(samples: OkSamples, config: Config, uses: np.ndarray | None = None, *,
               unfit: np.ndarray | None = None) -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    """Pure: group the samples within capacity and pack each group.
    Returns {group: (indexes, offsets, copies left in one pack)}.

    Samples longer than ``sample.max_token_len`` are in no group (they are the overlong drops), nor are those
    ``unfit`` marks (bool per ok sample: the layout's ``layout_unfit`` drops).
    ``uses``: how many copies of each sample to pack (``packing/mixture.py``; default: every sample
    that fits, once); copies are packed as distinct samples, then kept apart (``copies.separate_copies``).

    More ok samples than ``packing.partition_samples`` (P): they are packed in consecutive partitions of P
    (ok samples ``0..P-1``, ``P..2P-1``, ... in manifest order), each exactly as a data set of its own, and
    a group's packs are its partitions' packs in partition order. The partitions are fixed by the data and
    the setting alone, never by a worker or node count, so the bins are the same bytes wherever they are
    made; at most P samples' scratch is ever held (packing's sort, bin ids and masks: ~20 bytes a sample)
    and a memory-mapped column is read one partition at a time (``OkSamples.rows``). Manifest order, not
    lengths, decides the partitions because each must be packable from its own rows (a partitioned
    manifest's part), and a partition of millions of samples draws its lengths from the same mix as the
    whole: best-fit decreasing is as close to the bound on it as on the whole (a part-filled last pack or
    two per group and partition, docs/performance.md). At or below P this is one partition: unchanged."""
    size = config.packing.partition_samples
    if samples.n <= size:
        return _pack_partition(samples, config, uses, unfit=unfit)
    names = ("mixed",) if config.packing.group_by == "none" else samples.media_names
    parts: dict[str, list[tuple[np.ndarray, np.ndarray, int]]] = {name: [] for name in names}
    tails: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {name: [] for name in names}
    capacity = config.sample.max_token_len
    for first in range(0, samples.n, size):
        last = min(first + size, samples.n)
        part, part_uses = samples.rows(first, last), None if uses is None else rows(uses, first, last)
        got = _pack_partition(part, config, part_uses, unfit=None if unfit is None else rows(unfit, first, last))
        aligned = config.alignment.aligned_int32(part.token_len)
        copied = part_uses is not None and int(part_uses.max(initial=0)) > 1  # copies kept apart stay as packed
        for name, (indexes, offsets, together) in got.items():
            sparse = _tail_packs(pack_sums(aligned, indexes, offsets), capacity)
            indexes += np.int32(first)  # the partition's own array: back to positions among all ok samples
            if sparse.any() and not copied:
                keep = np.repeat(~sparse, np.diff(offsets))
                tails[name].append((indexes[~keep], aligned[indexes[~keep] - first]))
                indexes, offsets = indexes[keep], np.concatenate([[0], np.cumsum(np.diff(offsets)[~sparse])])
            parts[name].append((indexes, offsets, together))
        del got, part, aligned
    out = {}
    for name in names:  # the groups in the order one partition lists them (media type code order)
        pieces = parts.pop(name)
        if tails[name]:
            pieces.append(_pack_tail(tails.pop(name), samples, config))
        if not pieces:
            continue
        sizes = np.concatenate([np.diff(piece[1]) for piece in pieces])
        offsets = np.zeros(sizes.size + 1, np.int64)
        np.cumsum(sizes, out=offsets[1:])
        indexes, at, together = np.empty(int(offsets[-1]), np.int32), 0, sum(piece[2] for piece in pieces)
        while pieces:  # each piece freed once copied: the group's indexes are held once, not twice
            piece = pieces.pop(0)[0]
            indexes[at : at + piece.size] = piece
            at += piece.size
            del piece
        out[name] = (indexes, offsets, together)
        del sizes
    return out


_TAIL_FILL = 0.99  # a partition's packs filled less than this are packed again with the other partitions' (_tail_packs)
_TAIL_PACKS = 16  # of them, at most this many per partition and group: the tail stays a few packs' samples


def _tail_packs(totals: np.ndarray, capacity: int) -> np.ndarray:
    """Bool per pack of one partition's group: its tail, the packs to pack again with the other partitions' tails.

    Packed longest first, nearly every pack of a partition is full but the last few (the whole's packing has
    the same few, once): under ``_TAIL_FILL`` of the capacity, at most ``_TAIL_PACKS`` of them (the emptiest,
    ties by position), so the tail is bounded whatever the lengths (long samples leave many packs part-filled)."""
    under = np.flatnonzero(totals < _TAIL_FILL * capacity)
    if under.size > _TAIL_PACKS:
        under = under[np.argsort(totals[under], kind="stable")[:_TAIL_PACKS]]
    tail = np.zeros(totals.size, bool)
    tail[under] = True
    return tail


def _pack_tail(tails: list[tuple[np.ndarray, np.ndarray]], samples: OkSamples,
               config: Config) -> tuple[np.ndarray, np.ndarray, int]:
    """The samples of the partitions' tails (``_tail_packs``), packed again together, at the end of their group:
    partitions then cost about what one packing of the whole costs (the bound's few packs), and the plan meets
    no run of part-filled packs, each its own cost, that no balanced slot can even out (a few per partition
    and group otherwise; a step 1.3x its mean at 100M samples in partitions of 25M: docs/performance.md). A partition with copies of a sample (a mixture's)
    keeps its packs as they are (``separate_copies`` kept the copies apart there), so no sample is here twice."""
    items = np.concatenate([t[0] for t in tails])
    packing = config.packing
    limits = PackLimits(capacity=config.sample.max_token_len, max_samples=packing.max_samples_per_pack,
                        max_media_tokens=packing.max_media_tokens_per_pack)
    order = np.argsort(items, kind="stable")  # by sample index, as a partition lists its members
    items = items[order]
    lengths = np.concatenate([t[1] for t in tails])[order]
    bins = pack_samples(lengths, limits, algorithm=packing.algorithm,
                        media_tokens=None if limits.unlimited else np.asarray(samples.media_tokens[items]))
    return items[bins.indexes].astype(np.int32), bins.offsets.astype(np.int64), 0


def _pack_partition(samples: OkSamples, config: Config, uses: np.ndarray | None = None, *,
                    unfit: np.ndarray | None = None) -> dict[str, tuple[np.ndarray, np.ndarray, int]]:
    """``build_bins`` on samples that are packed as one partition: the whole-array planner."""
    packing = config.packing
    limits = PackLimits(
        capacity=config.sample.max_token_len,
        max_samples=packing.max_samples_per_pack,
        max_media_tokens=packing.max_media_tokens_per_pack,
    )
    lengths = config.alignment.aligned_int32(samples.token_len)
    fits = _packable(lengths, limits.capacity, unfit)
    if packing.group_by == "none":
        groups = {"mixed": lambda a, b: fits[a:b]}
    else:  # a group's members are found when it is packed: one group's indexes at a time, not all
        codes = samples.media_code
        groups = {name: (lambda a, b, code=code: fits[a:b] & (codes[a:b] == code))
                  for code, name in enumerate(samples.media_names)}
    out = {}
    for name, member_mask in groups.items():
        members = flatnonzero32(fits.size, member_mask)  # ascending: the order a stable sort by group gives
        repeated = uses is not None and not _each_once(uses, members)
        items = members[copies(uses[members])] if repeated else members  # once each: copies() is members
        del members
        if items.size == 0:
            continue
        bins = pack_samples(lengths[items], limits, algorithm=packing.algorithm,
                            media_tokens=None if limits.unlimited else samples.media_tokens[items])
        indexes, offsets, together = items[bins.indexes], bins.offsets, 0
        del bins, items
        if repeated and int(uses[indexes].max(initial=0)) > 1:  # copies to keep apart
            media = samples.media_tokens if limits.max_media_tokens is not None else None  # trades keep it equal
            indexes, offsets, together = separate_copies(indexes, offsets, lengths, limits, media)
        out[name] = (indexes.astype(np.int32, copy=False), offsets.astype(np.int64, copy=False), together)
    return out


def _each_once(uses: np.ndarray, members: np.ndarray, chunk: int = CHUNK) -> bool:
    """Every one of ``members`` is used exactly once (no copies to make or keep apart), read a chunk at a time."""
    for first in range(0, members.size, chunk):
        part = uses[members[first : first + chunk]]
        if int(part.min()) != 1 or int(part.max()) != 1:
            return False
    return True


def mixture_uses(samples: OkSamples, config: Config, scanned: dict[str, dict[str, int]] | None = None, *,
                 unfit: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """(source code per ok sample, in ``data.source_list`` order), uses per ok sample by the sources' rules
    (``packing/mixture.py``), and the per-source accounting.

    Raises ``ConfigError`` for a source whose rule asks for samples when none is packable, unless
    ``data.allow_empty_sources``; then its name is in the accounting's ``empty``. ``scanned``: per source,
    the scan's sample count and drops by reason (``_ok_samples.source_counts``), copied into the accounting."""
    rules = rules_of(config)
    code_of = {rule.name: i for i, rule in enumerate(rules)}
    unknown = [name for name in samples.source_names if name not in code_of]
    if unknown:
        raise StaleArtifactError(f"the manifest holds source {unknown[0]!r}, which data.sources does not name: "
                                 "rescan (`vlmpack scan`) or restore the source")
    remap = np.array([code_of[name] for name in samples.source_names] or [0], np.int16)
    source = remap[samples.source_code] if samples.n else np.zeros(0, np.int16)
    aligned = config.alignment.aligned_int32(samples.token_len)
    over = aligned > config.sample.max_token_len
    fits = _packable(aligned, config.sample.max_token_len, unfit)
    uses, targets = use_counts(source, samples.token_len, fits, rules, by_tokens=config.data.mix_by == "tokens",
                               epochs=config.plan.epochs, seed=config.packing.seed)
    if targets.empty and config.data.sources and not config.data.allow_empty_sources:  # one source: _checked says it
        raise ConfigError(f"source {targets.empty[0]!r} has no sample left to pack (each was dropped: see "
                          f"{manifest_report(config)}, bins/overlong.jsonl and bins/layout_unfit.jsonl), so its "
                          "share cannot be met; "
                          "fix its data, or set data.allow_empty_sources: true to pack the other sources")
    record = {"by": config.data.mix_by, "epochs": config.plan.epochs, "empty": list(targets.empty), "sources": []}
    for code, (rule, mine) in enumerate(zip(rules, source_slices(source, len(rules)), strict=True)):
        counts = np.bincount(uses[mine[fits[mine]]], minlength=1)
        scan_row = dict((scanned or {}).get(rule.name, {}))
        record["sources"].append({
            "name": rule.name, "rule": rule.kind, "value": rule.value,
            "scanned": scan_row.pop("scanned", int(mine.size)), "dropped": scan_row,
            "available": float(targets.available[code]), "target": float(targets.target[code]),
            "reached": float(targets.used[code]),
            "ok": int(mine.size), "overlong": int(np.count_nonzero(over[mine])),
            "layout_unfit": int(np.count_nonzero(~fits[mine] & ~over[mine])),
            "uses": {str(k): int(n) for k, n in enumerate(counts) if n},  # uses -> samples used that often
            "packed": int(uses[mine].sum()),
            "packed_tokens": int((uses[mine].astype(np.int64) * samples.token_len[mine]).sum()),
        })
    return source, uses, record


def _model_type(config: Config) -> str:
    """The model type the scan counted for; "" where the config cannot name it (the scan said why)."""
    try:
        return resolved_model_type(config.model)
    except ConfigError:
        return ""


def run(config: Config) -> StageResult:
    started = time.perf_counter()
    manifest_fp = manifest_fingerprint(config.work_dir)
    with Manifest(manifest_path(config.work_dir)) as manifest:
        check_manifest_current(config, manifest)  # a changed counting setting: rescan first, said by name
    if config.packing.group_by != "media_type":  # packs of any mix: a forward taking one media kind refuses them
        check_group_by(_model_type(config), config.packing.group_by)
    expected = bins_fingerprint(config, manifest_fp)
    meta = read_bins_meta(config)
    if meta is not None and meta.get("fingerprint") == expected:
        remove_scratch(config.work_dir)  # a run killed after its meta, before its cleanup
        skipped = StageResult(stage="bucket", skipped=True, summary=[f"bins up to date ({bins_dir(config)})"])
        return _checked(config, skipped, meta)

    out_dir = bins_dir(config)
    (out_dir / "meta.json").unlink(missing_ok=True)
    for stale in [*out_dir.glob("*.npy"), out_dir / "overlong.jsonl", out_dir / UNFIT_REPORT]:
        stale.unlink(missing_ok=True)
    # past packing.partition_samples the ok rows' columns are memory-mapped files in work_dir/bucket-scratch
    samples = load_ok_samples(config.work_dir, in_memory_up_to=config.packing.partition_samples)
    capacity, alignment = config.sample.max_token_len, config.alignment
    aligned = alignment.aligned_int32(samples.token_len)
    unfit_rows, unfit = _layout_unfit(config, aligned, samples.n)
    source, uses, mixture = mixture_uses(samples, config, source_counts(config.work_dir), unfit=unfit)
    groups = build_bins(samples, config, uses, unfit=unfit)
    overlong = np.flatnonzero(aligned > capacity).astype(np.int32)
    _save(out_dir / "source.npy", source)
    _save(out_dir / "uses.npy", uses.astype(np.uint16))
    _save(out_dir / "lengths.npy", samples.token_len)
    _save(out_dir / "media_tokens.npy", samples.media_tokens)
    _save(out_dir / "encoder_patches.npy", samples.encoder_patches)
    _save(out_dir / "encoder_attention.npy", samples.encoder_attention)
    none = samples.audio_frames is None  # a caller's samples without audio columns hold no audio
    _save(out_dir / "audio_frames.npy", np.zeros(samples.n, np.int32) if none else samples.audio_frames)
    _save(out_dir / "audio_attention.npy", np.zeros(samples.n, np.int64) if none else samples.audio_attention)
    _save(out_dir / "overlong.npy", overlong)
    _save(out_dir / "layout_unfit.npy", unfit_rows.index)
    _write_overlong_report(config, overlong, capacity, alignment.multiple)
    _write_unfit_report(config, unfit_rows)
    group_meta = []
    for name, (indexes, offsets, together) in groups.items():
        _save(out_dir / f"{name}.indexes.npy", indexes)
        _save(out_dir / f"{name}.offsets.npy", offsets)
        group_lb = lower_bound(aligned[indexes], capacity)
        group_meta.append({"name": name, "n_samples": int(indexes.size), "n_packs": len(offsets) - 1,
                           "lower_bound": group_lb, "copies_together": together})
    n_packs = sum(g["n_packs"] for g in group_meta)
    n_packed = int(uses.sum())  # sub-samples: a sample used twice counts twice
    n_unfit = int(unfit_rows.index.size)
    losses = Losses(total=samples.n + sum(samples.drops.values()),
                    by_reason={**samples.drops, Reason.OVERLONG: len(overlong), Reason.LAYOUT_UNFIT: n_unfit})
    meta = {
        "stage": "bucket", "fingerprint": bins_fingerprint(config, manifest_fp, samples.n),
        "settings": bins_settings(config, samples.n), "manifest_fingerprint": manifest_fp,
        "capacity": capacity, "alignment": alignment.record(),
        "algorithm": config.packing.algorithm, "group_by": config.packing.group_by,
        "sample_type": config.sample.sample_type,
        "n_ok": samples.n, "n_packed": n_packed, "n_overlong": len(overlong), "n_layout_unfit": n_unfit,
        "n_packs": n_packs, "n_left_out": int(np.count_nonzero((uses == 0) & _packable(aligned, capacity, unfit))),
        "groups": group_meta, "manifest_drops": samples.drops, "mixture": mixture, "losses": losses.to_json(),
    }
    atomic_write_text(out_dir / "meta.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")
    remove_scratch(config.work_dir)  # bins/ holds the columns now (a killed run's: rewritten first, then removed)
    lb = sum(g["lower_bound"] for g in group_meta)
    summary = [f"{n_packed} samples -> {n_packs} packs ({config.packing.algorithm}, "
               f"group_by {config.packing.group_by}); lower bound {lb}"]
    summary += [f"  {g['name']}: {g['n_samples']} samples, {g['n_packs']} packs" for g in group_meta]
    if partitioned(config, samples.n):
        size = config.packing.partition_samples
        summary.append(f"packed in {-(-samples.n // size)} partitions of at most {size:,} ok samples (packing."
                       "partition_samples), each partition's part-filled packs packed again together")
    if config.data.sources:
        summary += mixture_lines(mixture)
    together = sum(g["copies_together"] for g in group_meta)
    if together:
        summary.append(f"{together} copies share a pack with another copy of their sample: no sample of the same "
                       "length to trade places with, and too many to pack again apart (packing/copies.py)")
    if alignment.multiple > 1:
        summary.append(f"aligned for {alignment.describe()}")
    if len(overlong):
        summary.append(f"{len(overlong)} samples dropped as {Reason.OVERLONG} (> {capacity} tokens"
                       f"{' aligned' if alignment.multiple > 1 else ''}): {bins_dir(config) / 'overlong.jsonl'}")
    if n_unfit:
        why = ", ".join(f"{text} {n}" for text, n in Counter(unfit_rows.why).most_common())
        summary.append(f"{n_unfit} samples dropped as {Reason.LAYOUT_UNFIT} (sample.sample_type "
                       f"{config.sample.sample_type} cannot hold them: {why}): {bins_dir(config) / UNFIT_REPORT}")
    result = StageResult(stage="bucket", summary=summary,
                         counts={"samples": n_packed, "packs": n_packs, f"dropped_{Reason.OVERLONG}": len(overlong),
                                 f"dropped_{Reason.LAYOUT_UNFIT}": n_unfit},
                         seconds=time.perf_counter() - started)
    return _checked(config, result, meta)


def mixture_lines(mixture: dict) -> list[str]:
    """The mixture per source: its rule, what it holds, what the plan uses of it and its share (asked / reached)."""
    unit = "tokens" if mixture["by"] == "tokens" else "samples"
    total_target = sum(s["target"] for s in mixture["sources"]) or 1.0
    total_reached = sum(s["reached"] for s in mixture["sources"]) or 1.0
    lines = [f"mixture by {unit}, {mixture['epochs']} epoch(s): source (rule): scanned, dropped, overlong -> "
             f"copies packed (samples by uses), tokens; share reached / asked"]
    for s in mixture["sources"]:
        by_uses = uses_text(s["uses"])
        unfit = f", {s['layout_unfit']} layout_unfit" if s.get("layout_unfit") else ""
        lines.append(f"  {s['name']} ({s['rule']} {s['value']:g}): {s['scanned']} scanned, "
                     f"{sum(s['dropped'].values())} dropped, {s['overlong']} overlong{unfit} -> {s['packed']} packed "
                     f"({by_uses}), {s['packed_tokens']} tokens; share {s['reached'] / total_reached:.2%} / "
                     f"{s['target'] / total_target:.2%}")
    lines += [f"  warning: source {name!r} has no sample left to pack; the others are packed "
              "(data.allow_empty_sources)" for name in mixture["empty"]]
    return lines


def _checked(config: Config, result: StageResult, meta: dict) -> StageResult:
    """``result`` through the drop gate (``drop_gate``: the scan's drops, overlong and layout_unfit together
    against ``scan.max_drop_ratio``, exit 1 past it), with what the capacity cut when it cut something: the
    lengths of the ok samples, and a line of its own when no sample fits at all. Said after the bins and
    their reports are written, and again by a no-op rerun."""
    n_ok, n_overlong = meta["n_ok"], meta["n_overlong"]
    details = []
    if n_ok and n_overlong:
        lengths = np.load(bins_dir(config) / "lengths.npy", allow_pickle=False)
        median, p99 = (int(v) for v in np.percentile(lengths, [50, 99], method="higher"))
        seen = (f"(ok samples: shortest {int(lengths.min())}, median {median}, p99 {p99}, longest "
                f"{int(lengths.max())} tokens); each is in {bins_dir(config) / 'overlong.jsonl'}")
        if n_overlong == n_ok:
            line = (f"no sample fits sample.max_token_len {meta['capacity']}: all {n_ok} are longer {seen}; "
                    "raise sample.max_token_len")
            return dataclasses.replace(result, summary=[*result.summary, line], exit_code=1)
        details.append(f"{n_overlong} of {n_ok} ok samples are longer than sample.max_token_len {meta['capacity']} "
                       f"{seen}; is the capacity right?")
    return gated(result, Losses.from_json(meta["losses"]), config.scan.max_drop_ratio, drop_reports(config), details)


def closed_gate(config: Config) -> str | None:
    """The drop gate's line when the bins lost more than ``scan.max_drop_ratio`` (plan, write and verify say it
    and exit 1, as bucket did), else None; None without bins (a hand-made plan has no losses to weigh)."""
    losses = (read_bins_meta(config) or {}).get("losses")
    return gate_line(Losses.from_json(losses), config.scan.max_drop_ratio, drop_reports(config)) if losses else None


def drop_reports(config: Config) -> list[Path]:
    """Where every drop up to bucket is listed, each with its reason (the drop gate's line names them)."""
    return [manifest_report(config), bins_dir(config) / "overlong.jsonl", bins_dir(config) / UNFIT_REPORT]


def _packable(aligned: np.ndarray, capacity: int, unfit: np.ndarray | None) -> np.ndarray:
    """Bool per ok sample: within capacity once aligned, and held by the layout."""
    fits = aligned <= capacity
    return fits if unfit is None else fits & ~unfit


def _layout_unfit(config: Config, aligned: np.ndarray, n_ok: int) -> tuple[UnfitRows, np.ndarray | None]:
    """The samples the configured published layout cannot hold (an overlong one stays overlong only), and
    them as a bool mask per ok sample; vlmpack's own layout holds every sample (no manifest read)."""
    if not layout_for(config.sample.sample_type).published:
        return UnfitRows(index=np.zeros(0, np.int32), ids=(), token_len=(), why=()), None
    rows = load_layout_unfit(config.work_dir, config.sample.sample_type)
    keep = aligned[rows.index] <= config.sample.max_token_len if rows.index.size else np.zeros(0, bool)
    kept = UnfitRows(index=rows.index[keep], ids=tuple(i for i, k in zip(rows.ids, keep, strict=True) if k),
                     token_len=tuple(n for n, k in zip(rows.token_len, keep, strict=True) if k),
                     why=tuple(w for w, k in zip(rows.why, keep, strict=True) if k))
    mask = np.zeros(n_ok, bool)
    mask[kept.index] = True
    return kept, mask


def _write_unfit_report(config: Config, rows: UnfitRows) -> None:
    """``layout_unfit.jsonl``: one line per sample the layout cannot hold, in manifest order, with why."""
    layout = config.sample.sample_type
    with atomic_open(bins_dir(config) / UNFIT_REPORT, "w") as handle:
        for sample_id, token_len, why in zip(rows.ids, rows.token_len, rows.why, strict=True):
            handle.write(canonical_json({
                "id": sample_id, "status": Reason.LAYOUT_UNFIT, "token_len": token_len,
                "error": f"sample.sample_type {layout} cannot hold it: {why}; vlmpack_packed holds every sample",
            }) + "\n")


def _write_overlong_report(config: Config, overlong: np.ndarray, capacity: int, multiple: int) -> None:
    """``overlong.jsonl``: one line per dropped sample, in manifest order (ids read back from sqlite)."""
    with atomic_open(bins_dir(config) / "overlong.jsonl", "w") as handle:
        if not overlong.size:
            return
        with Manifest(manifest_path(config.work_dir)) as manifest:
            rows = manifest.select_samples(
                "SELECT id, token_len FROM samples WHERE status = 'ok' AND ((token_len + ? - 1) / ?) * ? > ? "
                "ORDER BY shard, seq",
                (multiple, multiple, multiple, capacity),
            )
            for sample_id, token_len in rows:
                handle.write(canonical_json({"id": sample_id, "status": Reason.OVERLONG, "token_len": token_len,
                                             "error": overlong_error(token_len, capacity, multiple)}) + "\n")


def _save(path: Path, array: np.ndarray) -> None:
    with atomic_open(path, "wb") as handle:
        np.save(handle, array, allow_pickle=False)
