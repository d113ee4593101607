"""``vlmpack convert``: LLaVA-style JSON / JSONL + a media folder -> WebDataset shards the scan reads.

Raw data most often looks like this: one JSON list (or JSONL) of records whose media
entries are paths under a folder::

    records.json   [{"id": "000123", "image": "coco/train2017/000123.jpg",
                     "conversations": [{"from": "human", "value": "<image>\\nWhat is it?"},
                                       {"from": "gpt", "value": "A bus."}]}, ...]
    media_root/    coco/train2017/000123.jpg ...

    vlmpack convert records.json --media-root media_root --out shards/
    -> shards/shard-000000.tar:   00000000_000123.json   00000000_000123.img0.jpg

Each record becomes one sample. Its JSON keeps every field, with each media entry
replaced by the part name it was written under (``img0.jpg``, ``img1.png``,
``vid0.mp4``, numbered per kind in reading order); so the scan reads any layout it
reads (LLaVA ``image``, ShareGPT / LLaMA-Factory ``images`` / ``videos``, HF
``messages`` items ``{"type": "image", "image": PATH}``). The key is the record's
index plus its ``id`` (characters other than letters, digits, ``_`` and ``-``
become ``_``), so keys are unique and carry no ``.``.

Shards are written with webdataset's ``ShardWriter`` (``maxcount`` / ``maxsize``)
with a fixed mtime, so the same input gives the same bytes. A record that cannot be
converted (not an object, a media file missing or outside ``media_root``) is left
out and listed in ``convert_report.jsonl`` next to the shards with its reason; the
summary counts them. Nothing read is executed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .conversation import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS
from .errors import ConfigError

__all__ = ["ConvertResult", "convert_records", "read_records"]

REPORT_NAME = "convert_report.jsonl"
_UNSAFE_KEY = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True, kw_only=True)
class ConvertResult:
    written: int  # records written as samples
    skipped: int  # records listed in convert_report.jsonl
    shards: tuple[Path, ...]  # the shards written, in order
    report: Path  # convert_report.jsonl

    def render(self) -> str:
        lines = [f"convert: {self.written} samples in {len(self.shards)} shards, {self.skipped} records skipped"]
        if self.skipped:
            lines.append(f"  skipped records and their reasons: {self.report}")
        return "\n".join(lines)


class _Skip(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def read_records(path: str | Path) -> Iterator[Any]:
    """The records of a JSON list or a JSONL file (one JSON value a line; blank lines skipped)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"convert input {path} is not a file")
    with open(path, encoding="utf-8") as handle:
        first = handle.read(1)
        while first and first.isspace():
            first = handle.read(1)
        handle.seek(0)
        if first == "[":
            try:
                yield from json.load(handle)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"{path}: not a valid JSON list ({exc})") from None
            return
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError:
                    yield _Skip("bad_json", f"line {number} is not valid JSON")


def _kind(path: str) -> str:
    ext = path.rsplit(".", 1)[-1].lower()
    if ext in IMAGE_EXTENSIONS:
        return "image"
    if ext in VIDEO_EXTENSIONS:
        return "video"
    raise _Skip("unsupported_media", f"media {path!r} has no image or video extension")


class _MediaRenamer:
    """Reads each media path of one record and names it ``img<i>.<ext>`` / ``vid<i>.<ext>``."""

    def __init__(self, media_root: Path) -> None:
        self.root = media_root.resolve()
        self.parts: dict[str, bytes] = {}
        self._by_path: dict[str, str] = {}

    def rename(self, path: Any, kind_hint: str) -> str:
        if not isinstance(path, str) or not path:
            raise _Skip("unknown_format", f"a {kind_hint} entry must be a path string, got {path!r}")
        if path in self._by_path:
            return self._by_path[path]
        file = (self.root / path).resolve()
        if not file.is_relative_to(self.root):
            raise _Skip("media_outside_root", f"media {path!r} is outside --media-root {self.root}")
        if not file.is_file():
            raise _Skip("missing_media", f"media file {file} does not exist")
        kind = _kind(path)
        prefix = "img" if kind == "image" else "vid"
        index = sum(name.startswith(prefix) for name in self.parts)
        name = f"{prefix}{index}.{path.rsplit('.', 1)[-1].lower()}"
        self.parts[name] = file.read_bytes()
        self._by_path[path] = name
        return name


def _rename_media(record: dict, media: _MediaRenamer) -> dict:
    out = dict(record)
    for kind in ("image", "video"):
        for key in (kind, f"{kind}s"):
            value = record.get(key)
            if isinstance(value, str):
                out[key] = media.rename(value, kind)
            elif isinstance(value, list):
                out[key] = [media.rename(v, kind) for v in value]
            elif value is not None:
                raise _Skip("unknown_format", f"`{key}` must be a path or a list of paths")
    if isinstance(record.get("messages"), list):
        out["messages"] = [_rename_message(m, media) for m in record["messages"]]
    return out


def _rename_message(message: Any, media: _MediaRenamer) -> Any:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return message
    content = []
    for item in message["content"]:
        if isinstance(item, dict) and item.get("type") in ("image", "video") and item.get(item["type"]):
            item = {**item, item["type"]: media.rename(item[item["type"]], item["type"])}
        content.append(item)
    return {**message, "content": content}


def _key(index: int, record: dict) -> str:
    ident = record.get("id")
    suffix = _UNSAFE_KEY.sub("_", str(ident))[:80] if ident not in (None, "") else ""
    return f"{index:08d}_{suffix}" if suffix else f"{index:08d}"


def convert_records(
    source: str | Path, media_root: str | Path, out_dir: str | Path, *, maxcount: int = 10000, maxsize: int = 3_000_000_000
) -> ConvertResult:
    """Convert ``source`` (JSON list or JSONL) into ``out_dir/shard-%06d.tar``; see the module doc."""
    from webdataset import ShardWriter

    out_dir, media_root = Path(out_dir), Path(media_root)
    if not media_root.is_dir():
        raise ConfigError(f"--media-root {media_root} is not a folder")
    if out_dir.exists() and any(out_dir.glob("shard-*.tar")):
        raise ConfigError(f"{out_dir} already holds shard-*.tar files: give an empty or new --out folder")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = skipped = 0
    shards: list[Path] = []
    report_path = out_dir / REPORT_NAME
    with open(report_path, "w", encoding="utf-8") as report, ShardWriter(
        str(out_dir / "shard-%06d.tar"), maxcount=maxcount, maxsize=maxsize, verbose=0, mtime=0.0,
        post=lambda name: shards.append(Path(name)),
    ) as writer:  # fmt: skip
        for index, record in enumerate(read_records(source)):
            try:
                if isinstance(record, _Skip):
                    raise record
                if not isinstance(record, dict):
                    raise _Skip("unknown_format", f"record is a {type(record).__name__}, not an object")
                media = _MediaRenamer(media_root)
                renamed = _rename_media(record, media)
            except _Skip as skip:
                skipped += 1
                report.write(json.dumps({"index": index, "reason": skip.reason, "error": str(skip)}) + "\n")
                continue
            sample = {"__key__": _key(index, record), "json": json.dumps(renamed, ensure_ascii=False).encode()}
            sample.update(media.parts)
            writer.write(sample)
            written += 1
    return ConvertResult(written=written, skipped=skipped, shards=tuple(shards), report=report_path)
