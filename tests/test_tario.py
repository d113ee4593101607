"""tario reads members with exact data offsets, groups them by the webdataset key rule,
and never lets a bad name or a cut shard leak into the samples before it."""

from __future__ import annotations

import io
import shutil
import tarfile

import pytest

from vlmpack_offline.reasons import Reason
from vlmpack_offline.synthetic.shards import SyntheticSample, truncate, write_shard
from vlmpack_offline.tario import (
    iter_members,
    iter_samples,
    read_range,
    split_key,
)


@pytest.mark.parametrize(
    ("name", "key", "part"),
    [
        ("sub/dir/k1.img0.jpg", "sub/dir/k1", "img0.jpg"),
        ("k1.json", "k1", "json"),
        ("a.b/k2.tar.gz", "a.b/k2", "tar.gz"),  # dots in folders do not count
        ("k3", "k3", ""),
    ],
)
def test_key_is_path_up_to_first_dot_of_last_component(name, key, part):
    assert split_key(name) == (key, part)


def _samples(n: int, *, long_names: bool = False) -> list[SyntheticSample]:
    folder = "d" * 60 + "/" + "e" * 60 + "/" if long_names else ""
    return [
        SyntheticSample(key=f"{folder}k{i}", json={"i": i}, media={"img0.jpg": bytes([i]) * (300 + 97 * i)})
        for i in range(n)
    ]


@pytest.mark.parametrize("pax", [False, True], ids=["gnu", "pax"])
@pytest.mark.parametrize("long_names", [False, True], ids=["short", "over100chars"])
def test_offsets_locate_exact_member_bytes(tmp_path, pax, long_names):
    samples = _samples(3, long_names=long_names)
    path = write_shard(tmp_path / "s.tar", samples, pax=pax)
    members = list(iter_members(path))
    assert [m.name for m in members] == [f"{s.key}.{p}" for s in samples for p in ("json", "img0.jpg")]
    with tarfile.open(path) as tar, open(path, "rb") as handle:
        for member in members:
            assert read_range(handle, member.offset, member.size) == tar.extractfile(member.name).read()
    grouped = list(iter_samples(path))
    assert [s.key for s in grouped] == [s.key for s in samples]
    assert all(s.problem is None and s.part("img0.jpg") is not None for s in grouped)


def test_directories_are_skipped_and_symlinks_flagged_not_followed(tmp_path):
    path = tmp_path / "s.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, kind in [("k0.json", tarfile.REGTYPE), ("sub", tarfile.DIRTYPE), ("k0.link.jpg", tarfile.SYMTYPE),
                           ("k1.json", tarfile.REGTYPE)]:
            info = tarfile.TarInfo(name)
            info.type = kind
            data = b"{}" if kind == tarfile.REGTYPE else b""
            info.size = len(data)
            if kind == tarfile.SYMTYPE:
                info.linkname = "/etc/passwd"
            tar.addfile(info, io.BytesIO(data))
    members = list(iter_members(path))
    assert [(m.name, m.problem) for m in members] == [
        ("k0.json", None), ("k0.link.jpg", Reason.UNSUPPORTED_MEMBER), ("k1.json", None)]
    assert members[1].size == 0 and "symbolic link to '/etc/passwd'" in members[1].detail


def test_bad_member_names_are_flagged_not_followed(tmp_path):
    path = write_shard(tmp_path / "s.tar", _samples(1), extra_members=[("../evil.json", b"{}"), ("/abs/x.json", b"{}")])
    samples = {s.key: s for s in iter_samples(path)}
    assert samples["k0"].problem is None
    for key in ("../evil", "/abs/x"):
        assert samples[key].problem == Reason.BAD_MEMBER_NAME
        assert key in samples[key].error


def _cut_copy(tmp_path, source, at: int):
    target = tmp_path / f"cut-{at}.tar"
    shutil.copyfile(source, target)
    truncate(target, at)
    return target


@pytest.mark.parametrize(
    "where",
    ["inside_data", "inside_header_after_name", "at_member_boundary"],
)
def test_truncated_shard_keeps_samples_before_the_cut(tmp_path, where):
    path = write_shard(tmp_path / "s.tar", _samples(4))
    members = list(iter_members(path))
    cut_member = members[5]  # k2.img0.jpg: k0 and k1 are complete before it
    header = cut_member.offset - tarfile.BLOCKSIZE
    at = {
        "inside_data": cut_member.offset + cut_member.size // 2,
        "inside_header_after_name": header + 200,
        "at_member_boundary": header,
    }[where]
    samples = list(iter_samples(_cut_copy(tmp_path, path, at)))
    assert [(s.key, s.problem) for s in samples] == [("k0", None), ("k1", None), ("k2", Reason.TRUNCATED_SHARD)]
    assert samples[-1].error


def test_header_cut_before_its_name_blames_the_previous_sample(tmp_path):
    """The cut header's name is unreadable, so the sample it may belong to is dropped too (never kept incomplete)."""
    path = write_shard(tmp_path / "s.tar", _samples(4))
    first_of_k2 = list(iter_members(path))[4]
    samples = list(iter_samples(_cut_copy(tmp_path, path, first_of_k2.offset - tarfile.BLOCKSIZE + 50)))
    assert [(s.key, s.problem) for s in samples] == [("k0", None), ("k1", Reason.TRUNCATED_SHARD)]


def test_complete_shard_has_no_problem(tmp_path):
    path = write_shard(tmp_path / "s.tar", _samples(2), pax=True)
    assert all(s.problem is None for s in iter_samples(path))
