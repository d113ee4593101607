"""Read WebDataset tar shards as samples with byte locators, without extracting anything.

Two small generator stages, each testable alone (the webdataset ``tariterators`` shape)::

    iter_members(tar)  ->  TarMember(name, offset, size)        one per regular file
    group_samples(...) ->  RawSample(key, members, problem)     consecutive members, same key

Key rule (webdataset / energon): the key is the member path up to the first ``.``
of its last path component; the rest is the part name::

    sub/dir/k1.img0.jpg  ->  key "sub/dir/k1", part "img0.jpg"

``offset`` is where the member's data starts in the tar file (after any PAX
headers), so later stages copy media bytes with one ``pread`` and no tar parsing.
Headers are read by ``tar_headers.HeaderReader``: stdlib ``tarfile``'s walk, from large reads and
without its per-member objects (``iter_members(..., reader="tarfile")`` is tarfile itself).

A shard is a local path (read with ``os.pread``) or a URL (``s3://``, ``gs://``, ``file://``,
``memory://``, any fsspec protocol), read through ``fsspec`` by byte range: ``open_source``,
``source_stat``, ``read_range`` take either.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from .reasons import Reason
from .tar_headers import HeaderReader

__all__ = [
    "TarMember",
    "RawSample",
    "split_key",
    "iter_members",
    "group_samples",
    "iter_samples",
    "read_range",
    "is_url",
    "open_source",
    "source_stat",
    "SHARD_SUFFIXES",
    "is_shard_name",
    "shard_problem",
    "sample_digest",
]

# names that look like a shard: read if a plain tar, else listed with a shard-level reason
SHARD_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz", ".tar.zst", ".tzst")
_COMPRESSION = (  # (magic, name, how to undo it)
    (b"\x1f\x8b", "gzip", "gunzip -k"),
    (b"BZh", "bzip2", "bunzip2 -k"),
    (b"\xfd7zXZ\x00", "xz", "unxz -k"),
    (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"),
)



@dataclass(frozen=True, slots=True, kw_only=True)
class TarMember:
    name: str  # full member path inside the tar
    offset: int  # byte offset of the member's data in the tar file
    size: int  # data size in bytes
    problem: Reason | None = None  # BAD_MEMBER_NAME, TRUNCATED_SHARD or DAMAGED_HEADER when it cannot be used
    detail: str = ""  # what is wrong, for the drop's error text
    key: str = field(init=False, repr=False, compare=False)  # split_key(name): the sample key ("sub/dir/k1") ...
    part: str = field(init=False, repr=False, compare=False)  # ... and part name ("img0.jpg"), split once

    def __post_init__(self) -> None:
        key, part = split_key(self.name)
        object.__setattr__(self, "key", key)  # frozen: set once here, read for every sample and lookup
        object.__setattr__(self, "part", part)


@dataclass(frozen=True, slots=True, kw_only=True)
class RawSample:
    key: str  # sample key, e.g. "sub/dir/k1"
    members: tuple[TarMember, ...]  # consecutive members sharing the key, in tar order
    problem: str | None = None  # first member problem, if any (the whole sample is then dropped)
    error: str = ""  # the text that goes with ``problem``

    def part(self, name: str) -> TarMember | None:
        for member in self.members:
            if member.part == name:
                return member
        return None


def split_key(name: str) -> tuple[str, str]:
    """``sub/dir/k1.img0.jpg`` -> ``("sub/dir/k1", "img0.jpg")``; no dot -> part ``""``."""
    head, _, last = name.rpartition("/")
    stem, dot, part = last.partition(".")
    key = f"{head}/{stem}" if head else stem
    return key, part if dot else ""


def is_shard_name(name: str) -> bool:
    return name.endswith(SHARD_SUFFIXES)


def shard_problem(path: str | Path) -> tuple[Reason, str, int] | None:
    """Why a file named like a shard cannot be read as an uncompressed tar: (reason, text, samples inside).

    None for a tar (or an empty file). A compressed tar is streamed once to count the
    samples it holds (they are reported as not read); other files hold none we can count.
    """
    with open_source(path) as handle:
        head = read_range(handle, 0, tarfile.BLOCKSIZE)
    if not head.strip(b"\0") or _is_header(head):
        return None
    for magic, name, undo in _COMPRESSION:
        if head.startswith(magic):
            inside = _count_compressed(path)
            counted = f"{inside} samples inside were not read" if inside is not None else "its samples were not counted"
            return (
                Reason.COMPRESSED_SHARD,
                f"{name}-compressed: vlmpack reads uncompressed tars only ({counted}); "
                f"decompress it (`{undo}`) and rerun the scan",
                inside or 0,
            )
    return Reason.NOT_A_TAR, f"not a tar file: it does not start with a tar header (first bytes {head[:16]!r})", 0


def _is_header(block: bytes) -> bool:
    try:
        tarfile.TarInfo.frombuf(block.ljust(tarfile.BLOCKSIZE, b"\0"), "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        return False
    return True


def _count_compressed(path: str | Path) -> int | None:
    """Samples (consecutive keys) in a compressed tar, by streaming it once; None where it cannot be read."""
    try:
        with open_source(path) as handle, tarfile.open(fileobj=handle, mode="r|*") as tar:
            keys, last = 0, None
            for info in tar:
                key = split_key(info.name)[0]
                if info.isreg() and key != last:
                    keys, last = keys + 1, key
            return keys
    except (tarfile.TarError, OSError, EOFError, ValueError):
        return None


def _unsafe(name: str) -> bool:
    """Absolute, or a ``..`` component (``PurePosixPath(name).parts`` holds ``..`` exactly then)."""
    return name.startswith("/") or (".." in name and ".." in name.split("/"))


def iter_members(tar_path: str | Path, *, reader: str = "fast") -> Iterator[TarMember]:
    """Yield every file member of a tar with its data offset and size.

    A hard link to an earlier regular file of the tar is that file's bytes under the link's name (what
    extracting the tar gives); a hard link to anything else, a symbolic link, a device or a fifo is
    yielded with ``problem=Reason.UNSUPPORTED_MEMBER`` (never followed: its sample is dropped with the
    reason, not silently left without a part). Directory entries hold no data and are skipped (as
    webdataset and energon do). A member whose name is absolute,
    contains ``..`` or is not valid UTF-8 is yielded with ``problem=Reason.BAD_MEMBER_NAME``
    (never followed). When the file ends inside a member or a header, a last member
    with ``problem=Reason.TRUNCATED_SHARD`` is yielded and iteration stops: everything before
    the cut stays usable. A damaged header with data after it (a checksum error
    mid-file) yields a ``Reason.DAMAGED_HEADER`` member, and reading resumes at the next
    block that is a valid header, so the samples after the damage are kept.

    ``reader`` picks what reads the headers: ``"fast"`` (``tar_headers.HeaderReader``, large reads and no
    per-member objects) or ``"tarfile"`` (stdlib ``tarfile.TarFile``, the reference the fast reader gives the
    same members as: tests/test_tar_fast_reader.py). They differ only on headers tarfile crashes or loops on,
    which the fast reader reads as damaged.
    """
    if reader not in _READERS:
        raise ValueError(f"iter_members: reader {reader!r} is not one of {sorted(_READERS)}")
    open_reader = _READERS[reader]
    tar_path = str(tar_path)
    file_size = source_stat(tar_path)[0]
    start, last_name = 0, ""
    files: dict[str, TarMember] = {}  # regular files so far, by name: the targets hard links may name
    with open_source(tar_path) as handle:
        while start is not None:
            resume, start = start, None
            try:
                tar = open_reader(handle, resume, file_size)
            except tarfile.ReadError:
                if resume == 0:  # not even a first header: empty or not a tar
                    if file_size:
                        yield TarMember(name="?", offset=0, size=0, problem=Reason.NOT_A_TAR, detail="not a tar file")
                    return
                tar = None  # a long-name or PAX header leads to a bad one: damage here too (never the rest unread)
            while True:
                header_at = tar.offset if tar is not None else resume
                try:
                    info = tar.next() if tar is not None else None
                except (tarfile.ReadError, EOFError):  # header cut or damaged
                    info = None
                if info is None:
                    if _clean_end(tar_path, header_at):  # a zero block: the end-of-archive marker
                        return
                    start = _next_header(handle, header_at + tarfile.BLOCKSIZE, file_size)
                    if start is None:  # tarfile reads a header cut short as a clean end
                        name = _cut_header_name(tar_path, header_at) or last_name or "?"
                        yield TarMember(name=name, offset=header_at, size=0, problem=Reason.TRUNCATED_SHARD)
                        return
                    yield TarMember(  # the damaged member's own sample when its name survived, else the one before
                        name=_cut_header_name(tar_path, header_at) or last_name or "?",
                        offset=header_at, size=0, problem=Reason.DAMAGED_HEADER,
                        detail=f"damaged tar header at byte {header_at} (checksum error); reading resumed at "
                        f"byte {start}, the {start - header_at} bytes between are lost",
                    )  # fmt: skip
                    break
                if info.isdir() or info.type == b"V":
                    continue  # a directory or a GNU volume label: structure, no data
                last_name = info.name
                if not info.isreg() or info.issparse():
                    member = _special_member(info, files)
                    if member.problem is None:
                        files[info.name] = member  # a hard link resolved: a later link may name it in turn
                    yield member
                    continue
                if info.offset_data + info.size > file_size:
                    yield TarMember(name=info.name, offset=info.offset_data, size=info.size, problem=Reason.TRUNCATED_SHARD)
                    return
                member = _member(info)
                files[info.name] = member
                yield member


def _tarfile_reader(handle, start: int, file_size: int) -> tarfile.TarFile:
    handle.seek(start)
    return tarfile.TarFile(fileobj=handle, mode="r")  # reads from the handle's position on


def _fast_reader(handle, start: int, file_size: int) -> HeaderReader:
    return HeaderReader(handle, start, file_size, read_range)


_READERS = {"fast": _fast_reader, "tarfile": _tarfile_reader}  # both: offset, next(), ReadError as TarFile()


def _member(info: tarfile.TarInfo) -> TarMember:
    try:
        info.name.encode("utf-8")
    except UnicodeEncodeError:  # tarfile keeps undecodable bytes as surrogates
        # backslash escapes keep two different undecodable names apart (each its own sample and row)
        shown = info.name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        return TarMember(name=shown, offset=info.offset_data, size=info.size, problem=Reason.BAD_MEMBER_NAME,
                         detail=f"member name {shown!r} is not valid UTF-8; it was not read")  # fmt: skip
    if _unsafe(info.name):
        return TarMember(name=info.name, offset=info.offset_data, size=info.size, problem=Reason.BAD_MEMBER_NAME,
                         detail=f"member name {info.name!r} is absolute or contains '..'; it was not read")  # fmt: skip
    return TarMember(name=info.name, offset=info.offset_data, size=info.size)


_KINDS = {tarfile.SYMTYPE: "symbolic link", tarfile.CHRTYPE: "character device", tarfile.BLKTYPE: "block device",
          tarfile.FIFOTYPE: "fifo", tarfile.LNKTYPE: "hard link"}


def _special_member(info: tarfile.TarInfo, files: dict[str, TarMember]) -> TarMember:
    """A member that is not a regular file: a hard link resolved to its earlier target, else a reasoned problem."""
    named = _member(info)
    if named.problem:
        return named
    target = files.get(info.linkname) if info.islnk() else None
    if target is not None and target.problem is None:
        return TarMember(name=info.name, offset=target.offset, size=target.size)
    if info.issparse():  # GNU tar -S: holes are not stored, so the bytes at offset_data are not the file
        return TarMember(name=info.name, offset=info.offset_data, size=0, problem=Reason.UNSUPPORTED_MEMBER,
                         detail=f"member {info.name!r} is stored as a sparse file (tar -S): its bytes are not "
                         "contiguous in the tar; write the shard without -S / --sparse")  # fmt: skip
    kind = _KINDS.get(info.type, f"member of tar type {info.type!r}")
    points = f" to {info.linkname!r}" if info.issym() or info.islnk() else ""
    why = ", which is not an earlier regular file of this tar" if info.islnk() else ""
    return TarMember(name=info.name, offset=info.offset_data, size=0, problem=Reason.UNSUPPORTED_MEMBER,
                     detail=f"member {info.name!r} is a {kind}{points}{why}: only regular files and hard links "
                     "to them are read")  # fmt: skip


def _next_header(handle, at: int, file_size: int) -> int | None:
    """Offset of the first block at or after ``at`` that parses as a valid tar header, or None."""
    while at + tarfile.BLOCKSIZE <= file_size:
        block = read_range(handle, at, tarfile.BLOCKSIZE)
        if block.strip(b"\0"):
            try:
                tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
                return at
            except tarfile.HeaderError:
                pass
        at += tarfile.BLOCKSIZE
    return None


def _clean_end(tar_path: str, at: int) -> bool:
    """True when a zero block (the end-of-archive marker) starts at ``at``."""
    with open_source(tar_path) as handle:
        block = read_range(handle, at, tarfile.BLOCKSIZE)
    return len(block) == tarfile.BLOCKSIZE and not block.strip(b"\0")


def _cut_header_name(tar_path: str, at: int) -> str | None:
    """The member name in a header cut short or damaged, when its 100-byte name field survived.

    Pseudo names of GNU long-name and PAX records (``././@...``) do not say which
    sample was cut: None, and the caller blames the previous member's sample.
    """
    with open_source(tar_path) as handle:
        field = read_range(handle, at, 100)
    name = field.split(b"\0", 1)[0].decode("utf-8", "replace")
    if len(field) < 100 or not name or name.startswith("././@") or not name.isprintable():
        return None
    return name


def group_samples(members: Iterable[TarMember]) -> Iterator[RawSample]:
    """Group consecutive members by key; a member problem, or a part name twice, marks its whole sample."""
    key: str | None = None
    run: list[TarMember] = []

    def emit() -> RawSample:
        bad = next((m for m in run if m.problem), None)
        parts = [m.part for m in run]
        twice = next((p for i, p in enumerate(parts) if p in parts[:i]), None)
        if bad is None and twice is not None:
            return RawSample(key=key or "", members=tuple(run), problem=Reason.DUPLICATE_MEMBER,
                             error=f"member {key}.{twice} appears {parts.count(twice)} times in the sample: which copy "
                             "is meant cannot be told (webdataset refuses a repeated name too)")  # fmt: skip
        if bad is None:
            return RawSample(key=key or "", members=tuple(run))
        if bad.detail:
            error = bad.detail
        else:
            error = f"shard ends inside member {bad.name!r} (at byte {bad.offset + bad.size} of the data)"
        return RawSample(key=key or "", members=tuple(run), problem=bad.problem, error=error)

    for member in members:
        member_key = member.key
        if run and member_key != key:
            yield emit()
            run = []
        key = member_key
        run.append(member)
    if run:
        yield emit()


def iter_samples(tar_path: str | Path) -> Iterator[RawSample]:
    """``group_samples(iter_members(tar_path))``."""
    return group_samples(iter_members(tar_path))


def is_url(path: str | Path) -> bool:
    """``s3://b/x.tar``, ``file:///d/x.tar``: read through fsspec; a plain path is not."""
    return isinstance(path, str) and "://" in path


def url_fs(url: str):
    """(fsspec filesystem, path inside it) of a URL: s3fs, gcsfs, the Multi-Storage Client's for msc:// ..."""
    import fsspec  # only for URLs: local paths never import it

    return fsspec.core.url_to_fs(url)


def open_source(path: str | Path) -> BinaryIO:
    """A binary file for ``read_range``: ``open`` for a path, an fsspec file for a URL."""
    if not is_url(path):
        return open(path, "rb")  # noqa: SIM115 - the caller closes it
    fs, inner = url_fs(path)
    return fs.open(inner, "rb")


def source_stat(path: str | Path) -> tuple[int, int]:
    """(size, mtime_ns) of a shard; for a URL, the store's modification time (0 when it keeps none)."""
    if not is_url(path):
        stat = os.stat(path)
        return stat.st_size, stat.st_mtime_ns
    fs, inner = url_fs(path)
    try:
        info = fs.info(inner)
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file: {path}") from None
    stamp = next((info[k] for k in ("mtime", "LastModified", "updated", "created") if info.get(k) is not None), 0)
    if isinstance(stamp, str):
        stamp = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    if isinstance(stamp, datetime.datetime):
        stamp = stamp.timestamp()
    return int(info["size"]), round(float(stamp) * 1e9)


def read_range(handle, offset: int, size: int) -> bytes:
    """Read ``size`` bytes at ``offset`` of an open binary file (``os.pread`` where possible).

    An fsspec file without a descriptor (``s3://``, ``memory://``) is read by seek + read, which
    fetches that byte range (plus its read-ahead block) from the store. An offset past any possible file (a
    damaged tar header's size can point there) reads nothing.
    """
    if offset >= 1 << 63:
        return b""
    try:
        return os.pread(handle.fileno(), size, offset)
    except (AttributeError, OSError):
        handle.seek(offset)
        return handle.read(size)


def sample_digest(handle, ranges: Iterable[tuple[int, int]]) -> str:
    """sha256 over a sample's member bytes in tar order (``(offset, size)`` ranges of one open shard).

    The scan records it per sample when ``write.check_sources`` is ``sha256``; write recomputes it
    before copying, so a source edited in place (even with size and mtime restored) is caught.
    """
    digest = hashlib.sha256()
    for offset, size in ranges:
        digest.update(read_range(handle, offset, size))
    return digest.hexdigest()
