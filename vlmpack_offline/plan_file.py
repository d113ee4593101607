"""The plan's artifact: ``work_dir/pack_plan.npz``, packs in training order as flat numpy arrays.

::

    pack_plan.npz  (a zip of .npy, stored uncompressed, fixed timestamps: same plan, same bytes)
      pack_offsets   int64 [P + 1]  pack p = rows pack_offsets[p]:pack_offsets[p+1] of the arrays below
      sample_index   int64 [N]      the sample's position among the manifest's ok rows (shard, seq order)
      token_len      int32 [N]      token_len of each sample, in pack order (longest first)
      split          int8  [P]      0 train, 1 val
      group          int8  [P]      index into meta["groups"] (media type, or "mixed")
      media_tokens   int64 [P]      visual tokens in the pack
      cost           float64 [P]    the pack's training cost (packing/cost.py), FLOPs
      id_bytes       uint8 [..]     only when meta["ids"] == "stored": the ids, utf-8, concatenated
      id_offsets     int64 [N + 1]  only then: id i = id_bytes[id_offsets[i]:id_offsets[i+1]]
    pack_plan.meta.json  fingerprint, capacity, seed, counts, groups, ids ("manifest" | "stored"),
                         manifest_fingerprint; written last (marks the plan complete)

``plan`` stores no ids (``ids: manifest``): they are resolved from the manifest's ok
rows when read, which must still carry the fingerprint the plan recorded. That keeps a
100M-sample plan at ~1.5 GiB of arrays, written in seconds. ``write_plan`` (a list of
``Pack``) stores the ids once in the file. ``read_plan`` yields the same ``Pack`` records
either way; ``export_jsonl`` writes the readable ``pack_plan.jsonl`` (one pack per line,
the published tool's field names ``pack_id``, ``sample_ids``, ``sample_token_lens``,
``total_token_len``, plus ``split``, ``media_type``, ``media_tokens``) on request:
``python -m vlmpack_offline.plan_file WORK_DIR [OUT.jsonl]``. ``plan`` deletes an old export.
Past ``packing.partition_samples`` write resolves the ids from the id store ``work_dir/ok-ids`` instead
(``read_plan(..., ids_on_disk=True)``): memory-mapped, so no process holds every id (issue 37).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .artifacts import atomic_open, canonical_json
from .errors import StaleArtifactError
from .packing._chunked import RELEASE_EVERY, pack_chunks, release
from .packing.alignment import round_up

__all__ = [
    "Pack", "PlanArrays", "plan_path", "plan_meta_path", "jsonl_path", "write_plan", "write_plan_arrays",
    "read_plan", "read_plan_arrays", "read_plan_meta", "export_jsonl", "SPLITS",
]

SPLITS = ("train", "val")  # split code = position
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_BLOCK = 50_000  # packs per block when resolving ids


@dataclass(frozen=True, slots=True, kw_only=True)
class Pack:
    pack_id: int  # position in training order, 0..n-1
    split: str  # "train" or "val"
    media_type: str  # "text" | "image" | "video" | "audio" | "mixed" (group_by: none)
    sample_ids: tuple[str, ...]  # manifest ids, in the order they sit in the pack
    sample_token_lens: tuple[int, ...]  # token_len of each sample, same order
    media_tokens: int = 0  # visual tokens in the pack (for DP balancing and stats)

    @property
    def total_token_len(self) -> int:
        return sum(self.sample_token_lens)

    def to_json(self) -> dict:
        return {
            "pack_id": self.pack_id,
            "split": self.split,
            "media_type": self.media_type,
            "sample_ids": list(self.sample_ids),
            "sample_token_lens": list(self.sample_token_lens),
            "total_token_len": self.total_token_len,
            "media_tokens": self.media_tokens,
        }

    @classmethod
    def from_json(cls, raw: dict) -> Pack:
        return cls(
            pack_id=int(raw["pack_id"]),
            split=str(raw.get("split", "train")),
            media_type=str(raw.get("media_type", "mixed")),
            sample_ids=tuple(raw["sample_ids"]),
            sample_token_lens=tuple(int(n) for n in raw["sample_token_lens"]),
            media_tokens=int(raw.get("media_tokens", 0)),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanArrays:
    pack_offsets: np.ndarray  # int64 [P + 1]
    token_len: np.ndarray  # int32 [N], pack order
    split: np.ndarray  # int8 [P], code into SPLITS
    group: np.ndarray  # int8 [P], code into group_names
    media_tokens: np.ndarray  # int64 [P]
    group_names: tuple[str, ...]  # media type per group code
    sample_index: np.ndarray | None = None  # int64 [N], ok-row index in the manifest (ids: manifest)
    id_bytes: np.ndarray | None = None  # uint8, ids concatenated (ids: stored)
    id_offsets: np.ndarray | None = None  # int64 [N + 1] (ids: stored)
    cost: np.ndarray | None = None  # float64 [P], FLOPs (packing/cost.py); None in plans written from Pack lists

    @property
    def n_packs(self) -> int:
        return len(self.pack_offsets) - 1

    @property
    def pack_sizes(self) -> np.ndarray:
        return np.diff(self.pack_offsets)

    @property
    def pack_totals(self) -> np.ndarray:
        return self.aligned_pack_totals(1)

    def aligned_pack_totals(self, multiple: int) -> np.ndarray:
        """Per pack, its sub-samples' lengths each rounded up to ``multiple``: the slots it fills once padded."""
        out = np.zeros(self.n_packs, np.int64)
        if not self.token_len.size:
            return out
        # whole packs of ~CHUNK sub-samples at a time: no int64 copy of token_len
        for first, last in pack_chunks(self.pack_offsets, mapped=(self.token_len,)):
            lo, hi = int(self.pack_offsets[first]), int(self.pack_offsets[last])
            if hi > lo:
                lengths = round_up(self.token_len[lo:hi].astype(np.int64), multiple)
                out[first:last] = np.add.reduceat(lengths, self.pack_offsets[first:last] - lo)
        return out


def plan_path(work_dir: str | Path) -> Path:
    return Path(work_dir) / "pack_plan.npz"


def plan_meta_path(work_dir: str | Path) -> Path:
    return Path(work_dir) / "pack_plan.meta.json"


def jsonl_path(work_dir: str | Path) -> Path:
    return Path(work_dir) / "pack_plan.jsonl"


def write_plan_arrays(work_dir: str | Path, plan: PlanArrays, meta: dict) -> None:
    """Write the arrays, then the meta; both atomically (the meta last marks the plan complete)."""
    arrays = {  # each in its file's dtype; an array already in it is written as it is, not copied
        "pack_offsets": (plan.pack_offsets, np.int64), "token_len": (plan.token_len, np.int32),
        "split": (plan.split, np.int8), "group": (plan.group, np.int8), "media_tokens": (plan.media_tokens, np.int64),
    }
    if plan.cost is not None:
        arrays["cost"] = (plan.cost, np.float64)
    if plan.id_bytes is not None:
        arrays |= {"id_bytes": (plan.id_bytes, np.uint8), "id_offsets": (plan.id_offsets, np.int64)}
        ids = "stored"
    else:
        arrays["sample_index"] = (plan.sample_index, np.int64)
        ids = "manifest"
    with atomic_open(plan_path(work_dir), "wb") as handle, zipfile.ZipFile(handle, "w", zipfile.ZIP_STORED) as zf:
        for name, (array, dtype) in arrays.items():
            with zf.open(zipfile.ZipInfo(f"{name}.npy", date_time=_ZIP_TIME), "w", force_zip64=True) as member:
                _write_npy(member, np.ascontiguousarray(array.astype(dtype, copy=False)))
    meta = {**meta, "format": "vlmpack.plan/2", "groups": list(plan.group_names), "ids": ids}
    with atomic_open(plan_meta_path(work_dir), "w") as handle:
        handle.write(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def _write_npy(member, array: np.ndarray, piece: int = 1 << 24) -> None:
    """``np.lib.format.write_array(member, array)`` for a 1-D contiguous array, byte for byte (a 1.0 header,
    as write_array picks for a header this short, then the data), written ``piece`` bytes at a time; a
    memory-mapped array (``plan.make_plan``'s scratch) has its pages released as they are written
    (``_chunked.release``), so writing a billion samples' plan adds no billion-sample RSS."""
    np.lib.format.write_array_header_1_0(member, np.lib.format.header_data_from_array_1_0(array))
    step = max(1, piece // max(array.itemsize, 1))
    for count, first in enumerate(range(0, array.size, step), 1):
        member.write(array[first : first + step].data)
        if count % RELEASE_EVERY == 0:  # 16 pieces: 256 MiB of pages at most
            release(array)
    release(array)


def write_plan(work_dir: str | Path, packs: Iterable[Pack], meta: dict) -> None:
    """Write a plan given as ``Pack`` records (ids stored in the file); pack_ids must be 0..P-1 in order."""
    packs = list(packs)
    if [p.pack_id for p in packs] != list(range(len(packs))):
        raise ValueError("write_plan: packs must come in pack_id order 0..P-1")
    names = tuple(dict.fromkeys(p.media_type for p in packs))
    ids = [i.encode() for p in packs for i in p.sample_ids]
    id_offsets = np.zeros(len(ids) + 1, np.int64)
    np.cumsum([len(i) for i in ids], out=id_offsets[1:])
    sizes = [len(p.sample_ids) for p in packs]
    offsets = np.zeros(len(packs) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    plan = PlanArrays(
        pack_offsets=offsets,
        token_len=np.asarray([n for p in packs for n in p.sample_token_lens], np.int32),
        split=np.asarray([SPLITS.index(p.split) for p in packs], np.int8),
        group=np.asarray([names.index(p.media_type) for p in packs], np.int8),
        media_tokens=np.asarray([p.media_tokens for p in packs], np.int64),
        group_names=names, id_bytes=np.frombuffer(b"".join(ids), np.uint8), id_offsets=id_offsets,
    )
    write_plan_arrays(work_dir, plan, meta)


def read_plan_meta(work_dir: str | Path) -> dict | None:
    path = plan_meta_path(work_dir)
    return json.loads(path.read_text()) if path.exists() else None


def read_plan_arrays(work_dir: str | Path) -> PlanArrays:
    meta = read_plan_meta(work_dir) or {}
    with np.load(plan_path(work_dir), allow_pickle=False) as npz:
        arrays = {name: npz[name] for name in npz.files}
    return PlanArrays(group_names=tuple(meta.get("groups", ())), **arrays)


def read_plan(work_dir: str | Path, plan: PlanArrays | None = None, *, ids_on_disk: bool = False) -> Iterator[Pack]:
    """The plan's packs in training order (ids from the file, or resolved from the manifest's ok rows),
    built a block at a time; ``plan``: its arrays when the caller has them loaded already.

    ``ids_on_disk`` (write, past ``packing.partition_samples``): the manifest's ids are read from the id store
    ``work_dir/ok-ids`` (``_ok_samples.ok_id_store``, written first if missing or stale), not loaded into this
    process. The same packs either way."""
    meta = read_plan_meta(work_dir) or {}
    plan = plan if plan is not None else read_plan_arrays(work_dir)
    ids_of = _stored_ids(plan) if plan.id_bytes is not None else _manifest_ids(work_dir, meta, plan, ids_on_disk)
    offsets = plan.pack_offsets
    for first in range(0, plan.n_packs, _BLOCK):
        last = min(first + _BLOCK, plan.n_packs)
        lo, hi = int(offsets[first]), int(offsets[last])
        ids = ids_of(lo, hi)
        lens = plan.token_len[lo:hi].tolist()
        bounds = (offsets[first : last + 1] - lo).tolist()
        splits, groups, media = plan.split[first:last].tolist(), plan.group[first:last].tolist(), \
            plan.media_tokens[first:last].tolist()
        for k in range(last - first):
            a, b = bounds[k], bounds[k + 1]
            yield Pack(pack_id=first + k, split=SPLITS[splits[k]], media_type=plan.group_names[groups[k]],
                       sample_ids=tuple(ids[a:b]), sample_token_lens=tuple(lens[a:b]), media_tokens=media[k])


def _stored_ids(plan: PlanArrays):
    raw = plan.id_bytes.tobytes()
    off = plan.id_offsets.tolist()

    def ids_of(lo: int, hi: int) -> list[str]:
        return [raw[off[i] : off[i + 1]].decode() for i in range(lo, hi)]
    return ids_of


def _manifest_ids(work_dir, meta: dict, plan: PlanArrays, on_disk: bool):
    from .stages._ok_samples import load_ok_samples, manifest_fingerprint, ok_id_store  # the scan's rows

    recorded, now = meta.get("manifest_fingerprint"), manifest_fingerprint(work_dir)
    if recorded != now:
        raise StaleArtifactError(
            f"{plan_path(work_dir)} was planned from manifest {recorded}, the manifest is now {now}: "
            "rerun `vlmpack bucket` and `vlmpack plan`"
        )
    samples = ok_id_store(work_dir) if on_disk else load_ok_samples(work_dir, with_ids=True)
    index = plan.sample_index

    def ids_of(lo: int, hi: int) -> list[str]:
        return samples.ids_of(index[lo:hi])
    return ids_of


def export_jsonl(work_dir: str | Path, path: str | Path | None = None) -> Path:
    """Write the plan as readable JSONL (one pack per line); returns the path (default ``pack_plan.jsonl``)."""
    out = Path(path) if path is not None else jsonl_path(work_dir)
    with atomic_open(out, "w") as handle:
        for pack in read_plan(work_dir):
            handle.write(canonical_json(pack.to_json()) + "\n")
    return out


if __name__ == "__main__":  # python -m vlmpack_offline.plan_file WORK_DIR [OUT.jsonl]
    import sys

    print(export_jsonl(*sys.argv[1:3]))
