"""The ``ok`` rows of the manifest as compact columns: what bucket and plan both read.

One query, ordered like ``Manifest.iter_samples`` (shard, seq), so index ``i``
means the same sample in bucket, plan and stats. Ids are kept as one UTF-8
byte buffer plus offsets (about 40 bytes a sample), not 10M Python strings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from ..errors import StaleArtifactError
from ..manifest import Manifest, manifest_path

__all__ = ["OkSamples", "load_ok_samples", "manifest_fingerprint", "MEDIA_TYPES"]

MEDIA_TYPES = ("text", "image", "video")  # code = position; other names get codes after these


@dataclass(frozen=True, slots=True, kw_only=True)
class OkSamples:
    token_len: np.ndarray  # int32 per ok sample, manifest order
    media_tokens: np.ndarray  # int32 per ok sample
    media_code: np.ndarray  # int8 index into ``media_names``
    media_names: tuple[str, ...]  # media type per code
    id_bytes: bytes | None = None  # all ids, UTF-8, concatenated (only when asked for)
    id_offsets: np.ndarray | None = None  # int64, n + 1 boundaries into ``id_bytes``

    @property
    def n(self) -> int:
        return len(self.token_len)

    def sample_id(self, i: int) -> str:
        return self.id_bytes[self.id_offsets[i] : self.id_offsets[i + 1]].decode()


def manifest_fingerprint(work_dir) -> str:
    path = manifest_path(work_dir)
    if not path.exists():
        raise StaleArtifactError(f"no manifest at {path}: run `vlmpack scan --config ...` first")
    with Manifest(path) as manifest:
        value = manifest.get_meta("fingerprint")
    if not value:
        raise StaleArtifactError(f"{path} has no fingerprint (scan unfinished?): rerun `vlmpack scan`")
    return value


def load_ok_samples(work_dir, *, with_ids: bool = False, chunk: int = 200_000) -> OkSamples:
    columns = "token_len, media_tokens, media_type" + (", id" if with_ids else "")
    names = list(MEDIA_TYPES)
    lens, media, codes, id_parts, id_lens = [], [], [], [], []
    with Manifest(manifest_path(work_dir)) as manifest:
        (total,) = manifest.conn.execute("SELECT COUNT(*) FROM samples WHERE status = 'ok'").fetchone()
        cursor = manifest.conn.execute(f"SELECT {columns} FROM samples WHERE status = 'ok' ORDER BY shard, seq")
        with tqdm(total=total, desc="load manifest", unit="sample", disable=total < chunk) as bar:
            while rows := cursor.fetchmany(chunk):
                cols = list(zip(*rows, strict=True))
                lens.append(np.array(cols[0], dtype=np.int32))
                media.append(np.array(cols[1], dtype=np.int32))
                for name in set(cols[2]) - set(names):
                    names.append(name)
                code_of = {name: i for i, name in enumerate(names)}
                codes.append(np.array([code_of[t] for t in cols[2]], dtype=np.int8))
                if with_ids:
                    encoded = [s.encode() for s in cols[3]]
                    id_parts.append(b"".join(encoded))
                    id_lens.append(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)))
                bar.update(len(rows))
    cat = lambda parts, dtype: np.concatenate(parts) if parts else np.zeros(0, dtype)  # noqa: E731
    offsets = None
    if with_ids:
        offsets = np.zeros(sum(map(len, id_lens)) + 1, dtype=np.int64)
        np.cumsum(cat(id_lens, np.int64), out=offsets[1:])
    return OkSamples(
        token_len=cat(lens, np.int32), media_tokens=cat(media, np.int32), media_code=cat(codes, np.int8),
        media_names=tuple(names), id_bytes=b"".join(id_parts) if with_ids else None, id_offsets=offsets,
    )
