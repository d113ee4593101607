"""Reproducible tar shards plus their energon ``.tar.idx``, written in one pass.

::

    pretrain-000003.tar.tmp   members appended sample by sample (GNU headers, no PAX)
    pretrain-000003.tar.idx.tmp   uint64 (native order, as energon writes it) offset of each sample's first header, then the
                                  end offset of the last member: N+1 entries (energon's format)
    -> finish(): fsync both, rename .idx, then .tar

A shard counts as done only when both final names exist, so a ``kill -9`` at any
point leaves either a complete shard or one that is rewritten from scratch; the
bytes are a pure function of the members, so the rewrite is identical.
"""

from __future__ import annotations

import os
import struct
import tarfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MemberSpec", "SourceRange", "ShardTarWriter", "member_bytes_in_tar", "idx_path_for", "shard_is_done"]

_BLOCK = tarfile.BLOCKSIZE
_BUFFER = 1 << 20  # write buffer: headers and small parts are batched into large writes
_ZEROS = bytes(_BLOCK)



@dataclass(frozen=True, slots=True, kw_only=True)
class SourceRange:
    fd: int  # open source file descriptor
    offset: int  # first byte in that file
    size: int  # bytes to copy


MemberSpec = tuple[str, "bytes | SourceRange"]  # (part name, data or where to copy it from)


def member_bytes_in_tar(size: int) -> int:
    """Bytes one member takes in a GNU tar whose name fits the header (≤ 100 chars): header + padded data."""
    return _BLOCK + (size + _BLOCK - 1) // _BLOCK * _BLOCK


def idx_path_for(tar_path: Path) -> Path:
    """``pretrain-000000.tar`` -> ``pretrain-000000.tar.idx`` (energon's ``ITAR_SUFFIX``)."""
    return tar_path.with_name(tar_path.name + ".idx")


def shard_is_done(tar_path: Path) -> bool:
    return tar_path.is_file() and idx_path_for(tar_path).is_file()


def _tarinfo(name: str, size: int) -> tarfile.TarInfo:
    """A member header that depends on nothing but name and size."""
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info


class ShardTarWriter:
    """Append samples to ``<tar>.tmp`` and its index; ``finish`` makes both visible atomically."""

    def __init__(self, tar_path: Path) -> None:
        self.tar_path = Path(tar_path)
        self._tmp = self.tar_path.with_name(self.tar_path.name + ".tmp")
        self._idx_tmp = self.tar_path.with_name(self.tar_path.name + ".idx.tmp")
        self._file = open(self._tmp, "wb", buffering=_BUFFER)  # noqa: SIM115 - closed in finish/abort
        self._offset = 0
        self._offsets: list[int] = []
        self.n_samples = 0

    def add_sample(self, key: str, members: list[MemberSpec]) -> None:
        """Write one sample: ``key.<part>`` for each (part name, data), in the given order.

        Each member is tarfile's own GNU header (``TarInfo.tobuf``), the data, and zero
        padding to the next 512-byte block: what ``TarFile.addfile`` writes. Data given
        as a ``SourceRange`` is copied file to file by the kernel (``os.copy_file_range``),
        never passing through Python.
        """
        if "." in key:
            raise ValueError(f"sample key {key!r} contains '.'; energon would split it into key and part")
        self._offsets.append(self._offset)
        for part, data in members:
            size = data.size if isinstance(data, SourceRange) else len(data)
            header = _tarinfo(f"{key}.{part}", size).tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")
            padding = -size % _BLOCK
            self._file.write(header)
            if isinstance(data, SourceRange):
                self._copy(data)
            else:
                self._file.write(data)
            self._file.write(_ZEROS[:padding])
            self._offset += len(header) + size + padding
        self.n_samples += 1

    def _copy(self, source: SourceRange) -> None:
        self._file.flush()
        fd, done = self._file.fileno(), 0
        while done < source.size:
            try:
                n = os.copy_file_range(source.fd, fd, source.size - done, source.offset + done)
            except (AttributeError, OSError):  # no kernel support / other filesystem: plain copy
                n = os.write(fd, os.pread(source.fd, min(source.size - done, _BUFFER), source.offset + done))
            if n <= 0:
                raise OSError(f"source ended after {done} of {source.size} bytes at offset {source.offset}")
            done += n

    @property
    def bytes_written(self) -> int:
        return self._offset

    def finish(self) -> None:
        """Close the tar, write the index, fsync, rename the index then the tar."""
        end = self._offset
        # tarfile's close(): two zero blocks, then zeros up to a whole record
        trailer = 2 * _BLOCK + (-(end + 2 * _BLOCK) % tarfile.RECORDSIZE)
        self._file.write(bytes(trailer))
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        with open(self._idx_tmp, "wb") as idx:
            idx.write(struct.pack(f"{len(self._offsets) + 1}Q", *self._offsets, end))
            idx.flush()
            os.fsync(idx.fileno())
        os.replace(self._idx_tmp, idx_path_for(self.tar_path))
        os.replace(self._tmp, self.tar_path)

    def abort(self) -> None:
        self._file.close()
        self._tmp.unlink(missing_ok=True)
        self._idx_tmp.unlink(missing_ok=True)
