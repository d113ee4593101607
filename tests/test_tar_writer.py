"""`output.tar_writer`: its fast headers and its gathered writes give exactly the bytes tarfile writes."""

from __future__ import annotations

import errno
import io
import os
import struct
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlmpack_offline.errors import ShardError
from vlmpack_offline.output.tar_writer import ShardTarWriter, SourceRange, idx_path_for, member_header


def _tarfile_info(name: str, size: int) -> tarfile.TarInfo:
    """The member metadata the writer promises: only name and size vary."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode, info.uid, info.gid = size, 0, 0o644, 0, 0
    info.uname = info.gname = ""
    return info


def _tobuf(name: str, size: int) -> bytes:
    return _tarfile_info(name, size).tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape")


_SIZES = [0, 1, 511, 512, 513, 123_456, 8**11 - 1, 8**11, 2**40]


def test_headers_equal_tobuf_at_the_name_and_size_field_boundaries():
    names = ["", "a", "pack_00000017.json", "x" * 99, "x" * 100, "x" * 101, "x" * 300, "pack_1.m0000.jpg"]
    for name in names:
        for size in _SIZES:
            assert member_header(name, size) == _tobuf(name, size), (name, size)


@settings(max_examples=300, deadline=None)
@given(name=st.text(min_size=0, max_size=120), size=st.integers(min_value=0, max_value=2**36))
def test_headers_equal_tobuf_for_any_name_and_size(name, size):
    assert member_header(name, size) == _tobuf(name, size)


def _tarfile_bytes(samples) -> tuple[bytes, list[int]]:
    """What tarfile writes for the samples, and each sample's offset plus the end of the last member."""
    expected, offsets = io.BytesIO(), []
    with tarfile.open(fileobj=expected, mode="w", format=tarfile.GNU_FORMAT, encoding="utf-8") as tar:
        for key, members in samples:
            offsets.append(expected.tell())
            for part, data in members:
                tar.addfile(_tarfile_info(f"{key}.{part}", len(data)), io.BytesIO(data))
        end = expected.tell()
    return expected.getvalue(), [*offsets, end]


# members read from a source file as SourceRange: empty, block-sized, one spanning several 4 MiB
# buffers, and many small ones; kernel_copy_min None reads them into the buffer, 0 and 64 KiB have
# the kernel copy all / the large ones (copy_file_range or sendfile)
@pytest.mark.parametrize("kernel_copy_min", [None, 0, 64 << 10])
def test_source_ranges_give_the_bytes_tarfile_writes(tmp_path, kernel_copy_min):
    blob = bytes(range(256)) * 40_000 + b"tail"  # ~10 MB
    source = tmp_path / "source.bin"
    source.write_bytes(blob)
    cuts = [(0, 0), (5, 512), (1000, 9 << 20), (17, 1), *((i * 997, 300 + i) for i in range(300))]
    samples = [("pack_00000000", [("json", b"{}"), *((f"m{i:04d}.bin", blob[o : o + n]) for i, (o, n) in enumerate(cuts))]),
               ("pack_00000001", [("json", b"[2]"), ("m0000.bin", blob[-4:])])]  # fmt: skip
    fd = os.open(source, os.O_RDONLY)
    try:
        writer = ShardTarWriter(tmp_path / "pretrain-000000.tar", kernel_copy_min=kernel_copy_min)
        writer.add_sample("pack_00000000", [("json", b"{}"), *(
            (f"m{i:04d}.bin", SourceRange(fd, o, n, str(source))) for i, (o, n) in enumerate(cuts))])
        writer.add_sample("pack_00000001", [("json", b"[2]"), ("m0000.bin", SourceRange(fd, len(blob) - 4, 4, "s"))])
        writer.finish()
    finally:
        os.close(fd)
    expected, offsets = _tarfile_bytes(samples)
    assert (tmp_path / "pretrain-000000.tar").read_bytes() == expected
    idx = idx_path_for(tmp_path / "pretrain-000000.tar").read_bytes()
    assert list(struct.unpack(f"{len(samples) + 1}Q", idx)) == offsets


@pytest.mark.parametrize("kernel_copy_min", [None, 0])
def test_a_source_shorter_than_its_range_is_a_shard_error_and_leaves_nothing(tmp_path, kernel_copy_min):
    source = tmp_path / "source.tar"
    source.write_bytes(b"x" * 1000)
    fd = os.open(source, os.O_RDONLY)
    writer = ShardTarWriter(tmp_path / "pretrain-000000.tar", kernel_copy_min=kernel_copy_min)
    try:
        with pytest.raises(ShardError, match=r"source\.tar: short read at byte 1000 .*rerun `vlmpack scan`"):
            writer.add_sample("pack_00000000", [("m0000.jpg", SourceRange(fd, 900, 200, str(source)))])
            writer.finish()
    finally:
        writer.abort()
        os.close(fd)
    assert list(tmp_path.iterdir()) == [source]


def test_a_shard_is_byte_identical_to_the_tar_tarfile_writes(tmp_path):
    # many small members (more pieces than one writev takes), a part over the 1 MiB gather size,
    # empty and block-sized parts, and a name that needs GNU longname blocks
    samples = [
        ("pack_00000000", [("json", b"{}"), *((f"m{i:04d}.jpg", bytes([i % 251]) * (i * 7)) for i in range(700))]),
        ("pack_00000001", [("json", b"[1]"), ("m0000.mp4", bytes(range(256)) * 5000), ("m0001.png", b"")]),
        ("pack_00000002", [("json", b"x" * 512), ("m0000." + "e" * 120, b"long name")]),
    ]
    writer = ShardTarWriter(tmp_path / "pretrain-000000.tar")
    for key, members in samples:
        writer.add_sample(key, members)
    writer.finish()

    expected, offsets = io.BytesIO(), []
    with tarfile.open(fileobj=expected, mode="w", format=tarfile.GNU_FORMAT, encoding="utf-8") as tar:
        for key, members in samples:
            offsets.append(expected.tell())
            for part, data in members:
                tar.addfile(_tarfile_info(f"{key}.{part}", len(data)), io.BytesIO(data))
        end = expected.tell()
    assert (tmp_path / "pretrain-000000.tar").read_bytes() == expected.getvalue()
    idx = idx_path_for(tmp_path / "pretrain-000000.tar").read_bytes()
    assert list(struct.unpack(f"{len(samples) + 1}Q", idx)) == [*offsets, end]
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("refused", [("copy_file_range",), ("copy_file_range", "sendfile")])
def test_kernel_copies_refused_between_two_files_fall_back_to_the_same_bytes(tmp_path, monkeypatch, refused):
    """copy_file_range refuses files on two filesystems (EXDEV): sendfile, then plain reads, take over."""
    calls: list[str] = []

    def refuse(name):
        def call(*args, **kwargs):
            calls.append(name)
            raise OSError(errno.EXDEV, "Invalid cross-device link")

        return call

    for name in refused:
        monkeypatch.setattr(os, name, refuse(name))
    blob = bytes(range(256)) * 3000
    source = tmp_path / "source.bin"
    source.write_bytes(blob)
    fd = os.open(source, os.O_RDONLY)
    try:
        writer = ShardTarWriter(tmp_path / "pretrain-000000.tar", kernel_copy_min=0)
        writer.add_sample("pack_00000000", [("m0000.bin", SourceRange(fd, 10, 700_000, str(source))),
                                            ("m0001.bin", SourceRange(fd, 0, 5000, str(source)))])  # fmt: skip
        writer.finish()
    finally:
        os.close(fd)
    expected, _ = _tarfile_bytes([("pack_00000000", [("m0000.bin", blob[10:700_010]), ("m0001.bin", blob[:5000])])])
    assert (tmp_path / "pretrain-000000.tar").read_bytes() == expected
    assert calls == list(refused)  # each refusal is tried once, not per member
