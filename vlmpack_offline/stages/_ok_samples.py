"""The ``ok`` rows of the manifest as compact columns: what bucket and plan both read.

One ordered query (plus one small scan for drop counts), ordered like
``Manifest.iter_samples`` (shard, seq), so index ``i``
(in the parts layout the same query on each part, read a few at a time: ``Manifest.select_samples``)
means the same sample in bucket, plan and stats. Ids are kept as one joined
string per fetched chunk plus int64 offsets (about 45 bytes a sample, not a
Python string per sample: 10M of those would cost ~1 GB).

Past ``in_memory_up_to`` ok samples (bucket passes ``packing.partition_samples``, issue 37) each column is
written as it is read into a memory-mapped ``.npy`` in ``work_dir/bucket-scratch`` (pages released after each
chunk, ``packing._chunked.release``) and the samples hold those files opened read-only: the load's memory is
a chunk's, not 11-35 bytes a sample. The same values either way, so the same bins.

The write stage past the setting reads the ids alone from ``work_dir/ok-ids`` (``ok_id_store``): written once
per manifest fingerprint from one ``SELECT id`` pass (no other column), in a temporary folder renamed into
place, then memory-mapped; a pack's ids are sliced out of the page cache, not held by the process.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
from dataclasses import dataclass, field
from itertools import islice
from operator import itemgetter
from pathlib import Path

import numpy as np
from numpy.lib.format import open_memmap
from tqdm import tqdm

from ..errors import StaleArtifactError
from ..manifest import Manifest, manifest_path
from ..output.tar_writer import fsync_files
from ..packing._chunked import release, rows

__all__ = ["OkSamples", "UnfitRows", "load_ok_samples", "load_layout_unfit", "manifest_fingerprint", "source_counts",
           "MEDIA_TYPES", "SCRATCH_DIR", "remove_scratch", "IDS_DIR", "IdStore", "ok_id_store", "open_id_store",
           "remove_id_store"]

MEDIA_TYPES = ("text", "image", "video", "audio")  # code = position; other names get codes after these
_CHUNK = 200_000  # rows per fetch and per id string
_OTHER = 7  # media code of a type outside MEDIA_TYPES in the packed column (named in a second pass)
SCRATCH_DIR = "bucket-scratch"  # under work_dir: the mapped columns of a load past ``in_memory_up_to``
_ID_WINDOW = 1 << 18  # consecutive ok samples whose ids are read between two releases of the store's pages
IDS_DIR = "ok-ids"  # under work_dir: the ok samples' ids on disk (``ok_id_store``), kept while the manifest holds
# file name -> dtype of each mapped column (OkSamples field order)
_MAPPED = {"token_len": np.int32, "media_tokens": np.int32, "media_code": np.int8, "encoder_patches": np.int32,
           "encoder_attention": np.int64, "audio_frames": np.int32, "audio_attention": np.int64,
           "source_code": np.int16}


@dataclass(frozen=True, slots=True, kw_only=True)
class OkSamples:
    token_len: np.ndarray  # int32 per ok sample, manifest order
    media_tokens: np.ndarray  # int32 per ok sample
    media_code: np.ndarray  # int8 index into ``media_names``
    media_names: tuple[str, ...]  # media type per code
    encoder_patches: np.ndarray | None = None  # int32 per ok sample: vision-encoder patches (cost model)
    encoder_attention: np.ndarray | None = None  # int64 per ok sample: sum of squared attention blocks
    audio_frames: np.ndarray | None = None  # int32 per ok sample: audio-encoder frames (cost model)
    audio_attention: np.ndarray | None = None  # int64 per ok sample: sum of squared audio attention windows
    id_chunks: tuple[str, ...] = ()  # ids joined, ``chunk_rows`` samples per string (only when asked for)
    id_offsets: np.ndarray | None = None  # int64 [n + 1]: id i = chunk[i // rows][off[i] - base : off[i+1] - base]
    chunk_rows: int = _CHUNK
    drops: dict[str, int] = field(default_factory=dict)  # manifest status -> count, for every status but ok
    source_code: np.ndarray | None = None  # int16 per ok sample: index into ``source_names``
    source_names: tuple[str, ...] = ()  # the manifest's sources, sorted

    @property
    def n(self) -> int:
        return len(self.token_len)

    def rows(self, first: int, last: int) -> OkSamples:
        """The ok samples ``first:last`` (index ``i`` here is ``first + i`` in ``self``) with their columns in
        memory (``packing._chunked.rows``: a memory-mapped column is read, then its pages released): one
        partition of a billion samples at a time (``packing.partition_samples``). No ids, no drops."""
        def cut(column: np.ndarray | None) -> np.ndarray | None:
            return None if column is None else rows(column, first, last)
        return OkSamples(token_len=cut(self.token_len), media_tokens=cut(self.media_tokens),
                         media_code=cut(self.media_code), media_names=self.media_names,
                         encoder_patches=cut(self.encoder_patches), encoder_attention=cut(self.encoder_attention),
                         audio_frames=cut(self.audio_frames), audio_attention=cut(self.audio_attention),
                         source_code=cut(self.source_code), source_names=self.source_names)

    def ids_of(self, indexes: np.ndarray) -> list[str]:
        """Sample ids for an array of indexes (vectorized offset arithmetic, one slice per id)."""
        chunk = indexes // self.chunk_rows
        base = self.id_offsets[chunk * self.chunk_rows]
        starts = (self.id_offsets[indexes] - base).tolist()
        ends = (self.id_offsets[indexes + 1] - base).tolist()
        chunks = self.id_chunks
        return [chunks[c][s:e] for c, s, e in zip(chunk.tolist(), starts, ends, strict=True)]


def manifest_fingerprint(work_dir) -> str:
    path = manifest_path(work_dir)
    if not path.exists():
        raise StaleArtifactError(f"no manifest at {path}: run `vlmpack scan --config ...` first")
    with Manifest(path) as manifest:
        value = manifest.get_meta("fingerprint")
    if not value:
        raise StaleArtifactError(f"{path} has no fingerprint (scan unfinished?): rerun `vlmpack scan`")
    return value


def load_ok_samples(work_dir, *, with_ids: bool = False, in_memory_up_to: int | None = None) -> OkSamples:
    """Read the ok rows (plus the drop counts) with two scans and no per-row Python objects kept.

    ``in_memory_up_to``: with more ok samples than this (the manifest's count), the columns are memory-mapped
    files in ``work_dir/bucket-scratch`` (written afresh; the caller removes them: ``remove_scratch``); ids, when
    asked for, stay in memory either way. None: always in memory."""
    with Manifest(manifest_path(work_dir)) as manifest:
        drops = manifest.drop_counts()
        query, encoded = _ok_query(manifest, with_ids)
        # the exact count (a scan of the status column in the single layout) only where it decides something
        n_ok = None if in_memory_up_to is None else manifest.status_counts().get("ok", 0)
        (found,) = manifest.conn.execute("SELECT SUM(n_samples + n_unread) FROM shards").fetchone()
        expected = found - sum(drops.values()) if found else None  # only for the progress bar
        found_rows = manifest.select_samples(query, MEDIA_TYPES)
        with tqdm(total=expected, desc="load manifest", unit="sample", disable=(expected or 0) < _CHUNK) as bar:
            chunks = _chunks(found_rows, bar)
            if n_ok is not None and n_ok > in_memory_up_to:
                return _load_mapped(manifest, chunks, Path(work_dir) / SCRATCH_DIR, n_ok, encoded, with_ids, drops)
            return _load_in_memory(manifest, chunks, encoded, with_ids, drops)


def remove_scratch(work_dir) -> None:
    """Delete a mapped load's files (``in_memory_up_to``): once bins/ holds the columns, or a killed run's."""
    shutil.rmtree(Path(work_dir) / SCRATCH_DIR, ignore_errors=True)


def _ok_query(manifest: Manifest, with_ids: bool) -> tuple[str, bool]:
    """(the ordered select of the ok rows, whether it reads the cost model's columns).

    One integer per row (token_len << 34 | media_tokens << 3 | media code): a third of the Python objects; the
    cost model's columns only when some sample has media (a text-only manifest reads one int a row); the id
    last."""
    case = " ".join(f"WHEN ? THEN {code}" for code in range(len(MEDIA_TYPES)))
    packed = f"(token_len << 34) | (media_tokens << 3) | (CASE media_type {case} ELSE {_OTHER} END)"
    if manifest.parted:  # the shards' sums say it without opening a part
        encoded = any(p or f for p, f in manifest.sums(("encoder_patches", "audio_frames")))
    else:
        (encoded,) = manifest.conn.execute("SELECT EXISTS(SELECT 1 FROM samples WHERE encoder_patches > 0 "
                                           "OR audio_frames > 0)").fetchone()
    columns = packed + (", encoder_patches, encoder_attention, audio_frames, audio_attention" if encoded else "") \
        + (", id" if with_ids else "")
    return f"SELECT {columns} FROM samples WHERE status = 'ok' ORDER BY shard, seq", bool(encoded)


def _chunks(found_rows, bar):
    """The selected rows ``_CHUNK`` at a time, each as a list of tuples."""
    while found := list(islice(found_rows, _CHUNK)):
        yield found
        bar.update(len(found))


def _unpack(both: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(token_len int32, media_tokens int32, media code int8 with -1 for a type outside MEDIA_TYPES) of packed
    rows."""
    codes = (both & 7).astype(np.int8)
    codes[codes == _OTHER] = -1
    return (both >> 34).astype(np.int32), ((both >> 3) & (2**31 - 1)).astype(np.int32), codes


def _column(rows_: list[tuple], at: int, dtype) -> np.ndarray:
    return np.fromiter(map(itemgetter(at), rows_), dtype=dtype, count=len(rows_))


def _id_chunk(rows_: list[tuple], at: int, id_chunks: list[str], id_lens: list[np.ndarray]) -> None:
    ids = list(map(itemgetter(at), rows_))
    id_chunks.append("".join(ids))
    id_lens.append(np.fromiter(map(len, ids), dtype=np.int64, count=len(ids)))


def _offsets(id_lens: list[np.ndarray], n: int) -> np.ndarray:
    offsets = np.zeros(n + 1, dtype=np.int64)
    if id_lens:
        np.cumsum(np.concatenate(id_lens), out=offsets[1:])
    return offsets


def _load_in_memory(manifest: Manifest, chunks, encoded: bool, with_ids: bool, drops: dict) -> OkSamples:
    """Every column read into memory: chunks kept, then joined."""
    packed_out, patches_out, blocks_out, frames_out, windows_out = [], [], [], [], []
    id_chunks, id_lens = [], []
    id_col = 5 if encoded else 1
    for found in chunks:
        packed_out.append(_column(found, 0, np.int64))
        if encoded:
            patches_out.append(_column(found, 1, np.int32))
            blocks_out.append(_column(found, 2, np.int64))
            frames_out.append(_column(found, 3, np.int32))
            windows_out.append(_column(found, 4, np.int64))
        if with_ids:
            _id_chunk(found, id_col, id_chunks, id_lens)
    both = np.concatenate(packed_out) if packed_out else np.zeros(0, np.int64)
    token_len, media_tokens, codes = _unpack(both)
    del both
    names = MEDIA_TYPES
    if (codes < 0).any():  # a media type other than text/image/video/audio: name it in a second pass (rare)
        names, codes = _name_other_media(manifest, codes)
    n = len(token_len)
    source_names, source_code = _sources(manifest, n)
    offsets = _offsets(id_lens, n) if with_ids else None
    patches = np.concatenate(patches_out) if patches_out else np.zeros(n, np.int32)
    blocks = np.concatenate(blocks_out) if blocks_out else np.zeros(n, np.int64)
    frames = np.concatenate(frames_out) if frames_out else np.zeros(n, np.int32)
    windows = np.concatenate(windows_out) if windows_out else np.zeros(n, np.int64)
    return OkSamples(
        token_len=token_len, media_tokens=media_tokens, media_code=codes.astype(np.int8), media_names=names,
        encoder_patches=patches, encoder_attention=blocks, audio_frames=frames, audio_attention=windows,
        id_chunks=tuple(id_chunks), id_offsets=offsets, chunk_rows=_CHUNK, drops=drops,
        source_code=source_code, source_names=source_names,
    )


def _load_mapped(manifest: Manifest, chunks, scratch: Path, n: int, encoded: bool, with_ids: bool,
                 drops: dict) -> OkSamples:
    """Every column written a chunk at a time into its ``.npy`` in ``scratch`` (made afresh: a killed run's
    files are rewritten from the start, so a rerun reads the same bytes), mapped pages released after each
    chunk; returns them opened read-only. The columns without media (a text-only manifest) are left as the
    zeros a new file holds. ``n``: the manifest's ok count, which the rows read must match."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    out = {name: open_memmap(scratch / f"{name}.npy", "w+", dtype, (n,)) for name, dtype in _MAPPED.items()}
    id_chunks, id_lens = [], []
    id_col = 5 if encoded else 1
    at, other = 0, False
    for found in chunks:
        end = at + len(found)
        if end > n:
            break
        token_len, media_tokens, codes = _unpack(_column(found, 0, np.int64))
        out["token_len"][at:end], out["media_tokens"][at:end], out["media_code"][at:end] = token_len, media_tokens, codes
        other = other or bool((codes < 0).any())
        if encoded:
            for col, name in enumerate(("encoder_patches", "encoder_attention", "audio_frames", "audio_attention"), 1):
                out[name][at:end] = _column(found, col, _MAPPED[name])
        if with_ids:
            _id_chunk(found, id_col, id_chunks, id_lens)
        release(*out.values())
        at = end
    if at != n:
        raise _rows_differ(n)
    names = MEDIA_TYPES
    if other:  # a media type other than text/image/video/audio (rare): named in memory, as below the setting
        names, codes = _name_other_media(manifest, np.asarray(out["media_code"]))
        out["media_code"][:] = codes
    source_names, _ = _sources(manifest, n, out=out["source_code"])
    for column in out.values():
        column.flush()
        release(column)
    del out
    read = {name: np.load(scratch / f"{name}.npy", mmap_mode="r") for name in _MAPPED}
    return OkSamples(
        **read, media_names=names, id_chunks=tuple(id_chunks), id_offsets=_offsets(id_lens, n) if with_ids else None,
        chunk_rows=_CHUNK, drops=drops, source_names=source_names,
    )


@dataclass(frozen=True, slots=True)
class IdStore:
    """The ok samples' ids (manifest order) in ``work_dir/ok-ids``: ``ids.bytes`` (utf-8, concatenated) and
    ``ids.offsets.npy`` (int64 [n + 1], byte offsets), both mapped read-only. ``ids_of`` reads what it is
    asked for and drops the touched pages from this process (``release``): they stay in the page cache, so a
    billion samples' ids cost the process a window's pages (``_ID_WINDOW``), not 45 bytes a sample."""

    raw: mmap.mmap | bytes  # bytes only for an empty file (which cannot be mapped)
    offsets: np.ndarray  # int64 [n + 1], memory-mapped

    @property
    def n(self) -> int:
        return len(self.offsets) - 1

    def ids_of(self, indexes: np.ndarray) -> list[str]:
        """Sample ids for an array of indexes (the same strings ``OkSamples.ids_of`` gives).

        A plan asks in pack order, all over the files, and the kernel maps a page-cache folio whole (2 MiB
        here) on a fault: read as asked, a block's ids would map most of both files. So they are read in
        index order, ``_ID_WINDOW`` consecutive samples' worth at a time, each window's pages released before
        the next: at most a window of each file is mapped, whatever the data set's size."""
        order = np.argsort(indexes, kind="stable")
        ordered = indexes[order]
        cuts = [0, *(np.flatnonzero(np.diff(ordered // _ID_WINDOW)) + 1).tolist(), len(ordered)]
        raw, out, places = self.raw, [""] * len(ordered), order.tolist()
        for a, b in zip(cuts[:-1], cuts[1:], strict=False):
            some = ordered[a:b]
            starts, ends = self.offsets[some].tolist(), self.offsets[some + 1].tolist()
            for place, s, e in zip(places[a:b], starts, ends, strict=True):
                out[place] = raw[s:e].decode()
            release(self.offsets)
            if isinstance(raw, mmap.mmap):
                raw.madvise(mmap.MADV_DONTNEED)
        return out


def ok_id_store(work_dir) -> IdStore:
    """The id store of the manifest as it is now: the one in ``work_dir/ok-ids`` when it was written for this
    manifest fingerprint, else written afresh first (``_write_id_store``)."""
    fingerprint = manifest_fingerprint(work_dir)
    store = open_id_store(work_dir, fingerprint)
    if store is None:
        _write_id_store(work_dir, fingerprint)
        store = open_id_store(work_dir, fingerprint)
    if store is None:  # written just now and not readable: the disk or another process is at fault
        raise StaleArtifactError(f"{Path(work_dir) / IDS_DIR} could not be read back after it was written: "
                                 "is another `vlmpack write` running on this work_dir? Run one at a time")
    return store


def open_id_store(work_dir, fingerprint: str) -> IdStore | None:
    """``work_dir/ok-ids`` mapped, or None when it is missing, written for another manifest (its ``meta.json``
    names the fingerprint) or not whole (sizes other than its ``meta.json`` records)."""
    folder = Path(work_dir) / IDS_DIR
    try:
        meta = json.loads((folder / "meta.json").read_text())
        offsets = np.load(folder / "ids.offsets.npy", mmap_mode="r")
        size = (folder / "ids.bytes").stat().st_size
    except (OSError, ValueError):
        return None
    n, n_bytes = meta.get("n"), meta.get("bytes")
    if not isinstance(n, int) or meta.get("manifest_fingerprint") != fingerprint or offsets.shape != (n + 1,) \
            or offsets.dtype != np.int64 or size != n_bytes or int(offsets[-1]) != n_bytes:
        return None
    if not size:
        return IdStore(b"", offsets)
    with open(folder / "ids.bytes", "rb") as handle:
        return IdStore(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ), offsets)


def _write_id_store(work_dir, fingerprint: str) -> None:
    """One ``SELECT id`` pass over the ok rows (manifest order) into ``ok-ids.tmp``: the bytes appended to a
    file, the offsets into a mapped ``.npy`` (pages released after each chunk), both fsynced, then
    ``meta.json``, then the folder renamed to ``ok-ids``. A killed run leaves only ``ok-ids.tmp``, which the
    next run deletes and writes from the start: never read, and the same bytes once written."""
    work_dir = Path(work_dir)
    folder, tmp = work_dir / IDS_DIR, work_dir / f"{IDS_DIR}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with Manifest(manifest_path(work_dir)) as manifest:
        n = manifest.status_counts().get("ok", 0)
        offsets = open_memmap(tmp / "ids.offsets.npy", "w+", np.int64, (n + 1,))
        at, end_byte, more = 0, 0, False
        found_rows = manifest.select_samples("SELECT id FROM samples WHERE status = 'ok' ORDER BY shard, seq")
        with open(tmp / "ids.bytes", "wb") as out:
            while found := list(islice(found_rows, _CHUNK)):
                if more := at + len(found) > n:
                    break
                ids = [i for (i,) in found]
                joined = "".join(ids)
                lens = map(len, ids) if joined.isascii() else (len(i.encode()) for i in ids)
                sizes = np.fromiter(lens, np.int64, count=len(ids))
                offsets[at + 1 : at + 1 + len(ids)] = end_byte + np.cumsum(sizes)
                out.write(joined.encode())
                end_byte += int(sizes.sum())
                at += len(ids)
                release(offsets)
            out.flush()
            os.fsync(out.fileno())
    if more or at != n:
        raise _rows_differ(n)
    offsets.flush()
    del offsets
    fsync_files([tmp / "ids.offsets.npy"])  # and the folder
    with open(tmp / "meta.json", "w") as handle:
        handle.write(json.dumps({"manifest_fingerprint": fingerprint, "n": n, "bytes": end_byte}, sort_keys=True))
        handle.flush()
        os.fsync(handle.fileno())
    shutil.rmtree(folder, ignore_errors=True)  # a stale store (another manifest's)
    os.rename(tmp, folder)
    fsync_files([folder])  # and work_dir, which holds the rename


def _rows_differ(n: int) -> StaleArtifactError:
    """The ok rows read are not the manifest's count of them (a load and the id store check it alike)."""
    return StaleArtifactError(f"the manifest counts {n} ok samples but its ok rows differ (changed while read?): "
                              "rerun `vlmpack scan --rescan`, then this stage")


def remove_id_store(work_dir) -> None:
    """Delete ``ok-ids`` and a killed write's ``ok-ids.tmp`` (a write at or below the setting needs neither)."""
    for name in (IDS_DIR, f"{IDS_DIR}.tmp"):
        shutil.rmtree(Path(work_dir) / name, ignore_errors=True)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnfitRows:
    """The ok samples one published layout cannot hold (``layout_unfit`` in the manifest), manifest order."""

    index: np.ndarray  # int32: their positions among the ok samples (``OkSamples`` order)
    ids: tuple[str, ...]  # their sample ids
    token_len: tuple[int, ...]  # their token_len
    why: tuple[str, ...]  # the layout's reason for each


def load_layout_unfit(work_dir, sample_type: str) -> UnfitRows:
    """The ok samples ``sample_type`` cannot hold. One ordered pass that keeps only those rows (usually few):
    a layout that holds every sample, vlmpack's own included, costs one scan of the column and no row."""
    with Manifest(manifest_path(work_dir)) as manifest:
        # a part's positions count from the ok samples of the shards before it (none before the single file)
        before = dict(_ok_before(manifest)) if manifest.parted else {}
        rows = [
            (i + before.get(shard, 0), *rest)
            for shard, found in manifest.select_by_shard(
                "SELECT i, id, token_len, why FROM ("
                "  SELECT ROW_NUMBER() OVER (ORDER BY shard, seq) - 1 AS i, id, token_len, layout_unfit,"
                "         CASE layout_unfit WHEN '' THEN NULL ELSE json_extract(layout_unfit, ?) END AS why"
                "  FROM samples WHERE status = 'ok') WHERE why IS NOT NULL ORDER BY i",
                (f'$."{sample_type}"',),
            )
            for i, *rest in found
        ]
    return UnfitRows(index=np.array([r[0] for r in rows], np.int32), ids=tuple(r[1] for r in rows),
                     token_len=tuple(r[2] for r in rows), why=tuple(r[3] for r in rows))


def _ok_before(manifest: Manifest) -> list[tuple[str, int]]:
    """(shard, ok samples of the shards before it) in shard order."""
    out, total = [], 0
    for shard, n in manifest.sums(by=("shard",), status="ok"):
        out.append((shard, total))
        total += n
    return out


def _sources(manifest: Manifest, n: int, out: np.ndarray | None = None) -> tuple[tuple[str, ...], np.ndarray]:
    """The source of every ok sample (from its shard's row: one count per shard, no per-row Python object).
    ``out``: an int16 [n] array of zeros (a new mapped file) to fill a shard's run at a time, returned."""
    source_of = {s.shard: s.source for s in manifest.shards()}
    names = tuple(sorted(set(source_of.values())))
    if len(names) <= 1:  # one source: no second pass over the samples
        return names, np.zeros(n, np.int16) if out is None else out
    rows = [(shard, source_of[shard], count) for shard, count in manifest.sums(by=("shard",), status="ok")
            if shard in source_of]
    code_of = {name: i for i, name in enumerate(names)}
    found = sum(r[2] for r in rows)
    if found != n:
        raise StaleArtifactError(f"the manifest's shards table misses the shards of {n - found} ok samples: "
                                 "rescan (`vlmpack scan`)")
    if out is None:
        return names, np.repeat(np.array([code_of[r[1]] for r in rows], np.int16), [r[2] for r in rows])
    at = 0
    for _, source, count in rows:
        out[at:at + count] = code_of[source]
        at += count
        if at % (1 << 24) < count:  # about every 16 Mi samples: drop the written pages from this process
            release(out)
    release(out)
    return names, out


def source_counts(work_dir) -> dict[str, dict[str, int]]:
    """Per source: ``scanned`` samples (ok + dropped + unreadable) and each drop reason's count."""
    out: dict[str, dict[str, int]] = {}
    with Manifest(manifest_path(work_dir)) as manifest:
        source_of = {s.shard: s.source for s in manifest.shards()}
        by_source: dict[tuple[str, str], int] = {}
        for shard, status, n in manifest.sums(by=("shard", "status")):
            if shard in source_of:  # (a row always has its shard's row: they commit together)
                key = (source_of[shard], status)
                by_source[key] = by_source.get(key, 0) + n
        for (source, status), n in sorted(by_source.items()):
            row = out.setdefault(source, {"scanned": 0})
            row["scanned"] += n
            if status != "ok":
                row[status] = row.get(status, 0) + n
        for source, status, unread in manifest.conn.execute(
            "SELECT source, status, SUM(n_unread) FROM shards WHERE n_unread > 0 GROUP BY source, status"
        ):
            row = out.setdefault(source, {"scanned": 0})
            row["scanned"] += unread
            row[status] = row.get(status, 0) + unread
    return out


def _name_other_media(manifest: Manifest, codes: np.ndarray) -> tuple[tuple[str, ...], np.ndarray]:
    rows = manifest.select_samples("SELECT media_type FROM samples WHERE status = 'ok' ORDER BY shard, seq")
    types = [t for (t,) in rows]
    names = MEDIA_TYPES + tuple(sorted(set(types) - set(MEDIA_TYPES)))
    code_of = {name: i for i, name in enumerate(names)}
    return names, np.fromiter((code_of[t] for t in types), dtype=np.int16, count=len(types))
