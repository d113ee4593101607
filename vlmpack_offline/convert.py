"""``vlmpack convert``: LLaVA-style JSON / JSONL (or an HF dataset) + media -> WebDataset shards the scan reads.

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
``vid0.mp4``, ``aud0.wav``, numbered per kind in reading order); so the scan reads any layout it
reads (LLaVA ``image``, ShareGPT / LLaMA-Factory ``images`` / ``videos`` / ``audios``, HF
``messages`` items ``{"type": "image", "image": PATH}`` / ``{"type": "audio", "audio": PATH}``). The key is the record's
index plus its ``id`` (characters other than letters, digits, ``_`` and ``-``
become ``_``), so keys are unique and carry no ``.``.

Shards are written with webdataset's ``ShardWriter`` (``maxcount`` / ``maxsize``)
with a fixed mtime, so the same input gives the same bytes. A record that cannot be
converted (not an object, a media file missing or outside ``media_root``) is left
out and listed in ``convert_report.jsonl`` next to the shards with its reason; the
summary counts them. Nothing read is executed.

HF ``datasets`` and parquet (``pip install 'vlmpack-offline[hf]'``): the source may
also be a folder written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``
(``--split`` picks the split of a ``DatasetDict``; one split is taken as it is), a
``.parquet`` file, or a folder of ``*.parquet`` files (read in name order). Rows are
records as above; their media entries may be paths under ``--media-root`` or, as HF
``Image()`` / ``Video()`` columns store them, ``{"bytes": ..., "path": ...}``, whose
bytes are written as they are (the extension from ``path``, else from the bytes'
signature). Rows are read in their stored form, so no image is decoded. A row with
another value JSON cannot hold (bytes outside a media entry, ...) is reported as
``unknown_format``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .conversation import MEDIA_KINDS, media_kind_of_part
from .errors import ConfigError
from .optional import require
from .reasons import DropError, Reason

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


def read_records(path: str | Path, *, split: str | None = None) -> Iterator[Any]:
    """The records of a JSON list, a JSONL file (one JSON value a line; blank lines skipped), an HF
    ``save_to_disk`` folder, a parquet file or a folder of parquet files (see the module doc).

    The source is checked (and an HF dataset opened) now, so a wrong source fails before any shard is written.
    """
    path = Path(path)
    if path.is_dir():
        if any((path / name).is_file() for name in ("dataset_dict.json", "dataset_info.json", "state.json")):
            return _hf_rows(_load_hf(path, split))
        files = sorted(path.glob("*.parquet"))
        if not files:
            raise ConfigError(f"convert input {path} is a folder with neither an HF save_to_disk dataset "
                              "(dataset_info.json / dataset_dict.json) nor *.parquet files")  # fmt: skip
        return _parquet_rows(files, require("pyarrow.parquet", "reading parquet files"))
    if not path.is_file():
        raise ConfigError(f"convert input {path} is not a file")
    if path.suffix == ".parquet":
        return _parquet_rows([path], require("pyarrow.parquet", "reading parquet files"))
    return _json_rows(path)


def _json_rows(path: Path) -> Iterator[Any]:
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
                    yield DropError(Reason.BAD_JSON, f"line {number} is not valid JSON")


def _parquet_rows(files: list[Path], parquet: Any) -> Iterator[dict]:
    for file in files:
        for batch in parquet.ParquetFile(file).iter_batches(batch_size=256):
            yield from batch.to_pylist()  # stored form: an HF Image() column is {"bytes", "path"}


def _load_hf(path: Path, split: str | None) -> Any:
    datasets = require("datasets", "reading an HF save_to_disk folder")
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        names = sorted(loaded)
        if split is None and len(names) == 1:
            split = names[0]
        if split not in loaded:
            raise ConfigError(f"{path} is a DatasetDict with splits {', '.join(names)}: choose one with --split")
        loaded = loaded[split]
    elif split is not None:
        raise ConfigError(f"{path} is one Dataset, not a DatasetDict: leave out --split")
    return loaded


def _hf_rows(loaded: Any) -> Iterator[dict]:
    for batch in loaded.with_format("arrow").iter(batch_size=256):  # undecoded: images stay bytes
        yield from batch.to_pylist()


def _kind(path: str) -> str:
    kind = media_kind_of_part(path)
    if kind is None:
        raise DropError(Reason.UNSUPPORTED_MEDIA, f"media {path!r} has no image, video or audio extension")
    return kind


class _MediaRenamer:
    """Reads each media path of one record and names it ``img<i>.<ext>`` / ``vid<i>.<ext>`` / ``aud<i>.<ext>``."""

    def __init__(self, media_root: Path | None) -> None:
        self.root = media_root.resolve() if media_root is not None else None
        self.parts: dict[str, bytes] = {}
        self._by_path: dict[str, str] = {}

    def _add(self, kind: str, ext: str, data: bytes) -> str:
        prefix = {"image": "img", "video": "vid", "audio": "aud"}[kind]
        index = sum(name.startswith(prefix) for name in self.parts)
        name = f"{prefix}{index}.{ext}"
        self.parts[name] = data
        return name

    def rename(self, path: Any, kind_hint: str) -> str:
        if isinstance(path, dict) and isinstance(path.get("bytes"), bytes):  # an HF Image() / Video() value
            return self._embedded(path, kind_hint)
        if not isinstance(path, str) or not path:
            raise DropError(Reason.UNKNOWN_FORMAT, f"a {kind_hint} entry must be a path string, got {path!r}")
        if path in self._by_path:
            return self._by_path[path]
        if self.root is None:
            raise ConfigError(f"a record names its {kind_hint} by path ({path!r}): pass --media-root, the folder "
                              "its media paths are relative to")  # fmt: skip
        file = (self.root / path).resolve()
        if not file.is_relative_to(self.root):
            raise DropError(Reason.MEDIA_OUTSIDE_ROOT, f"media {path!r} is outside --media-root {self.root}")
        if not file.is_file():
            raise DropError(Reason.MISSING_MEDIA, f"media file {file} does not exist")
        name = self._add(_kind(path), path.rsplit(".", 1)[-1].lower(), file.read_bytes())
        self._by_path[path] = name
        return name

    def _embedded(self, value: dict, kind_hint: str) -> str:
        data, path = value["bytes"], value.get("path")
        ext = path.rsplit(".", 1)[-1].lower() if isinstance(path, str) and "." in path else _sniff(data)
        if ext is None:
            raise DropError(Reason.UNSUPPORTED_MEDIA, f"embedded {kind_hint} bytes of an unknown format (path {path!r})")
        return self._add(_kind(f"x.{ext}"), ext, data)


_SIGNATURES = ((b"\xff\xd8\xff", "jpg"), (b"\x89PNG", "png"), (b"GIF8", "gif"), (b"BM", "bmp"), (b"\x1aE\xdf\xa3", "mkv"),
               (b"fLaC", "flac"), (b"OggS", "ogg"), (b"ID3", "mp3"))


def _sniff(data: bytes) -> str | None:
    """An image / video / audio extension from the first bytes (for embedded media without a path, as HF
    ``Audio()`` columns store decoded-from bytes)."""
    if data[:4] == b"RIFF" and data[8:12] in (b"WEBP", b"AVI ", b"WAVE"):
        return {b"WEBP": "webp", b"AVI ": "avi", b"WAVE": "wav"}[data[8:12]]
    if data[4:8] == b"ftyp":
        return "m4a" if data[8:11] == b"M4A" else "mov" if data[8:10] == b"qt" else "mp4"
    if data[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):  # an MPEG audio frame without an ID3 tag
        return "mp3"
    return next((ext for magic, ext in _SIGNATURES if data.startswith(magic)), None)


def _rename_media(record: dict, media: _MediaRenamer) -> dict:
    out = dict(record)
    for kind in MEDIA_KINDS:
        for key in (kind, f"{kind}s"):
            value = record.get(key)
            if isinstance(value, (str, dict)):
                out[key] = media.rename(value, kind)
            elif isinstance(value, list):
                out[key] = [media.rename(v, kind) for v in value]
            elif value is not None:
                raise DropError(Reason.UNKNOWN_FORMAT, f"`{key}` must be a path or a list of paths")
    if isinstance(record.get("messages"), list):
        out["messages"] = [_rename_message(m, media) for m in record["messages"]]
    return out


def _rename_message(message: Any, media: _MediaRenamer) -> Any:
    if not isinstance(message, dict) or not isinstance(message.get("content"), list):
        return message
    content = []
    for item in message["content"]:
        if isinstance(item, dict) and item.get("type") in MEDIA_KINDS and item.get(item["type"]):
            item = {**item, item["type"]: media.rename(item[item["type"]], item["type"])}
        content.append(item)
    return {**message, "content": content}


def _json_text(record: dict) -> str:
    try:
        return json.dumps(record, ensure_ascii=False)
    except (TypeError, ValueError) as exc:  # bytes outside a media entry, a timestamp, ...
        raise DropError(Reason.UNKNOWN_FORMAT, f"the record holds a value JSON cannot: {exc}") from None


def _key(index: int, record: dict) -> str:
    ident = record.get("id")
    suffix = _UNSAFE_KEY.sub("_", str(ident))[:80] if ident not in (None, "") else ""
    return f"{index:08d}_{suffix}" if suffix else f"{index:08d}"


def convert_records(
    source: str | Path, media_root: str | Path | None, out_dir: str | Path, *, maxcount: int = 10000,
    maxsize: int = 3_000_000_000, split: str | None = None,
) -> ConvertResult:  # fmt: skip
    """Convert ``source`` (JSON list, JSONL, HF save_to_disk folder, parquet) into ``out_dir/shard-%06d.tar``.

    ``media_root``: the folder media paths are relative to; None when every medium is embedded.
    ``split``: the split of an HF ``DatasetDict``. See the module doc.
    """
    from webdataset import ShardWriter

    out_dir = Path(out_dir)
    media_root = Path(media_root) if media_root is not None else None
    if media_root is not None and not media_root.is_dir():
        raise ConfigError(f"--media-root {media_root} is not a folder")
    if out_dir.exists() and any(out_dir.glob("shard-*.tar")):
        raise ConfigError(f"{out_dir} already holds shard-*.tar files: give an empty or new --out folder")
    records = read_records(source, split=split)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = skipped = 0
    shards: list[Path] = []
    report_path = out_dir / REPORT_NAME
    try:  # a wrong input found mid-way (a path with no --media-root) leaves no partial output behind
        with open(report_path, "w", encoding="utf-8") as report, ShardWriter(
            str(out_dir / "shard-%06d.tar"), maxcount=maxcount, maxsize=maxsize, verbose=0, mtime=0.0,
            post=lambda name: shards.append(Path(name)),
        ) as writer:  # fmt: skip
            for index, record in enumerate(records):
                try:
                    if isinstance(record, DropError):
                        raise record
                    if not isinstance(record, dict):
                        raise DropError(Reason.UNKNOWN_FORMAT, f"record is a {type(record).__name__}, not an object")
                    media = _MediaRenamer(media_root)
                    text = _json_text(_rename_media(record, media))
                except DropError as skip:
                    skipped += 1
                    report.write(json.dumps({"index": index, "reason": skip.reason, "error": str(skip)}) + "\n")
                    continue
                sample = {"__key__": _key(index, record), "json": text.encode()}
                sample.update(media.parts)
                writer.write(sample)
                written += 1
    except ConfigError:
        for shard in shards:
            shard.unlink(missing_ok=True)
        report_path.unlink(missing_ok=True)
        raise
    return ConvertResult(written=written, skipped=skipped, shards=tuple(shards), report=report_path)
