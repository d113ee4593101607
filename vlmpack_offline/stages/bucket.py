"""``vlmpack bucket``: manifest -> ``work_dir/bins/``, which samples share a pack.

::

    bins/
      lengths.npy              int32 [n_ok]   token_len of every ok sample, manifest order
      <group>.indexes.npy      int32          ok-sample indexes, packs concatenated
      <group>.offsets.npy      int64 [P + 1]  pack p = indexes[offsets[p]:offsets[p+1]]
      meta.json                fingerprint, capacity, algorithm, groups; written last

A group is a media type (``packing.group_by: media_type``) or ``mixed`` (``none``).
meta.json is removed first and written last, so a killed run leaves no bins that
look complete; ``.npy`` files have no timestamps, so the bytes depend only on inputs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from ..artifacts import atomic_open, atomic_write_text, fingerprint
from ..config import Config, section_fingerprint_payload
from ..packing import PackLimits, lower_bound, pack_samples
from ..stage_result import StageResult
from ._ok_samples import OkSamples, load_ok_samples, manifest_fingerprint

__all__ = ["run", "bins_dir", "bins_fingerprint", "read_bins_meta", "build_bins"]


def bins_dir(config: Config) -> Path:
    return config.work_dir / "bins"


def bins_fingerprint(config: Config, manifest_fp: str) -> str:
    return fingerprint({"config": section_fingerprint_payload(config, "sample", "packing"), "manifest": manifest_fp})


def read_bins_meta(config: Config) -> dict | None:
    path = bins_dir(config) / "meta.json"
    return json.loads(path.read_text()) if path.exists() else None


def build_bins(samples: OkSamples, config: Config) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Pure: group the samples and pack each group. Returns {group: (indexes, offsets)}."""
    packing = config.packing
    limits = PackLimits(
        capacity=config.sample.max_token_len,
        max_samples=packing.max_samples_per_pack,
        max_media_tokens=packing.max_media_tokens_per_pack,
    )
    if packing.group_by == "none":
        groups = {"mixed": np.arange(samples.n, dtype=np.int32)}
    else:
        groups = {
            name: np.flatnonzero(samples.media_code == code).astype(np.int32)
            for code, name in enumerate(samples.media_names)
        }
    out = {}
    for name, members in groups.items():
        if members.size == 0:
            continue
        bins = pack_samples(
            samples.token_len[members], limits, algorithm=packing.algorithm,
            media_tokens=samples.media_tokens[members],
        )
        out[name] = (members[bins.indexes], bins.offsets)
    return out


def run(config: Config) -> StageResult:
    started = time.perf_counter()
    expected = bins_fingerprint(config, manifest_fingerprint(config.work_dir))
    meta = read_bins_meta(config)
    if meta is not None and meta.get("fingerprint") == expected:
        return StageResult(stage="bucket", skipped=True, summary=[f"bins up to date ({bins_dir(config)})"])

    out_dir = bins_dir(config)
    (out_dir / "meta.json").unlink(missing_ok=True)
    for stale in out_dir.glob("*.npy"):
        stale.unlink()
    samples = load_ok_samples(config.work_dir)
    groups = build_bins(samples, config)
    _save(out_dir / "lengths.npy", samples.token_len)
    capacity = config.sample.max_token_len
    group_meta = []
    for name, (indexes, offsets) in groups.items():
        _save(out_dir / f"{name}.indexes.npy", indexes)
        _save(out_dir / f"{name}.offsets.npy", offsets)
        group_lb = lower_bound(samples.token_len[indexes], capacity)
        group_meta.append({"name": name, "n_samples": int(indexes.size), "n_packs": len(offsets) - 1,
                           "lower_bound": group_lb})
    n_packs = sum(g["n_packs"] for g in group_meta)
    meta = {
        "stage": "bucket", "fingerprint": expected, "capacity": capacity,
        "algorithm": config.packing.algorithm, "group_by": config.packing.group_by,
        "n_ok": samples.n, "n_packs": n_packs, "groups": group_meta,
    }
    atomic_write_text(out_dir / "meta.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")
    lb = sum(g["lower_bound"] for g in group_meta)
    summary = [f"{samples.n} ok samples -> {n_packs} packs ({config.packing.algorithm}, "
               f"group_by {config.packing.group_by}); lower bound {lb}"]
    summary += [f"  {g['name']}: {g['n_samples']} samples, {g['n_packs']} packs" for g in group_meta]
    return StageResult(stage="bucket", summary=summary, counts={"samples": samples.n, "packs": n_packs},
                       seconds=time.perf_counter() - started)


def _save(path: Path, array: np.ndarray) -> None:
    with atomic_open(path, "wb") as handle:
        np.save(handle, array, allow_pickle=False)
