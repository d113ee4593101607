"""The scan's artifact: ``work_dir/manifest.sqlite``, one row per input sample.

::

    meta    (key, value)                      schema_version, fingerprint, processor, ...
    shard_sums (shard, status, n, sums...)    parts layout only: per shard and status, n samples and
                                              the sums of manifest_parts.SUM_COLUMNS
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
at the first shard without a ``shards`` row.

``data.manifest_layout: parts`` (``manifest_parts.py``): the ``samples`` rows live in one sqlite file per
shard, ``work_dir/manifest.parts/<shard>.sqlite``, written by the scan task itself; ``manifest.sqlite`` holds
meta, ``shards`` and ``shard_sums`` (per shard and status: the sample count and the column sums the stages
total). Meta ``manifest_layout`` says which layout a manifest has; every reader below serves both the same
rows in the same order, so no stage outside this module and the scan knows which it reads.

Readers order by ``(shard, seq)``: that order does not depend on how many workers ran or in which order
they finished.

Reproducibility: the *content* is deterministic, the sqlite *file* is not. Shards
commit in the order workers finish them and a resumed scan appends, so row ids and
page layout (hence the file's bytes) differ between runs that hold the same rows.
``manifest.jsonl``, written from the ordered rows at the end of a scan (``data.manifest_jsonl``), is the
byte-reproducible artifact (tests compare it across worker counts, ``kill -9``
resumes and machine faults); so is each part of the parts layout (one fresh file per shard, its rows in
``seq`` order); every later stage reads rows in ``(shard, seq)`` order.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .kill_points import kill_point
from .manifest_parts import SUM_COLUMNS, StatusSums, part_path, read_parts, read_queries, write_part

__all__ = [
    "MANIFEST_SCHEMA_VERSION",
    "ShardRecord",
    "SampleRecord",
    "Manifest",
    "StatusSums",
    "manifest_path",
    "write_shard_part",
]

MANIFEST_SCHEMA_VERSION = 6  # 6: n_audios

_SAMPLES_SCHEMA = """
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
);""" + _SAMPLES_SCHEMA + """
CREATE TABLE IF NOT EXISTS shard_sums (
    shard TEXT NOT NULL,
    status TEXT NOT NULL,
    n INTEGER NOT NULL,
""" + "".join(f"    {column} INTEGER NOT NULL,\n" for column in SUM_COLUMNS) + """    PRIMARY KEY (shard, status)
);
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


_INSERT = f"INSERT INTO samples ({_SAMPLE_COLUMNS}) VALUES ({','.join('?' * 20)})"
LAYOUTS = ("single", "parts")  # data.manifest_layout; meta "manifest_layout" (absent: single)


def _row_of(s: SampleRecord) -> tuple:
    return (
        s.id, s.shard, s.seq, s.key, s.media_type, s.token_len, s.media_tokens,
        s.n_images, s.n_videos, json.dumps([list(m) for m in s.members]), s.status, s.error,
        s.unused_media, s.sha256, s.encoder_patches, s.encoder_attention, s.layout_unfit, s.n_audios,
        s.audio_frames, s.audio_attention,
    )


def write_shard_part(work_dir: str | Path, shard: str, samples: Iterable[SampleRecord]) -> None:
    """The parts layout's task side: the shard's rows into ``work_dir/manifest.parts/<shard>.sqlite``, in
    ``seq`` order, renamed into place when complete (``manifest_parts.write_part``)."""
    write_part(part_path(work_dir, shard), _SAMPLES_SCHEMA, _INSERT, [_row_of(s) for s in samples])
    kill_point("scan:part")


class Manifest:
    """Thin access layer over the sqlite file (and, in the parts layout, the shard parts); one connection per
    process."""

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

    @property
    def parted(self) -> bool:
        """True in the parts layout: the rows are in ``manifest.parts/``, not in this file."""
        return self.get_meta("manifest_layout") == "parts"

    # -- writing ------------------------------------------------------------
    def write_shard(self, shard: ShardRecord, samples: Iterable[SampleRecord]) -> None:
        """Store one finished shard and all its samples in one transaction (the single layout)."""
        rows = [_row_of(s) for s in samples]
        with self.conn:
            self.conn.execute("DELETE FROM samples WHERE shard = ?", (shard.shard,))
            self.conn.executemany(_INSERT, rows)
            self._insert_shard(shard)
        kill_point("scan:shard")

    def commit_part(self, shard: ShardRecord, sums: Iterable[StatusSums]) -> None:
        """The parts layout: the shard's row and sums, in one transaction, once its task has renamed its part into
        place (``write_shard_part``). The commit is what makes the part count: resume redoes a shard without it."""
        width = 3 + len(SUM_COLUMNS)
        rows = [(s.shard, s.status, s.n, *s.sums) for s in sums]
        with self.conn:
            self.conn.execute("DELETE FROM shard_sums WHERE shard = ?", (shard.shard,))
            self.conn.executemany(f"INSERT INTO shard_sums VALUES ({','.join('?' * width)})", rows)
            self._insert_shard(shard)
        kill_point("scan:shard")

    def _insert_shard(self, shard: ShardRecord) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO shards VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (shard.shard, shard.path, shard.size, shard.mtime_ns, shard.n_samples, shard.status, shard.error,
             shard.n_unread, shard.source),
        )

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

    def select_samples(self, query: str, args: Iterable = ()) -> Iterator[tuple]:
        """The rows of ``query`` (SQL over the ``samples`` table), run on this file or on each part in shard
        order. A query that orders by ``shard, seq`` gets the same rows in the same order in both layouts."""
        for _, rows in self.select_by_shard(query, args):
            yield from rows

    def select_by_shard(self, query: str, args: Iterable = ()) -> Iterator[tuple[str | None, list[tuple]]]:
        """``(shard, rows)`` per part in shard order; the single layout: one ``(None, all rows)``."""
        args = tuple(args)
        if not self.parted:
            yield None, self.conn.execute(query, args)
            return
        shards = [row[0] for row in self.conn.execute("SELECT shard FROM shards ORDER BY shard")]
        committed = self._committed()
        parts = read_parts([part_path(self.path.parent, s) for s in shards], query, args,
                           [committed.get(s, {}) for s in shards])
        yield from zip(shards, parts, strict=True)

    def _committed(self) -> dict[str, dict[str, int]]:
        """Parts layout: each committed shard's samples per status (``shard_sums``), which its part must hold."""
        out: dict[str, dict[str, int]] = {}
        for shard, status, n in self.conn.execute("SELECT shard, status, n FROM shard_sums"):
            out.setdefault(shard, {})[status] = n
        return out

    def iter_samples(self, status: str | None = None) -> Iterator[SampleRecord]:
        """All samples (or those with ``status``), ordered by (shard, seq)."""
        where, args = ("WHERE status = ?", (status,)) if status else ("", ())
        for row in self.select_samples(f"SELECT {_SAMPLE_COLUMNS} FROM samples {where} ORDER BY shard, seq", args):
            yield _sample_from_row(row)

    def get_samples(self, ids: Iterable[str]) -> dict[str, SampleRecord]:
        ids = list(ids)
        out: dict[str, SampleRecord] = {}
        if self.parted:  # each id is "<shard>/<key>": asked of its shard's part (of each, if a key holds "/")
            names = self.done_shards()
            by_shard: dict[str, list[str]] = {}
            for sample_id in ids:
                cuts = [i for i, ch in enumerate(sample_id) if ch == "/"]
                for shard in {sample_id[:i] for i in cuts} & names:
                    by_shard.setdefault(shard, []).append(sample_id)
            committed = self._committed()
            jobs = [(part_path(self.path.parent, shard), _by_ids(chunk), tuple(chunk), committed.get(shard, {}))
                    for shard in sorted(by_shard) for chunk in _chunks(by_shard[shard])]
            found: Iterable = (row for rows in read_queries(jobs) for row in rows)  # parts read a few at once
        else:
            found = (row for chunk in _chunks(ids) for row in self.conn.execute(_by_ids(chunk), chunk))
        for row in found:
            sample = _sample_from_row(row)
            out[sample.id] = sample
        return out

    def sums(self, columns: Iterable[str] = ("n",), *, status: str | None = None,
             by: tuple[str, ...] = ()) -> list[tuple]:
        """``SUM`` of each column over the samples (those with ``status``), grouped by ``by`` (``shard``,
        ``status``) and ordered by it, each row the ``by`` values then the sums; ``n`` is the sample count.
        Single layout: over the rows; parts: over ``shard_sums``, no part opened."""
        columns = tuple(columns)
        if set(columns) - {"n", *SUM_COLUMNS} or set(by) - {"shard", "status"}:
            raise ValueError(f"Manifest.sums totals n and {SUM_COLUMNS} by shard / status, not {columns} by {by}")
        table, count = ("shard_sums", "SUM(n)") if self.parted else ("samples", "COUNT(*)")
        picked = ", ".join(f"COALESCE({count if c == 'n' else f'SUM({c})'}, 0)" for c in columns)
        where, args = ("WHERE status = ?", (status,)) if status else ("", ())
        group = f"GROUP BY {', '.join(by)} ORDER BY {', '.join(by)}" if by else ""
        keys = "".join(f"{key}, " for key in by)
        return self.conn.execute(f"SELECT {keys}{picked} FROM {table} {where} {group}", args).fetchall()

    def status_counts(self) -> dict[str, int]:
        return dict(self.sums(by=("status",)))

    def drop_counts(self) -> dict[str, int]:
        """Dropped samples by reason: rows with a drop status, plus the samples of shards that could not be read
        (``n_unread``, counted under the shard's reason since they have no row)."""
        drops = {status: n for status, n in self.sums(by=("status",)) if status != "ok"}
        for reason, unread in self.conn.execute(
            "SELECT status, SUM(n_unread) FROM shards WHERE n_unread > 0 GROUP BY status ORDER BY status"
        ):
            drops[reason] = drops.get(reason, 0) + unread
        return drops


def _by_ids(chunk: list[str]) -> str:
    return f"SELECT {_SAMPLE_COLUMNS} FROM samples WHERE id IN ({','.join('?' * len(chunk))})"


def _chunks(ids: list[str], size: int = 900) -> Iterator[list[str]]:
    """At most ``size`` ids per query (sqlite's bound-parameter limit)."""
    for start in range(0, len(ids), size):
        yield ids[start : start + size]


def _sample_from_row(row: tuple) -> SampleRecord:
    return SampleRecord(
        id=row[0], shard=row[1], seq=row[2], key=row[3], media_type=row[4], token_len=row[5],
        media_tokens=row[6], n_images=row[7], n_videos=row[8],
        members=tuple((m[0], m[1], m[2]) for m in json.loads(row[9])), status=row[10], error=row[11],
        unused_media=row[12], sha256=row[13], encoder_patches=row[14], encoder_attention=row[15],
        layout_unfit=row[16], n_audios=row[17], audio_frames=row[18], audio_attention=row[19],
    )
