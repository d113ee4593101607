"""``vlmpack verify``: re-read the written output and check it against the manifest and the plan.

Checks, per output shard listed in ``.nv-meta/.info.json``:

* its ``.tar.idx`` equals the offsets energon's own prepare derives from the tar;
* the number of samples in the tar equals its ``shard_counts`` entry;
* each pack is a ``vlmpack.pack`` JSON, in the split ``split.yaml`` puts its shard in,
  with ``sum(token_len) <= capacity == sample.max_token_len`` (each token_len rounded up to
  the alignment's multiple, ``packing/alignment.py``);
* each media part's size and sha256 equal those of its source byte range;
* an ``ids.npy`` part, when present, is int [2, sum(token_len)];

and over all shards: every ``ok`` manifest sample appears exactly once, except those
bucket dropped as ``overlong`` (``bins/overlong.jsonl``), which appear in no pack; every planned
pack is present; ``.nv-meta/vlmpack.json`` records the settings of this config
(``packed_settings.check_against_packed_dir``). Problems are collected (not raised) so one run lists them all;
the first ones are printed and the exit code is 1.

A URL ``packed_wds_dir`` (``s3://``, ``gs://``, ``msc://``) gets the same checks on a local copy made one shard
at a time in ``work_dir/verify-staging/`` (``_BucketCopy``, through ``output/object_store.py``); the lines name the URL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import shutil
import time
from collections import Counter
from pathlib import Path

import numpy as np

from ..config import Config
from ..errors import ConfigError, PlanError
from ..layouts import layout_for
from ..manifest import Manifest, manifest_path
from ..output.energon_meta import (
    META_DIR,
    energon_idx_offsets,
    read_dataset_yaml,
    read_idx,
    read_shard_counts,
    read_split_parts,
    written_layout,
)
from ..output.object_store import VERIFY_DIR, ObjectStoreOutput, object_store_output
from ..output.pack_builder import SourceFiles, build_pack, layout_json_bytes
from ..output.tar_writer import idx_path_for
from ..packed_format import IDS_PART, JSON_PART, VLMPACK_JSON_PART, PackedSample
from ..packed_settings import (
    SETTINGS_NAME,
    WRITE_MARKER,
    check_against_packed_dir,
    written_alignment,
    written_mixture,
)
from ..plan_file import read_plan_arrays
from ..stage_result import StageResult
from ..tario import iter_samples, read_range
from .bucket import closed_gate, read_bucket_drops
from .write import check_sources

__all__ = ["run", "MAX_LISTED"]

MAX_LISTED = 20  # problems printed in the summary


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Checker:
    def __init__(self, config: Config, manifest: Manifest, files: SourceFiles) -> None:
        self.config = config
        self.manifest = manifest
        self.files = files
        self.problems: list[str] = []
        self.seen: Counter[str] = Counter()
        self.pack_ids: Counter[int] = Counter()
        self.media_parts = 0

    def shard(self, tar: Path, expected_count: int, split: str | None) -> None:
        if not tar.is_file():
            self.problems.append(f"{tar.name}: listed in .info.json but missing")
            return
        idx = idx_path_for(tar)
        if not idx.is_file():
            self.problems.append(f"{idx.name}: missing")
        elif read_idx(idx) != energon_idx_offsets(tar):
            self.problems.append(f"{idx.name}: offsets do not match the tar (rewrite the shard with `vlmpack write`)")
        n = 0
        with open(tar, "rb") as handle:
            for raw in iter_samples(tar):
                n += 1
                if raw.problem:
                    self.problems.append(f"{tar.name}: {raw.error}")
                    continue
                parts = {m.part: m for m in raw.members}
                self.pack(tar.name, raw.key, split, parts, handle)
        if n != expected_count:
            self.problems.append(f"{tar.name}: {n} packs in the tar, .info.json says {expected_count}")

    def ids_npy(self, where: str, total: int, data: bytes) -> None:
        try:
            shape = _ids_shape(data)
        except ValueError as exc:
            self.problems.append(f"{where}.{IDS_PART}: unreadable ({exc})")
            return
        if shape != (2, total):
            self.problems.append(f"{where}.{IDS_PART}: shape {shape}, expected (2, {total}) from the token_len values")

    def pack(self, shard: str, key: str, split: str | None, parts: dict, handle) -> None:
        where = f"{shard}/{key}"
        layout = layout_for(self.config.sample.sample_type)
        ours = VLMPACK_JSON_PART if layout.published else JSON_PART
        for needed in {JSON_PART, ours}:
            if needed not in parts:
                self.problems.append(f"{where}: no {needed} part (sample.sample_type {layout.name})")
                return
        member = parts[ours]
        try:
            pack_bytes = read_range(handle, member.offset, member.size)
            pack = PackedSample.from_json(json.loads(pack_bytes))
        except (ValueError, KeyError, TypeError) as exc:
            self.problems.append(f"{where}: pack JSON unreadable ({exc})")
            return
        if layout.published:  # the trainer's json is exactly the layout's view of vlmpack's pack
            stored = read_range(handle, parts[JSON_PART].offset, parts[JSON_PART].size)
            try:
                expected_json = layout_json_bytes(layout, pack_bytes)
            except ValueError as exc:  # e.g. a pack mixing media kinds: no layout JSON exists for it
                self.problems.append(f"{where}.{VLMPACK_JSON_PART}: no {layout.name} JSON derives from it ({exc})")
            else:
                if stored != expected_json:
                    self.problems.append(f"{where}.{JSON_PART}: not the {layout.name} JSON of its {VLMPACK_JSON_PART}")
        self.pack_ids[pack.pack_id] += 1
        total = sum(s.token_len for s in pack.samples)
        capacity, alignment = self.config.sample.max_token_len, self.config.alignment
        slots = int(alignment.aligned([s.token_len for s in pack.samples]).sum())
        if pack.capacity != capacity or slots > capacity:
            aligned = f" ({slots} once aligned to a multiple of {alignment.multiple})" if alignment.multiple > 1 else ""
            self.problems.append(f"{where}: {total} tokens{aligned}, capacity {pack.capacity}, "
                                 f"sample.max_token_len {capacity}")
        if split is not None and pack.split != split:
            self.problems.append(f"{where}: pack split {pack.split!r} but split.yaml lists the shard under {split!r}")
        if IDS_PART in parts:
            self.ids_npy(where, total, read_range(handle, parts[IDS_PART].offset, parts[IDS_PART].size))
        ids = tuple(s.id for s in pack.samples)
        self.seen.update(ids)
        records = self.manifest.get_samples(ids)
        try:
            built = build_pack(
                pack_id=pack.pack_id, split=pack.split, capacity=pack.capacity, sample_ids=ids, records=records,
                files=self.files, text_key_of=self.config.data.template_text_key_of,
                sample_type=layout.name,
            )
        except Exception as exc:  # noqa: BLE001 - every failure is a problem to list, not a crash
            self.problems.append(f"{where}: cannot rebuild from the manifest ({exc})")
            return
        expected = {m.part: m for m in built.media}
        stored = {name for name in parts if name not in (JSON_PART, VLMPACK_JSON_PART, IDS_PART)}
        if stored != set(expected):
            self.problems.append(f"{where}: media parts {sorted(stored)} but the sources give {sorted(expected)}")
        for name in sorted(stored & set(expected)):
            source, out = expected[name], parts[name]
            self.media_parts += 1
            if out.size != source.size:
                self.problems.append(f"{where}.{name}: {out.size} bytes, source {source.shard}:{source.source_part} has {source.size}")
            elif _sha(read_range(handle, out.offset, out.size)) != _sha(self.files.read(source.shard, source.offset, source.size)):
                self.problems.append(f"{where}.{name}: sha256 differs from source {source.shard}:{source.source_part}")


def _ids_shape(data: bytes) -> tuple[int, ...]:
    return tuple(np.load(io.BytesIO(data), allow_pickle=False).shape)


def _dataset_yaml_problem(out_dir: Path, sample_type: str) -> str | None:
    """``.nv-meta/dataset.yaml`` must be energon's own CrudeWebdataset with this config's layout."""
    path = out_dir / META_DIR / "dataset.yaml"
    body = read_dataset_yaml(out_dir)
    if body is None:
        return f"{path}: missing (run `vlmpack write`)"
    if (body.get("__module__"), body.get("__class__")) != ("megatron.energon", "CrudeWebdataset"):
        return (f"{path}: names {body.get('__module__')}.{body.get('__class__')}, not energon's own CrudeWebdataset "
                "(a folder from an older vlmpack): rerun `vlmpack write`")
    written = written_layout(body)
    if written != sample_type:
        return f"{path}: written as sample_type {written!r}, the config reads {sample_type!r}: use the config it was written with"
    return None


def _alignment_problem(config: Config, out_dir: Path) -> str | None:
    """One line when the output was written for another training layout than this config's (every pack
    would be checked against the wrong padded capacity)."""
    try:
        written = written_alignment(out_dir)
    except ConfigError:  # no vlmpack.json: check_against_packed_dir reports it
        return None
    if written.multiple == config.alignment.multiple:
        return None
    return (f"{out_dir} was written for {written.describe()}, but this config asks for "
            f"{config.alignment.describe()}: verify with the config it was written with, or rerun `vlmpack bucket`, "
            "`plan` and `write` with this one")


def _planned_uses(config: Config, n_ok: int) -> np.ndarray:
    """How many packs each ok sample (manifest order) is planned in: bucket's ``uses.npy``, else once each."""
    path = config.work_dir / "bins" / "uses.npy"
    uses = np.load(path, allow_pickle=False) if path.is_file() else np.ones(n_ok, np.int64)
    return uses if len(uses) == n_ok else np.ones(n_ok, np.int64)


def _mixture_problems(out_dir: Path, seen: Counter[str], packable: list[str]) -> list[str]:
    """Each source's packed sub-samples, and its samples by uses, against what vlmpack.json says the plan
    realised (``packable``: the ok samples bucket did not drop as overlong)."""
    mixture = written_mixture(out_dir)
    if not mixture:
        return []
    per_source: Counter[str] = Counter()
    for sample_id, n in seen.items():
        per_source[sample_id.split("/", 1)[0]] += n
    by_uses: dict[str, Counter[str]] = {}
    for sample_id in packable:
        by_uses.setdefault(sample_id.split("/", 1)[0], Counter())[str(seen[sample_id])] += 1
    problems = [f"source {row['name']!r}: {per_source[row['name']]} sub-samples packed, vlmpack.json says "
                f"{row['packed']}" for row in mixture["sources"] if per_source[row["name"]] != row["packed"]]
    problems += [f"source {row['name']!r}: samples by uses {dict(by_uses.get(row['name'], {}))} in the packs, "
                 f"vlmpack.json says {row['uses']}" for row in mixture["sources"]
                 if dict(by_uses.get(row["name"], {})) != {k: n for k, n in row["uses"].items() if n}]
    return problems


class _BucketCopy:
    """A URL ``packed_wds_dir`` read as a local folder: ``.nv-meta`` downloaded first, each shard (``.tar`` and
    ``.tar.idx``) just before it is checked and deleted after, so local disk holds one shard; an object the
    prefix's listing lacks is not downloaded and the checks report it missing, as for a local folder."""

    def __init__(self, store: ObjectStoreOutput, local: Path) -> None:
        self.store, self.local = store, local
        shutil.rmtree(local, ignore_errors=True)  # ours alone (work_dir/verify-staging/<sha>): a killed run's copy
        self.listing = store.listing()
        for name in _META_FILES:
            self._get(f"{META_DIR}/{name}")

    def _get(self, name: str) -> None:
        if name in self.listing:
            self.store.download(name, self.local / name)

    def fetch(self, shard: str) -> None:
        for name in (shard, shard + ".idx"):
            self._get(name)

    def drop(self, shard: str) -> None:
        for name in (shard, shard + ".idx"):
            (self.local / name).unlink(missing_ok=True)

    def close(self) -> None:
        shutil.rmtree(self.local, ignore_errors=True)
        with contextlib.suppress(OSError):  # someone else's file in there: leave it
            self.local.parent.rmdir()


_META_FILES = ("dataset.yaml", "split.yaml", ".info.json", SETTINGS_NAME, WRITE_MARKER)


def run(config: Config) -> StageResult:
    """Verify ``packed_wds_dir``; a URL one through a local copy made one shard at a time (``_BucketCopy``)."""
    if not manifest_path(config.work_dir).is_file():
        raise PlanError(f"no manifest in {config.work_dir}: run `vlmpack scan` first")
    store = object_store_output(config.data.packed_wds_dir, config.work_dir)
    if store is None:
        return _verify(config, config.packed_wds_dir)
    copy = _BucketCopy(store, config.work_dir / VERIFY_DIR / store.staging.name)
    try:
        result = _verify(config, copy.local, copy)
    finally:
        copy.close()
    local = str(copy.local)  # name the objects, not the local copy
    summary = [line.replace(local, store.url) for line in result.summary]
    return dataclasses.replace(result, summary=summary)


def _verify(config: Config, out_dir: Path, copy: _BucketCopy | None = None) -> StageResult:
    started = time.perf_counter()
    try:
        shard_counts = read_shard_counts(out_dir)
        split_parts = read_split_parts(out_dir)
    except FileNotFoundError as exc:
        problems = [f"{exc.filename}: missing (run `vlmpack write`)"]
        return StageResult(stage="verify", summary=problems, counts={"problems": 1}, exit_code=1)
    dataset_problem = _dataset_yaml_problem(out_dir, config.sample.sample_type) or _alignment_problem(config, out_dir)
    if dataset_problem:  # every pack would fail on the layout: one line says why
        return StageResult(stage="verify", summary=[dataset_problem], counts={"problems": 1}, exit_code=1)
    split_of = {name: split for split, names in split_parts.items() for name in names}
    with Manifest(manifest_path(config.work_dir)) as manifest:
        files = SourceFiles(check_sources(manifest))
        checker = _Checker(config, manifest, files)
        try:
            for name, count in shard_counts.items():
                if copy is not None:
                    copy.fetch(name)
                checker.shard(out_dir / name, count, split_of.get(name))
                if copy is not None:
                    copy.drop(name)
        finally:
            files.close()
        ok_ids = [s.id for s in manifest.iter_samples("ok")]
    problems = checker.problems
    try:
        check_against_packed_dir(config, out_dir)
    except ConfigError as exc:
        problems.append(f"{SETTINGS_NAME}: {exc}")
    overlong = read_bucket_drops(config)  # id -> overlong / layout_unfit
    ok_set = set(ok_ids) - set(overlong)
    uses = _planned_uses(config, len(ok_ids))
    for i, planned in zip(ok_ids, uses.tolist(), strict=True):
        got = checker.seen[i]
        if i in overlong:
            if got:
                problems.append(f"sample {i!r} is dropped as {overlong[i]} by bucket but packed")
        elif got == 0 and planned:
            problems.append(f"sample {i!r} is ok in the manifest but in no pack"
                            + (f" (planned {planned} times)" if planned != 1 else ""))
        elif got != planned:
            problems.append(f"sample {i!r} is in {got} packs, planned {planned}")
    problems += _mixture_problems(out_dir, checker.seen, [i for i in ok_ids if i not in overlong])
    problems += [f"sample {i!r} is packed but not ok in the manifest" for i in checker.seen
                 if i not in ok_set and i not in overlong]
    planned = range(read_plan_arrays(config.work_dir).n_packs)  # pack ids are 0..P-1; no ids needed
    if closed := closed_gate(config):
        problems.append(closed)  # the output may be sound, but it lost more than the gate lets through
    problems += [f"pack {p} is in the plan but in no shard" for p in planned if checker.pack_ids[p] == 0]
    problems += [f"pack {p} is written {n} times" for p, n in checker.pack_ids.items() if n > 1]
    counts = {
        "shards": len(shard_counts),
        "packs": sum(checker.pack_ids.values()),
        "samples": sum(checker.seen.values()),
        "media_parts": checker.media_parts,
        "problems": len(problems),
    }
    head = (
        f"{counts['shards']} shards, {counts['packs']} packs, {counts['samples']} samples, "
        f"{counts['media_parts']} media parts checked"
    )
    if problems:
        listed = problems[:MAX_LISTED]
        more = [f"... and {len(problems) - MAX_LISTED} more"] if len(problems) > MAX_LISTED else []
        summary = [head, f"{len(problems)} problems:", *("  " + p for p in listed), *more]
    else:
        summary = [head, "all checks passed"]
    return StageResult(stage="verify", summary=summary, counts=counts, seconds=time.perf_counter() - started,
                       exit_code=1 if problems else 0)
