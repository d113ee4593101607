"""The scan's artifact: ``work_dir/manifest.sqlite``, one row per input sample.

::

    meta    (key, value)                      schema_version, fingerprint, processor, ...
    shards  (shard, path, size, mtime_ns,     one row per finished shard; written in the
             n_samples, status, error,        same transaction as its samples; status "ok"
             n_unread, source)                or a shard-level reason (reasons.SHARD_REASONS),
                                              n_unread = samples it holds that have no row;
                                              source = its data.sources name (every sample's)
    samples (id, shard, seq, key,             id = "<shard>/<key>" (shard: "<source>/<relpath>" with
                                              data.sources, else the relpath), seq = position
             media_type, token_len,           in the shard; status "ok" or a drop reason
             media_tokens, n_images,          (bad_json, missing_media, corrupt_media,
             n_videos, members, status,       unsupported_aspect, overlong, ...) with its
             error, unused_media, sha256,     error text; members = JSON [[part, offset, size]];
             encoder_patches,                 unused_media = media parts nothing references (a
             encoder_attention,               warning: the sample is still packed); sha256 of the
             layout_unfit, n_audios,
             audio_frames, audio_attention)
                                              members' bytes when write.check_sources is sha256;
                                              encoder_* = the vision encoder's patches and sum of
                                              squared attention blocks (the plan's cost model);
                                              layout_unfit = JSON {sample_type: why} of the published
                                              layouts that cannot hold the sample ('' when all can):
                                              bucket drops it under that sample.sample_type;
                                              n_audios = audio items (beside n_images, n_videos);
                                              audio_* = the audio encoder's frames and sum of squared
                                              attention windows (the cost model's audio terms)

A shard's rows and its ``shards`` row commit together, so a killed scan resumes
at the first shard without a ``shards`` row. Readers order by ``(shard, seq)``:
that order does not depend on how many workers ran or in which order they finished.

Reproducibility: the *content* is deterministic, the sqlite *file* is not. Shards
commit in the order workers finish them and a resumed scan appends, so row ids and
page layout (hence the file's bytes) differ between runs that hold the same rows.
``manifest.jsonl``, written from the ordered rows at the end of every scan, is the
byte-reproducible artifact (tests compare it across worker counts, ``kill -9``
resumes and machine faults); every later stage reads rows in ``(shard, seq)`` order.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .kill_points import kill_point

__all__ = [
    "MANIFEST_SCHEMA_VERSION",
    "ShardRecord",
    "SampleRecord",
    "Manifest",
    "manifest_path",
]

MANIFEST_SCHEMA_VERSION = 6  # 6: n_audios

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS shards (
    shard TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    n_samples INTEGER NOT NULL,
    status TEXT NOT NULL,
    error TEXT NOT NULL DEFAULT '',
    n_unread INTEGER NOT NULL DEFAULT 0,
    source TEXT NOT NULL DEFAULT 'default'
);
CREATE TABLE IF NOT EXISTS samples (
    id TEXT PRIMARY KEY,
    shard TEXT NOT NULL,
    seq INTEGER NOT NULL,
    key TEXT NOT NULL,
    media_type TEXT NOT NULL,
    token_len INTEGER NOT NULL,
    media_tokens INTEGER NOT NULL,
    n_images INTEGER NOT NULL,
    n_videos INTEGER NOT NULL,
    members TEXT NOT NULL,
    status TEXT NOT NULL,
    error TEXT NOT NULL DEFAULT '',
    unused_media INTEGER NOT NULL DEFAULT 0,
    sha256 TEXT NOT NULL DEFAULT '',
    encoder_patches INTEGER NOT NULL DEFAULT 0,
    encoder_attention INTEGER NOT NULL DEFAULT 0,
    layout_unfit TEXT NOT NULL DEFAULT '',
    n_audios INTEGER NOT NULL DEFAULT 0,
    audio_frames INTEGER NOT NULL DEFAULT 0,
    audio_attention INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS samples_by_shard ON samples (shard, seq);
"""


def manifest_path(work_dir: str | Path) -> Path:
    return Path(work_dir) / "manifest.sqlite"


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardRecord:
    shard: str  # path relative to the input root, e.g. "part-000.tar"
    path: str  # absolute path at scan time
    size: int  # bytes at scan time (write refuses a shard whose size or mtime changed)
    mtime_ns: int  # modification time at scan time
    n_samples: int  # samples of the shard that have a row, ok or dropped
    status: str = "ok"  # "ok" or a shard-level reason (reasons.SHARD_REASONS)
    error: str = ""  # why the shard is not ok
    n_unread: int = 0  # samples the shard holds that could not be read at all (no row; compressed shard)
    source: str = "default"  # the data.sources entry it belongs to (every sample of the shard does)


@dataclass(frozen=True, slots=True, kw_only=True)
class SampleRecord:
    id: str  # "<shard relpath>/<key>"
    shard: str  # shard relpath
    seq: int  # position of the sample in its shard
    key: str  # webdataset key
    media_type: str  # "text" | "image" | "video" | "audio" (conversation.media_type_of)
    token_len: int  # len(input_ids) of the whole sample; 0 when it could not be counted
    media_tokens: int  # media tokens (image, video and audio pads) inside token_len
    n_images: int  # image items in the conversation
    n_videos: int  # video items in the conversation
    members: tuple[tuple[str, int, int], ...]  # (part, data offset in the tar, size) per member
    status: str = "ok"  # "ok" or a drop reason
    error: str = ""  # the error text of a drop
    unused_media: int = 0  # media parts in the sample that nothing references (kept out of the pack)
    sha256: str = ""  # of the members' bytes in tar order, when write.check_sources is sha256
    encoder_patches: int = 0  # patches the vision encoder runs for the sample's media (the plan's cost model)
    encoder_attention: int = 0  # sum over its full-attention blocks (frame, tile, image) of patches**2
    layout_unfit: str = ""  # JSON {sample_type: why} of the published layouts that cannot hold it; "" if all can
    n_audios: int = 0  # audio items in the conversation
    audio_frames: int = 0  # frames the audio encoder runs for its audio (the plan's cost model)
    audio_attention: int = 0  # sum over its attention windows of frames**2

    def member(self, part: str) -> tuple[int, int]:
        """(offset, size) of one part; KeyError if absent."""
        for name, offset, size in self.members:
            if name == part:
                return offset, size
        raise KeyError(f"{self.id} has no part {part!r}")


_SAMPLE_COLUMNS = (
    "id, shard, seq, key, media_type, token_len, media_tokens, n_images, n_videos, members, status, error, "
    "unused_media, sha256, encoder_patches, encoder_attention, layout_unfit, n_audios, "
    "audio_frames, audio_attention"
)


class Manifest:
    """Thin access layer over the sqlite file; one connection per process."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(self.path)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(_SCHEMA)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Manifest:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- meta ---------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def set_meta(self, values: dict[str, str]) -> None:
        with self.conn:
            self.conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", list(values.items()))

    # -- writing ------------------------------------------------------------
    def write_shard(self, shard: ShardRecord, samples: Iterable[SampleRecord]) -> None:
        """Store one finished shard and all its samples in one transaction."""
        rows = [
            (
                s.id, s.shard, s.seq, s.key, s.media_type, s.token_len, s.media_tokens,
                s.n_images, s.n_videos, json.dumps([list(m) for m in s.members]), s.status, s.error,
                s.unused_media, s.sha256, s.encoder_patches, s.encoder_attention, s.layout_unfit, s.n_audios,
                s.audio_frames, s.audio_attention,
            )
            for s in samples
        ]
        with self.conn:
            self.conn.execute("DELETE FROM samples WHERE shard = ?", (shard.shard,))
            self.conn.executemany(f"INSERT INTO samples ({_SAMPLE_COLUMNS}) VALUES ({','.join('?' * 20)})", rows)
            self.conn.execute(
                "INSERT OR REPLACE INTO shards VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (shard.shard, shard.path, shard.size, shard.mtime_ns, shard.n_samples, shard.status, shard.error,
                 shard.n_unread, shard.source),
            )
        kill_point("scan:shard")

    # -- reading ------------------------------------------------------------
    def done_shards(self) -> set[str]:
        return {row[0] for row in self.conn.execute("SELECT shard FROM shards")}

    def shards(self) -> list[ShardRecord]:
        rows = self.conn.execute("SELECT * FROM shards ORDER BY shard").fetchall()
        return [
            ShardRecord(shard=r[0], path=r[1], size=r[2], mtime_ns=r[3], n_samples=r[4], status=r[5], error=r[6],
                        n_unread=r[7], source=r[8])
            for r in rows
        ]

    def iter_samples(self, status: str | None = None) -> Iterator[SampleRecord]:
        """All samples (or those with ``status``), ordered by (shard, seq)."""
        where, args = ("WHERE status = ?", (status,)) if status else ("", ())
        cursor = self.conn.execute(f"SELECT {_SAMPLE_COLUMNS} FROM samples {where} ORDER BY shard, seq", args)
        for row in cursor:
            yield _sample_from_row(row)

    def get_samples(self, ids: Iterable[str]) -> dict[str, SampleRecord]:
        ids = list(ids)
        out: dict[str, SampleRecord] = {}
        for start in range(0, len(ids), 900):
            chunk = ids[start : start + 900]
            marks = ",".join("?" * len(chunk))
            for row in self.conn.execute(f"SELECT {_SAMPLE_COLUMNS} FROM samples WHERE id IN ({marks})", chunk):
                sample = _sample_from_row(row)
                out[sample.id] = sample
        return out

    def status_counts(self) -> dict[str, int]:
        return dict(self.conn.execute("SELECT status, COUNT(*) FROM samples GROUP BY status ORDER BY status"))

    def drop_counts(self) -> dict[str, int]:
        """Dropped samples by reason: rows with a drop status, plus the samples of shards that could not be read
        (``n_unread``, counted under the shard's reason since they have no row)."""
        drops = dict(self.conn.execute(
            "SELECT status, COUNT(*) FROM samples WHERE status != 'ok' GROUP BY status ORDER BY status"
        ).fetchall())
        for reason, unread in self.conn.execute(
            "SELECT status, SUM(n_unread) FROM shards WHERE n_unread > 0 GROUP BY status ORDER BY status"
        ):
            drops[reason] = drops.get(reason, 0) + unread
        return drops


def _sample_from_row(row: tuple) -> SampleRecord:
    return SampleRecord(
        id=row[0], shard=row[1], seq=row[2], key=row[3], media_type=row[4], token_len=row[5],
        media_tokens=row[6], n_images=row[7], n_videos=row[8],
        members=tuple((m[0], m[1], m[2]) for m in json.loads(row[9])), status=row[10], error=row[11],
        unused_media=row[12], sha256=row[13], encoder_patches=row[14], encoder_attention=row[15],
        layout_unfit=row[16], n_audios=row[17], audio_frames=row[18], audio_attention=row[19],
    )
