"""The write stage's scratch files: pack descriptions kept between describing and writing, and across a kill.

::

    packed_wds_dir/.nv-meta/vlmpack-build/packs-000003.bin      one per chunk of packs, in plan order
      line 1   JSON header (UTF-8, no newline inside), then "\\n":
               {"format": "vlmpack.write_scratch", "version": 1,
                "fingerprint": "<the run's write fingerprint>", "chunk": 3, "pack_ids": [17, 4, ...],
                "packs": [{"json": 812, "ids": null, "media": [["m0000.jpg", "a.tar", 1536, 20480], ...]}, ...]}
      then     per pack: its JSON part (``json`` bytes), then its ids.npy (``ids`` bytes, when not null)

Nothing in it is executed or unpickled: the header is JSON, the rest raw bytes cut at the
header's sizes. ``load_chunk`` returns None (the chunk is described again and the file
replaced) for a file whose header does not parse, whose fingerprint, chunk number or pack
ids are not the ones expected, or whose size is not the header's total: a leftover of
another run or another config, a file cut short by a power loss, or anything planted there.
Files are renamed into place (safe against ``kill -9``) but not fsynced: a cache, not an artifact.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from ..kill_points import kill_point

__all__ = ["SCRATCH_DIR", "Described", "chunk_path", "save_chunk", "load_chunk", "clear_scratch"]

SCRATCH_DIR = "vlmpack-build"  # under .nv-meta/
_META_DIR = ".nv-meta"
_FORMAT = "vlmpack.write_scratch"
_VERSION = 1
_MAX_HEADER = 64 << 20  # bytes; a longer first line is not ours
# ours: this format, its .tmp, and the pickles older vlmpack versions wrote (never read, only removed)
_OURS = re.compile(r"packs-\d{6}\.(bin|pkl)(\.tmp)?")

# one pack: (JSON part bytes, media as (part, source shard, offset, size), ids.npy bytes or None)
Described = tuple[bytes, tuple[tuple[str, str, int, int], ...], bytes | None]


def chunk_path(out_dir: Path, chunk_no: int) -> Path:
    return Path(out_dir) / _META_DIR / SCRATCH_DIR / f"packs-{chunk_no:06d}.bin"


def save_chunk(path: Path, *, fingerprint: str, chunk_no: int, pack_ids: list[int], described: list[Described]) -> None:
    header = {
        "format": _FORMAT,
        "version": _VERSION,
        "fingerprint": fingerprint,
        "chunk": chunk_no,
        "pack_ids": pack_ids,
        "packs": [
            {"json": len(json_bytes), "ids": None if ids is None else len(ids), "media": [list(m) for m in media]}
            for json_bytes, media, ids in described
        ],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
        for json_bytes, _, ids in described:
            handle.write(json_bytes)
            if ids is not None:
                handle.write(ids)
    os.replace(tmp, path)
    kill_point("write:scratch")


def _media(entry: object) -> tuple[str, str, int, int]:
    part, shard, offset, size = entry  # type: ignore[misc]
    if not (isinstance(part, str) and isinstance(shard, str) and type(offset) is int and type(size) is int):
        raise ValueError("bad media entry")
    if offset < 0 or size < 0:
        raise ValueError("bad media range")
    return part, shard, offset, size


def _size(value: object, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if type(value) is not int or value < 0:
        raise ValueError("bad size")
    return value


def load_chunk(path: Path, *, fingerprint: str, chunk_no: int, pack_ids: list[int]) -> list[Described] | None:
    """The chunk's descriptions, or None when ``path`` is missing or not this run's (see module doc)."""
    try:
        with open(path, "rb") as handle:
            line = handle.readline(_MAX_HEADER)
            body = handle.read()
        header = json.loads(line)
        if (
            not isinstance(header, dict)
            or header.get("format") != _FORMAT
            or header.get("version") != _VERSION
            or header.get("fingerprint") != fingerprint
            or header.get("chunk") != chunk_no
            or header.get("pack_ids") != pack_ids
            or not isinstance(header.get("packs"), list)
            or len(header["packs"]) != len(pack_ids)
        ):
            return None
        described: list[Described] = []
        at = 0
        for entry in header["packs"]:
            n_json, n_ids = _size(entry["json"]), _size(entry["ids"], optional=True)
            media = tuple(_media(m) for m in entry["media"])
            json_bytes = body[at : at + n_json]
            at += n_json
            ids = None
            if n_ids is not None:
                ids = body[at : at + n_ids]
                at += n_ids
            described.append((json_bytes, media, ids))
        return described if at == len(body) else None
    except (OSError, ValueError, TypeError, KeyError):  # missing, unreadable, not JSON, wrong shapes
        return None


def clear_scratch(out_dir: Path) -> None:
    """Remove our scratch files (by name), then the folder if nothing else is left in it."""
    folder = Path(out_dir) / _META_DIR / SCRATCH_DIR
    if not folder.is_dir():
        return
    for path in folder.iterdir():
        if _OURS.fullmatch(path.name) and path.is_file():
            path.unlink(missing_ok=True)
    try:
        folder.rmdir()
    except OSError:  # someone else's file is in there: leave it
        pass
