"""Reproducible tar shards plus their energon ``.tar.idx``, written in one pass.

::

    pretrain-000003.tar.tmp   members appended sample by sample (GNU headers, no PAX)
    pretrain-000003.tar.idx.tmp   uint64 (native order, as energon writes it) offset of each sample's first header, then the
                                  end offset of the last member: N+1 entries (energon's format)
    -> finish(): rename .idx, then .tar   (fsync_files() flushes all shards at the end of the run)

A shard counts as done only when both final names exist with their expected sizes,
so a ``kill -9`` (or a power loss) at any point leaves either a complete shard or one
that is rewritten from scratch; the bytes are a pure function of the members, so the
rewrite is identical.
"""

from __future__ import annotations

import os
import struct
import tarfile
from pathlib import Path

__all__ = [
    "MemberSpec",
    "reproducible_tarinfo",
    "ShardTarWriter",
    "member_header",
    "member_bytes_in_tar",
    "idx_path_for",
    "shard_is_done",
    "fsync_files",
]

_BLOCK = tarfile.BLOCKSIZE
_BUFFER = 1 << 20  # bytes gathered per writev: headers and small parts are batched into large writes
_ZERO_VIEW = memoryview(bytes(_BLOCK))
_IOV_MAX = 1024  # most pieces one writev takes (IOV_MAX on Linux and macOS)


MemberSpec = tuple[str, bytes]  # (part name, data)


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

    def __init__(self, tar_path: Path) -> None:
        self.tar_path = Path(tar_path)
        self._tmp = self.tar_path.with_name(self.tar_path.name + ".tmp")
        self._idx_tmp = self.tar_path.with_name(self.tar_path.name + ".idx.tmp")
        self._file = open(self._tmp, "wb", buffering=0)  # noqa: SIM115 - closed in finish/abort
        self._offset = 0
        self._offsets: list[int] = []
        self._pending: list[bytes | memoryview] = []  # headers, data and padding not yet written
        self._pending_bytes = 0
        self.n_samples = 0

    def add_sample(self, key: str, members: list[MemberSpec]) -> None:
        """Write one sample: ``key.<part>`` for each (part name, data), in the given order.

        Each member is tarfile's own GNU header (``TarInfo.tobuf``, via ``member_header``),
        the data, and zero padding to the next 512-byte block: what ``TarFile.addfile``
        writes, without its 16 KiB chunked copy through a file object. The pieces are
        gathered into ``os.writev`` calls of about 1 MiB, so media bytes are never copied
        into a buffer. (``os.copy_file_range`` was measured slower than pread + write on ext4.)
        """
        if "." in key:
            raise ValueError(f"sample key {key!r} contains '.'; energon would split it into key and part")
        self._offsets.append(self._offset)
        pending = self._pending
        added = 0
        for part, data in members:
            size = len(data)
            padding = -size % _BLOCK
            header = member_header(f"{key}.{part}", size)  # 512 bytes unless GNU longname blocks precede it
            pending.append(header)
            if size:
                pending.append(data)
            if padding:
                pending.append(_ZERO_VIEW[:padding])
            added += len(header) + size + padding
        self._offset += added
        self._pending_bytes += added
        self.n_samples += 1
        if self._pending_bytes >= _BUFFER or len(pending) >= _IOV_MAX:
            self._flush()

    def _flush(self) -> None:
        """``writev`` the pending pieces, at most ``_IOV_MAX`` at a time, resuming after short writes."""
        pending, fd = self._pending, self._file.fileno()
        start = 0
        while start < len(pending):
            batch = pending[start : start + _IOV_MAX]
            written = os.writev(fd, batch)
            for piece in batch:
                if written < len(piece):
                    pending[start] = memoryview(piece)[written:]
                    break
                written -= len(piece)
                start += 1
        pending.clear()
        self._pending_bytes = 0

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
        self._pending.append(bytes(trailer))
        self._flush()
        self._file.close()
        with open(self._idx_tmp, "wb") as idx:
            idx.write(struct.pack(f"{len(self._offsets) + 1}Q", *self._offsets, end))
        os.replace(self._idx_tmp, idx_path_for(self.tar_path))
        os.replace(self._tmp, self.tar_path)

    def abort(self) -> None:
        self._file.close()
        self._tmp.unlink(missing_ok=True)
        self._idx_tmp.unlink(missing_ok=True)
