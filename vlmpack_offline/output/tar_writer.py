"""Reproducible tar shards plus their energon ``.tar.idx``, written in one pass.

::

    pretrain-000003.tar.tmp   members appended sample by sample (GNU headers, no PAX); a member's
                              data is bytes, or a ``SourceRange`` of an open source tar that is
                              read straight into the batch (os.preadv) or, from KERNEL_COPY_MIN
                              bytes up, copied by the kernel (copy_file_range, else sendfile)
    pretrain-000003.tar.idx.tmp   uint64 (native order, as energon writes it) offset of each sample's first header, then the
                                  end offset of the last member: N+1 entries (energon's format)
    -> finish(): rename .idx, then .tar   (fsync_files() flushes all shards at the end of the run)

A shard counts as done only when both final names exist with their expected sizes,
so a ``kill -9`` (or a power loss) at any point leaves either a complete shard or one
that is rewritten from scratch; the bytes are a pure function of the members, so the
rewrite is identical.
"""

from __future__ import annotations

import errno
import os
import struct
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import ShardError
from ..kill_points import kill_point

__all__ = [
    "MemberSpec",
    "SourceRange",
    "KERNEL_COPY_MIN",
    "reproducible_tarinfo",
    "ShardTarWriter",
    "member_header",
    "member_bytes_in_tar",
    "idx_path_for",
    "shard_is_done",
    "fsync_files",
]

_BLOCK = tarfile.BLOCKSIZE
_BUFFER = 4 << 20  # bytes staged per write: headers, parts and padding go out in large sequential writes
_ZERO_VIEW = memoryview(bytes(_BLOCK))
# SourceRange data from this size up is copied by the kernel, smaller data is read into the buffer:
# measured with benchmarks/bench_write.py on ext4, kernel copies of ~1 MB parts beat reading them
# (0.91-0.93 vs 0.75 of a plain copy), while for ~100 KB parts one call per part costs more than
# it saves (0.61 vs 0.68); from 1 MiB up both cases gain or break even
# (Linux only: elsewhere sendfile wants a socket and copy_file_range does not exist)
KERNEL_COPY_MIN = 1 << 20 if sys.platform.startswith("linux") else None
_NO_KERNEL_COPY = {errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSOCK, errno.EBADF}
_WRITEBACK = 8 << 20  # start the disk writing every 8 MiB written, not only at the final fsync
_KICK = getattr(os, "POSIX_FADV_DONTNEED", None)  # Linux: fadvise starts writeback of a dirty range


@dataclass(frozen=True, slots=True)
class SourceRange:
    """Member data that is a byte range of an open source file: the writer moves it without
    building a ``bytes`` object per member (``SourceFiles.range`` makes these)."""

    fd: int  # open source file (the caller keeps it open until the sample is added)
    offset: int  # where the data starts in it
    size: int  # bytes
    path: str  # for the error when the file is shorter than the manifest says


MemberSpec = tuple[str, "bytes | SourceRange"]  # (part name, data)


def _short_read(source: SourceRange, at: int) -> ShardError:
    return ShardError(
        f"{source.path}: short read at byte {at} (range {source.offset}+{source.size}): "
        "the source tar changed since the scan; rerun `vlmpack scan`"
    )


def member_bytes_in_tar(size: int) -> int:
    """Bytes one member takes in a GNU tar whose name fits the header (≤ 100 chars): header + padded data."""
    return _BLOCK + (size + _BLOCK - 1) // _BLOCK * _BLOCK


def idx_path_for(tar_path: Path) -> Path:
    """``pretrain-000000.tar`` -> ``pretrain-000000.tar.idx`` (energon's ``ITAR_SUFFIX``)."""
    return tar_path.with_name(tar_path.name + ".idx")


def shard_is_done(tar_path: Path, *, tar_bytes: int, n_samples: int) -> bool:
    """Both files under their final names with exactly the expected sizes."""
    idx = idx_path_for(tar_path)
    try:
        return tar_path.stat().st_size == tar_bytes and idx.stat().st_size == 8 * (n_samples + 1)
    except FileNotFoundError:
        return False


def fsync_files(paths: list[Path]) -> None:
    """Flush finished files (and their folders) to disk before a run declares itself complete."""
    for path in [*paths, *sorted({p.parent for p in paths})]:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def reproducible_tarinfo(name: str, size: int) -> tarfile.TarInfo:
    """A member header that depends on nothing but name and size."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


def _slow_header(name: str, size: int) -> bytes:
    return reproducible_tarinfo(name, size).tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")


# ``reproducible_tarinfo(name, size).tobuf(GNU)`` differs between members only in the name (bytes 0-99),
# size (124-135) and checksum (148-155) fields, so headers are a template with those three
# patched: ~1 µs instead of ~25 µs. tests/test_tar_writer.py checks it against ``tobuf``.
_TEMPLATE = _slow_header("", 0)
_NAME_END, _SIZE, _CHKSUM = 100, slice(124, 136), slice(148, 156)
# checksum = sum of all bytes with the checksum field read as 8 spaces; the template's name field is all NULs
_TEMPLATE_SUM = sum(_TEMPLATE[:148]) + sum(_TEMPLATE[156:]) + 8 * ord(" ") - sum(_TEMPLATE[_SIZE])
_MAX_OCTAL_SIZE = 8**11  # above this tarfile switches the size field to base-256


def member_header(name: str, size: int) -> bytes:
    """``TarInfo.tobuf`` of a member with our fixed metadata: one 512-byte GNU header block
    (preceded by GNU longname blocks when the name is over 100 bytes)."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) > _NAME_END or not 0 <= size < _MAX_OCTAL_SIZE or not raw.isascii():
        return _slow_header(name, size)  # long names (GNU longname blocks), huge sizes: tarfile's own path
    size_field = b"%011o\0" % size
    header = bytearray(_TEMPLATE)
    header[: len(raw)] = raw
    header[_SIZE] = size_field
    header[_CHKSUM] = b"%06o\0 " % (_TEMPLATE_SUM + sum(raw) + sum(size_field))
    return bytes(header)


class ShardTarWriter:
    """Append samples to ``<tar>.tmp`` and its index; ``finish`` makes both visible atomically."""

    def __init__(self, tar_path: Path, *, kernel_copy_min: int | None = KERNEL_COPY_MIN) -> None:
        self.tar_path = Path(tar_path)
        self._tmp = self.tar_path.with_name(self.tar_path.name + ".tmp")
        self._idx_tmp = self.tar_path.with_name(self.tar_path.name + ".idx.tmp")
        self._file = open(self._tmp, "wb", buffering=0)  # noqa: SIM115 - closed in finish/abort
        self._fd = self._file.fileno()
        self._offset = 0
        self._offsets: list[int] = []
        self._buffer = memoryview(bytearray(_BUFFER))  # headers, data and padding not yet written
        self._used = 0  # bytes of ``_buffer`` in use
        self._flushed = 0  # bytes handed to the kernel
        self._kicked = 0  # bytes whose writeback was started
        # SourceRange data of at least this many bytes is copied by the kernel (copy_file_range,
        # else sendfile); None: every range is read into the buffer
        self._kernel_copy_min = kernel_copy_min if hasattr(os, "copy_file_range") or hasattr(os, "sendfile") else None
        self._copy_call = "copy_file_range" if hasattr(os, "copy_file_range") else "sendfile"
        self.n_samples = 0

    def add_sample(self, key: str, members: list[MemberSpec]) -> None:
        """Write one sample: ``key.<part>`` for each (part name, data), in the given order.

        Each member is tarfile's own GNU header (``TarInfo.tobuf``, via ``member_header``),
        the data, and zero padding to the next 512-byte block: what ``TarFile.addfile``
        writes, without its 16 KiB chunked copy through a file object. Everything is staged
        in one reusable buffer, a ``SourceRange`` read straight into it by ``os.preadv``, and
        written by one ``write`` per ``_BUFFER`` bytes: large sequential writes, two system
        calls per media part and no ``bytes`` object per part.
        """
        if "." in key:
            raise ValueError(f"sample key {key!r} contains '.'; energon would split it into key and part")
        self._offsets.append(self._offset)
        added = 0
        for part, data in members:
            size = data.size if isinstance(data, SourceRange) else len(data)
            padding = -size % _BLOCK
            header = member_header(f"{key}.{part}", size)  # 512 bytes unless GNU longname blocks precede it
            self._put(header)
            if isinstance(data, SourceRange):
                self._put_range(data)
            elif size:
                self._put(data)
            if padding:
                self._put(_ZERO_VIEW[:padding])
            added += len(header) + size + padding
        self._offset += added
        self.n_samples += 1

    def _put(self, data: bytes | memoryview) -> None:
        size = len(data)
        if self._used + size > _BUFFER:
            self._flush()
            if size > _BUFFER:
                self._write_all(memoryview(data))
                return
        self._buffer[self._used : self._used + size] = data
        self._used += size

    def _put_range(self, source: SourceRange) -> None:
        """Read a source range into the buffer (flushing as it fills), or have the kernel copy it."""
        if self._kernel_copy_min is not None and source.size >= self._kernel_copy_min:
            self._flush()
            self._kernel_copy(source)
            return
        offset, left = source.offset, source.size
        while left:
            if self._used == _BUFFER:
                self._flush()
            want = min(left, _BUFFER - self._used)
            got = os.preadv(source.fd, [self._buffer[self._used : self._used + want]], offset)
            if got <= 0:
                raise _short_read(source, offset)
            self._used += got
            offset += got
            left -= got

    def _kernel_copy(self, source: SourceRange) -> None:
        """``copy_file_range`` (no user-space copy; server-side on NFS 4.2), else ``sendfile`` (any two
        files, e.g. across filesystems), else the buffer: each is dropped for this writer at its first refusal."""
        offset, left = source.offset, source.size
        while left:
            try:
                if self._copy_call == "copy_file_range":
                    got = os.copy_file_range(source.fd, self._fd, left, offset)
                else:
                    got = os.sendfile(self._fd, source.fd, offset, left)
            except OSError as exc:
                if exc.errno not in _NO_KERNEL_COPY or left != source.size:
                    raise
                if self._copy_call == "copy_file_range" and hasattr(os, "sendfile"):
                    self._copy_call = "sendfile"
                else:
                    self._kernel_copy_min = None  # no kernel copy between these files: read them
                    self._put_range(source)
                    return
                continue
            if got <= 0:
                raise _short_read(source, offset)
            offset += got
            left -= got
        self._flushed += source.size

    def _write_all(self, data: memoryview) -> None:
        """Write a piece larger than the buffer directly (the buffer is empty), resuming after short writes."""
        self._flushed += len(data)
        while data:
            data = data[os.write(self._fd, data) :]

    def _flush(self) -> None:
        """Write the buffer (resuming after short writes); start the disk on what is written."""
        if self._used:
            view = self._buffer[: self._used]
            while view:
                view = view[os.write(self._fd, view) :]
            self._flushed += self._used
            self._used = 0
        if _KICK is not None and self._flushed - self._kicked >= _WRITEBACK:
            self._start_writeback()

    def _start_writeback(self) -> None:
        """Have the kernel start writing what was flushed (asynchronously), so the disk works while we
        copy instead of all at the final fsync; ``POSIX_FADV_DONTNEED`` on dirty pages starts their
        writeback and also keeps the output from crowding the page cache. The bytes are unaffected."""
        os.posix_fadvise(self._fd, self._kicked, self._flushed - self._kicked, _KICK)
        self._kicked = self._flushed

    @property
    def bytes_written(self) -> int:
        return self._offset

    def finish(self) -> None:
        """Close the tar, write the index, rename the index then the tar.

        No fsync here: the stage fsyncs every shard once at the end (``fsync_files``),
        before it records the output complete, so the disk flushes overlap the copying.
        After a power loss mid-run, a shard whose size is not the expected one is rewritten.
        """
        end = self._offset
        # tarfile's close(): two zero blocks, then zeros up to a whole record
        trailer = 2 * _BLOCK + (-(end + 2 * _BLOCK) % tarfile.RECORDSIZE)
        self._put(bytes(trailer))
        self._flush()
        self._file.close()
        with open(self._idx_tmp, "wb") as idx:
            idx.write(struct.pack(f"{len(self._offsets) + 1}Q", *self._offsets, end))
        os.replace(self._idx_tmp, idx_path_for(self.tar_path))
        os.replace(self._tmp, self.tar_path)
        kill_point("write:shard")

    def abort(self) -> None:
        self._file.close()
        self._tmp.unlink(missing_ok=True)
        self._idx_tmp.unlink(missing_ok=True)
