"""``data.manifest_layout: parts``: each scan task writes its shard's rows to a sqlite file of its own.

::

    work_dir/
      manifest.sqlite               meta, shards (one row per committed shard), shard_sums (below)
      manifest.parts/
        <shard>.sqlite              the shard's ``samples`` rows (manifest.py's schema), written by the scan
                                    task that read the shard: temp file, then renamed into place
        src/part-000.tar.sqlite     (a shard named "src/part-000.tar": the name's folders are kept)

    shard_sums (shard, status, n,   per shard and status: n samples and the sums of the columns the
                token_len, ...)     stages total (scan summary, stats, write's media items): no stage
                                    opens every part to count

The task writes and renames its part before it returns; the driver then commits the shard's ``shards``
row and its ``shard_sums`` in one transaction (``Manifest.commit_part``). That commit is the point of
truth: a part without its row (the driver killed in between) is scanned again on resume and its file
replaced; a committed row's part is never rewritten except by a rescan of that shard.

A part holds the same rows, in the same order, that the single layout's ``manifest.sqlite`` holds for
the shard, written by one transaction of a fresh file: its bytes depend only on its rows (the same
after a ``kill -9`` and resume). Any sqlite client reads it (``sqlite3 manifest.parts/x.tar.sqlite``).
Readers (``Manifest.select_samples``) open the parts read-only in shard order, a few at a time in
threads (sqlite releases the GIL while it steps), and hand their rows on in that order.
"""

from __future__ import annotations

import os
import sqlite3
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .errors import StaleArtifactError

__all__ = ["PARTS_DIR", "SUM_COLUMNS", "StatusSums", "parts_dir", "part_path", "sums_of", "write_part",
           "read_parts", "read_queries", "remove_parts"]

PARTS_DIR = "manifest.parts"
# the sample columns a stage totals; "n" (the sample count) comes first in every shard_sums row
SUM_COLUMNS = ("token_len", "media_tokens", "n_images", "n_videos", "n_audios", "unused_media",
               "encoder_patches", "audio_frames")
_READ_THREADS = 4  # parts read at once: sqlite steps without the GIL, the rows' tuples need it
_TMP = ".tmp-"  # infix of a part being written (``<part>.tmp-<pid>``): never read, removed at the scan's start


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusSums:
    shard: str  # the shard's manifest name
    status: str  # "ok" or a drop reason
    n: int  # samples of the shard with this status
    sums: tuple[int, ...]  # sum of each of SUM_COLUMNS over those samples


def parts_dir(work_dir: str | Path) -> Path:
    return Path(work_dir) / PARTS_DIR


def part_path(work_dir: str | Path, shard: str) -> Path:
    """``work_dir/manifest.parts/<shard>.sqlite`` (the shard's folders kept: names stay unique)."""
    return parts_dir(work_dir) / f"{shard}.sqlite"


def sums_of(shard: str, samples: Iterable) -> tuple[StatusSums, ...]:
    """The ``shard_sums`` rows of one shard's ``SampleRecord``s, sorted by status."""
    totals: dict[str, list[int]] = {}
    for sample in samples:
        row = totals.setdefault(sample.status, [0] * (1 + len(SUM_COLUMNS)))
        row[0] += 1
        for i, column in enumerate(SUM_COLUMNS, 1):
            row[i] += getattr(sample, column)
    return tuple(StatusSums(shard=shard, status=status, n=row[0], sums=tuple(row[1:]))
                 for status, row in sorted(totals.items()))


def write_part(path: Path, schema: str, insert: str, rows: Sequence[tuple]) -> None:
    """One part: a fresh sqlite file at a temporary name, its rows in one transaction, fsynced, renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}{_TMP}{os.getpid()}")
    tmp.unlink(missing_ok=True)
    conn = sqlite3.connect(tmp)
    try:
        conn.execute("PRAGMA journal_mode=OFF")  # the rename is the commit; no journal file beside it
        conn.executescript(schema)
        with conn:
            conn.executemany(insert, rows)
    finally:
        conn.close()
    with open(tmp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def remove_parts(work_dir: str | Path, *, only_unfinished: bool = False) -> None:
    """Every part (``--rescan``), or only the temporary files of tasks killed while writing one."""
    root = parts_dir(work_dir)
    if not root.is_dir():
        return
    for path in sorted(root.rglob("*"), reverse=True):  # files before their folders
        if path.is_file() and (not only_unfinished or _TMP in path.name):
            path.unlink()
        elif path.is_dir() and not only_unfinished:
            path.rmdir()
    if not only_unfinished:
        root.rmdir()


_REDO = "delete it and rerun `vlmpack scan` (it scans that shard again)"


def _read(path: Path, query: str, args: tuple, committed: dict[str, int]) -> list[tuple]:
    """``query``'s rows from one part, once its samples per status are the ``committed`` ones (``shard_sums``):
    a part changed, cut or replaced after its commit is refused by name, never read short or as a traceback."""
    if not path.is_file():  # sqlite would create an empty file in its place
        raise StaleArtifactError(f"{path} is missing but the manifest records its shard as scanned: "
                                 "rerun `vlmpack scan` (it scans that shard again)")
    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        try:
            held = dict(conn.execute("SELECT status, COUNT(*) FROM samples GROUP BY status").fetchall())
            if held != committed:
                raise StaleArtifactError(f"{path} holds {_counted(held)} but the manifest committed "
                                         f"{_counted(committed)} for its shard (changed after the scan?): {_REDO}")
            return conn.execute(query, args).fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:  # cut, overwritten, not sqlite at all, no samples table
        raise StaleArtifactError(f"{path} is not a readable manifest part ({exc}): {_REDO}") from None


def _counted(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no samples"


def read_parts(paths: Sequence[Path], query: str, args: tuple, committed: Sequence[dict[str, int]]
               ) -> Iterator[list[tuple]]:
    """``query`` on each part, its rows as one list per part, in the order of ``paths``; ``committed``: each
    part's samples per status as the manifest committed them."""
    return read_queries([(path, query, args, counts) for path, counts in zip(paths, committed, strict=True)])


def read_queries(jobs: Sequence[tuple[Path, str, tuple, dict[str, int]]]) -> Iterator[list[tuple]]:
    """Each ``(part, query, args, committed)``'s rows as one list, in the order of ``jobs``; a few read ahead in threads
    (at most ``2 * _READ_THREADS`` results held at once)."""
    if not jobs:
        return
    with ThreadPoolExecutor(max_workers=min(_READ_THREADS, len(jobs))) as pool:
        ahead: deque = deque()
        upcoming = iter(jobs)
        for job in upcoming:
            ahead.append(pool.submit(_read, *job))
            if len(ahead) >= 2 * _READ_THREADS:
                break
        while ahead:
            rows = ahead.popleft().result()
            following = next(upcoming, None)
            if following is not None:
                ahead.append(pool.submit(_read, *following))
            yield rows
