"""The ``ok`` rows of the manifest as compact columns: what bucket and plan both read.

One ordered query (plus one small scan for drop counts), ordered like
``Manifest.iter_samples`` (shard, seq), so index ``i``
(in the parts layout the same query on each part, read a few at a time: ``Manifest.select_samples``)
means the same sample in bucket, plan and stats. Ids are kept as one joined
string per fetched chunk plus int64 offsets (about 45 bytes a sample, not a
Python string per sample: 10M of those would cost ~1 GB).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from operator import itemgetter

import numpy as np
from tqdm import tqdm

from ..errors import StaleArtifactError
from ..manifest import Manifest, manifest_path
from ..packing._chunked import rows

__all__ = ["OkSamples", "UnfitRows", "load_ok_samples", "load_layout_unfit", "manifest_fingerprint", "source_counts",
           "MEDIA_TYPES"]

MEDIA_TYPES = ("text", "image", "video", "audio")  # code = position; other names get codes after these
_CHUNK = 200_000  # rows per fetch and per id string
_OTHER = 7  # media code of a type outside MEDIA_TYPES in the packed column (named in a second pass)


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


def load_ok_samples(work_dir, *, with_ids: bool = False) -> OkSamples:
    """Read the ok rows (plus the drop counts) with two scans and no per-row Python objects kept."""
    packed_out: list[np.ndarray] = []
    patches_out: list[np.ndarray] = []
    blocks_out: list[np.ndarray] = []
    frames_out: list[np.ndarray] = []
    windows_out: list[np.ndarray] = []
    id_chunks, id_lens = [], []
    with Manifest(manifest_path(work_dir)) as manifest:
        conn = manifest.conn
        drops = manifest.drop_counts()
        (found,) = conn.execute("SELECT SUM(n_samples + n_unread) FROM shards").fetchone()
        expected = found - sum(drops.values()) if found else None  # only for the progress bar
        # one integer per row (token_len << 34 | media_tokens << 3 | media code): a third of the Python objects
        case = " ".join(f"WHEN ? THEN {code}" for code in range(len(MEDIA_TYPES)))
        packed = f"(token_len << 34) | (media_tokens << 3) | (CASE media_type {case} ELSE {_OTHER} END)"
        # the cost model's columns only when some sample has media (a text-only manifest reads one int a row)
        if manifest.parted:  # the shards' sums say it without opening a part
            encoded = any(p or f for p, f in manifest.sums(("encoder_patches", "audio_frames")))
        else:
            (encoded,) = conn.execute("SELECT EXISTS(SELECT 1 FROM samples WHERE encoder_patches > 0 "
                                      "OR audio_frames > 0)").fetchone()
        columns = packed + (", encoder_patches, encoder_attention, audio_frames, audio_attention" if encoded else "") \
            + (", id" if with_ids else "")
        id_col = 5 if encoded else 1
        found_rows = manifest.select_samples(f"SELECT {columns} FROM samples WHERE status = 'ok' ORDER BY shard, seq",
                                             MEDIA_TYPES)
        with tqdm(total=expected, desc="load manifest", unit="sample", disable=(expected or 0) < _CHUNK) as bar:
            while rows := list(islice(found_rows, _CHUNK)):
                packed_out.append(np.fromiter(map(itemgetter(0), rows), dtype=np.int64, count=len(rows)))
                if encoded:
                    patches_out.append(np.fromiter(map(itemgetter(1), rows), dtype=np.int32, count=len(rows)))
                    blocks_out.append(np.fromiter(map(itemgetter(2), rows), dtype=np.int64, count=len(rows)))
                    frames_out.append(np.fromiter(map(itemgetter(3), rows), dtype=np.int32, count=len(rows)))
                    windows_out.append(np.fromiter(map(itemgetter(4), rows), dtype=np.int64, count=len(rows)))
                if with_ids:
                    ids = list(map(itemgetter(id_col), rows))
                    id_chunks.append("".join(ids))
                    id_lens.append(np.fromiter(map(len, ids), dtype=np.int64, count=len(ids)))
                bar.update(len(rows))
        both = np.concatenate(packed_out) if packed_out else np.zeros(0, np.int64)
        token_len = (both >> 34).astype(np.int32)
        media_tokens = ((both >> 3) & (2**31 - 1)).astype(np.int32)
        codes = (both & 7).astype(np.int8)
        del both
        codes[codes == _OTHER] = -1
        names = MEDIA_TYPES
        if (codes < 0).any():  # a media type other than text/image/video/audio: name it in a second pass (rare)
            names, codes = _name_other_media(manifest, codes)
        source_names, source_code = _sources(manifest, len(token_len))
    offsets = None
    if with_ids:
        offsets = np.zeros(len(token_len) + 1, dtype=np.int64)
        if id_lens:
            np.cumsum(np.concatenate(id_lens), out=offsets[1:])
    n = len(token_len)
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


def _sources(manifest: Manifest, n: int) -> tuple[tuple[str, ...], np.ndarray]:
    """The source of every ok sample (from its shard's row: one count per shard, no per-row Python object)."""
    source_of = {s.shard: s.source for s in manifest.shards()}
    names = tuple(sorted(set(source_of.values())))
    if len(names) <= 1:  # one source: no second pass over the samples
        return names, np.zeros(n, np.int16)
    rows = [(shard, source_of[shard], count) for shard, count in manifest.sums(by=("shard",), status="ok")
            if shard in source_of]
    code_of = {name: i for i, name in enumerate(names)}
    codes = np.repeat(np.array([code_of[r[1]] for r in rows], np.int16), [r[2] for r in rows])
    if codes.size != n:
        raise StaleArtifactError(f"the manifest's shards table misses the shards of {n - codes.size} ok samples: "
                                 "rescan (`vlmpack scan`)")
    return names, codes.astype(np.int16)


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
