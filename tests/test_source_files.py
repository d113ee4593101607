"""``SourceFiles`` hands the tar writer byte ranges of open files: a range's file stays open until settled."""

from __future__ import annotations

import os
import tarfile

from vlmpack_offline.output.pack_builder import SourceFiles
from vlmpack_offline.output.tar_writer import ShardTarWriter, SourceRange


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_ranges_of_more_files_than_the_lru_holds_stay_valid_until_settled(tmp_path):
    """A pack with media from 6 shards and an LRU of 2: no descriptor is closed (and reused by the
    next file opened) before the writer copied its range, so the bytes are each file's own."""
    contents = {f"s{i}.tar": bytes([65 + i]) * (1000 + 10 * i) for i in range(6)}
    for name, data in contents.items():
        (tmp_path / name).write_bytes(data)
    files = SourceFiles({name: str(tmp_path / name) for name in contents}, max_open=2)
    before = _open_fds()
    members = [(f"m{i:04d}.bin", files.range(name, 5, 900)) for i, name in enumerate(contents)]
    assert all(isinstance(data, SourceRange) for _, data in members)
    writer = ShardTarWriter(tmp_path / "pretrain-000000.tar", kernel_copy_min=None)
    writer.add_sample("pack_00000000", members)
    writer.finish()
    files.settle()
    assert _open_fds() - before <= 2  # back within the LRU's size once the ranges are consumed
    with tarfile.open(tmp_path / "pretrain-000000.tar") as tar:
        got = [tar.extractfile(m).read() for m in tar.getmembers()]
    assert got == [data[5:905] for data in contents.values()]
    files.close()
    assert _open_fds() == before


def test_reads_close_evicted_files_at_once(tmp_path):
    for i in range(5):
        (tmp_path / f"s{i}.tar").write_bytes(bytes([i]) * 100)
    files = SourceFiles({f"s{i}.tar": str(tmp_path / f"s{i}.tar") for i in range(5)}, max_open=2)
    before = _open_fds()
    assert [files.read(f"s{i}.tar", 10, 3) for i in range(5)] == [bytes([i]) * 3 for i in range(5)]
    assert _open_fds() - before == 2
    files.close()
