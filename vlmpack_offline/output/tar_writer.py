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

import io
import os
import struct
import tarfile
from pathlib import Path

__all__ = ["MemberSpec", "ShardTarWriter", "member_bytes_in_tar", "idx_path_for", "shard_is_done"]

_BLOCK = tarfile.BLOCKSIZE
_COPY_BUFFER = 4 << 20  # bytes per copy chunk: media are copied in few large writes

MemberSpec = tuple[str, bytes]  # (member name, data)


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
        self._file = open(self._tmp, "wb")  # noqa: SIM115 - closed in finish/abort
        self._tar = tarfile.TarFile(
            fileobj=self._file, mode="w", format=tarfile.GNU_FORMAT, copybufsize=_COPY_BUFFER
        )
        self._offsets: list[int] = []
        self.n_samples = 0

    def add_sample(self, key: str, members: list[MemberSpec]) -> None:
        """Write one sample: ``key.<part>`` for each (part name, data), in the given order."""
        if "." in key:
            raise ValueError(f"sample key {key!r} contains '.'; energon would split it into key and part")
        self._offsets.append(self._tar.offset)
        for part, data in members:
            self._tar.addfile(_tarinfo(f"{key}.{part}", len(data)), io.BytesIO(data))
        self.n_samples += 1

    @property
    def bytes_written(self) -> int:
        return self._tar.offset

    def finish(self) -> None:
        """Close the tar, write the index, fsync, rename the index then the tar."""
        end = self._tar.offset
        self._tar.close()
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
