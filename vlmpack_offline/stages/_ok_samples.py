"""The ``ok`` rows of the manifest as compact columns: what bucket and plan both read.

One query, ordered like ``Manifest.iter_samples`` (shard, seq), so index ``i``
means the same sample in bucket, plan and stats. Ids are kept as one joined
string per fetched chunk plus int64 offsets (about 45 bytes a sample, not a
Python string per sample: 10M of those would cost ~1 GB).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tqdm import tqdm

from ..errors import StaleArtifactError
from ..manifest import Manifest, manifest_path

__all__ = ["OkSamples", "load_ok_samples", "manifest_fingerprint", "MEDIA_TYPES"]

MEDIA_TYPES = ("text", "image", "video")  # code = position; other names get codes after these
_CHUNK = 200_000  # rows per fetch and per id string


@dataclass(frozen=True, slots=True, kw_only=True)
class OkSamples:
    token_len: np.ndarray  # int32 per ok sample, manifest order
    media_tokens: np.ndarray  # int32 per ok sample
    media_code: np.ndarray  # int8 index into ``media_names``
    media_names: tuple[str, ...]  # media type per code
    id_chunks: tuple[str, ...] = ()  # ids joined, ``chunk_rows`` samples per string (only when asked for)
    id_offsets: np.ndarray | None = None  # int64 [n + 1]: id i = chunk[i // rows][off[i] - base : off[i+1] - base]
    chunk_rows: int = _CHUNK
    drops: dict[str, int] = field(default_factory=dict)  # manifest status -> count, for every status but ok

    @property
    def n(self) -> int:
        return len(self.token_len)

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
    numbers, id_chunks, id_lens = [], [], []
    with Manifest(manifest_path(work_dir)) as manifest:
        conn = manifest.conn
        census = conn.execute("SELECT status, media_type, COUNT(*) FROM samples GROUP BY status, media_type").fetchall()
        present = sorted({media for status, media, _ in census if status == "ok"})
        names = list(MEDIA_TYPES) + [t for t in present if t not in MEDIA_TYPES]
        total = sum(count for status, _, count in census if status == "ok")
        drops: dict[str, int] = {}
        for status, _, count in census:
            if status != "ok":
                drops[status] = drops.get(status, 0) + count
        case = " ".join(f"WHEN ? THEN {code}" for code in range(len(names)))
        columns = f"token_len, media_tokens, CASE media_type {case} END" + (", id" if with_ids else "")
        cursor = conn.execute(f"SELECT {columns} FROM samples WHERE status = 'ok' ORDER BY shard, seq", names)
        with tqdm(total=total, desc="load manifest", unit="sample", disable=total < _CHUNK) as bar:
            while rows := cursor.fetchmany(_CHUNK):
                if with_ids:
                    cols = list(zip(*rows, strict=True))
                    numbers.append(np.array(cols[:3], dtype=np.int32).T)
                    id_chunks.append("".join(cols[3]))
                    id_lens.append(np.fromiter(map(len, cols[3]), dtype=np.int64, count=len(rows)))
                else:
                    numbers.append(np.array(rows, dtype=np.int32).reshape(-1, 3))
                bar.update(len(rows))
    table = np.concatenate(numbers) if numbers else np.zeros((0, 3), np.int32)
    offsets = None
    if with_ids:
        offsets = np.zeros(total + 1, dtype=np.int64)
        if id_lens:
            np.cumsum(np.concatenate(id_lens), out=offsets[1:])
    return OkSamples(
        token_len=np.ascontiguousarray(table[:, 0]), media_tokens=np.ascontiguousarray(table[:, 1]),
        media_code=table[:, 2].astype(np.int8), media_names=tuple(names),
        id_chunks=tuple(id_chunks), id_offsets=offsets, chunk_rows=_CHUNK, drops=dict(sorted(drops.items())),
    )
