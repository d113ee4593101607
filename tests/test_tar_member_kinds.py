"""Every kind of tar member ends in a sample with a manifest row or in a counted, reasoned drop.

Real tars written by Python's ``tarfile`` (GNU and PAX headers) and by GNU tar where it is installed,
scanned by the real scan stage: hard links read as the file they name, symbolic links, fifos and
devices dropped as ``unsupported_member``, a name twice in one sample as ``duplicate_member``,
directory entries skipped (they hold no data), and input samples = rows, always.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile

import pytest

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.stages import scan

ANSWER = {"role": "assistant", "content": "Fine."}


def _json(key: str) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": f"{key}?"}, ANSWER]}).encode()


def _rows(tmp_path, processor_dir) -> tuple[dict[str, tuple[str, str]], list[str]]:
    config = config_from_dict({
        "data": {"wds_dir": str(tmp_path / "src"), "work_dir": str(tmp_path / "work"),
                 "packed_wds_dir": str(tmp_path / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
        "scan": {"max_drop_ratio": 1.0},
    }, source="test")  # fmt: skip
    result = scan.run(config)
    with Manifest(manifest_path(config.work_dir)) as manifest:
        rows = {row.key: (row.status, row.error) for row in manifest.iter_samples()}
    return rows, result.summary


def _entry(tar: tarfile.TarFile, name: str, data: bytes = b"", **fields) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    for field, value in fields.items():
        setattr(info, field, value)
    tar.addfile(info, io.BytesIO(data) if info.isreg() else None)


@pytest.mark.parametrize("fmt", [tarfile.GNU_FORMAT, tarfile.PAX_FORMAT], ids=["gnu", "pax"])
def test_each_member_kind_from_python_tarfile(tmp_path, qwen25_processor_dir, fmt):
    (tmp_path / "src").mkdir()
    with tarfile.open(tmp_path / "src" / "part-000.tar", "w", format=fmt) as tar:
        _entry(tar, "folder/", type=tarfile.DIRTYPE)
        _entry(tar, "folder/plain.json", _json("plain"))
        _entry(tar, "folder/linked.json", type=tarfile.LNKTYPE, linkname="folder/plain.json")
        _entry(tar, "symbolic.json", type=tarfile.SYMTYPE, linkname="folder/plain.json")
        _entry(tar, "twice.json", _json("twice"))
        _entry(tar, "twice.json", _json("twice again"))
        _entry(tar, "pipe.json", type=tarfile.FIFOTYPE)
        _entry(tar, "device.json", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
        _entry(tar, "dangling.json", type=tarfile.LNKTYPE, linkname="not/in/this.json")
        _entry(tar, "last.json", _json("last"))
    rows, summary = _rows(tmp_path, qwen25_processor_dir)
    status = {key: value[0] for key, value in rows.items()}
    assert status == {
        "folder/plain": "ok", "folder/linked": "ok",  # a hard link reads the bytes of the file it names
        "symbolic": "unsupported_member", "twice": "duplicate_member", "pipe": "unsupported_member",
        "device": "unsupported_member", "dangling": "unsupported_member", "last": "ok",
    }  # fmt: skip
    assert "symbolic link to 'folder/plain.json'" in rows["symbolic"][1]
    assert "twice.json appears 2 times" in rows["twice"][1]
    assert "not an earlier regular file" in rows["dangling"][1]
    assert "samples: 8 (3 ok, 5 dropped, of which 0 could not be read at all)" in summary  # input = rows


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar is not installed")
def test_each_member_kind_from_gnu_tar(tmp_path, qwen25_processor_dir):
    files = tmp_path / "files"
    (files / "sub").mkdir(parents=True)
    (files / "sub" / "a.json").write_bytes(_json("a"))
    os.link(files / "sub" / "a.json", files / "sub" / "b.json")  # GNU tar stores the second name as a hard link
    os.symlink("a.json", files / "sub" / "c.json")
    os.mkfifo(files / "sub" / "d.json")
    (files / "sub" / "e.json").write_bytes(_json("e"))
    (tmp_path / "src").mkdir()
    subprocess.run(["tar", "--format=gnu", "--sort=name", "-cf", str(tmp_path / "src" / "part-000.tar"), "-C",
                    str(files), "sub"], check=True)
    with tarfile.open(tmp_path / "src" / "part-000.tar") as tar:
        kinds = {info.name: info.type for info in tar}
    assert kinds["sub/b.json"] == tarfile.LNKTYPE and kinds["sub"] == tarfile.DIRTYPE  # the kinds under test
    rows, _ = _rows(tmp_path, qwen25_processor_dir)
    assert {key: value[0] for key, value in rows.items()} == {
        "sub/a": "ok", "sub/b": "ok", "sub/c": "unsupported_member", "sub/d": "unsupported_member", "sub/e": "ok",
    }  # fmt: skip


def test_names_that_cannot_be_decoded_are_reasoned_drops_each_with_its_row(tmp_path, qwen25_processor_dir):
    (tmp_path / "src").mkdir()
    with tarfile.open(tmp_path / "src" / "part-000.tar", "w", format=tarfile.GNU_FORMAT,
                      encoding="utf-8", errors="surrogateescape") as tar:
        _entry(tar, "ok.json", _json("ok"))
        for raw in (b"bad\xff.json", b"bad\xfe.json"):  # two names that decode to the same text with U+FFFD
            _entry(tar, raw.decode("utf-8", "surrogateescape"), _json("bad"))
    rows, _ = _rows(tmp_path, qwen25_processor_dir)
    assert {key: status for key, (status, _) in rows.items()} == {
        "ok": "ok", "bad\\xff": "bad_member_name", "bad\\xfe": "bad_member_name"}


def test_chained_hard_links_read_the_file_and_sparse_members_are_refused(tmp_path, qwen25_processor_dir):
    (tmp_path / "src").mkdir()
    with tarfile.open(tmp_path / "src" / "part-000.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        _entry(tar, "a.json", _json("a"))
        _entry(tar, "b.json", type=tarfile.LNKTYPE, linkname="a.json")
        _entry(tar, "c.json", type=tarfile.LNKTYPE, linkname="b.json")  # a link to a link: still a.json's bytes
        _entry(tar, "label", type=b"V")  # a GNU volume label (tar --label): no data, no sample
        _entry(tar, "z.json", _json("z"))
    rows, _ = _rows(tmp_path, qwen25_processor_dir)
    assert {key: status for key, (status, _) in rows.items()} == {"a": "ok", "b": "ok", "c": "ok", "z": "ok"}


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar is not installed")
def test_a_sparse_member_is_refused_not_read_past_its_end(tmp_path, qwen25_processor_dir):
    files = tmp_path / "files"
    files.mkdir()
    (files / "s1.json").write_bytes(_json("s1"))
    with open(files / "s1.jpg", "wb") as sparse:  # mostly a hole: tar -S stores only its data blocks
        sparse.write(b"\xff\xd8start")
        sparse.seek(1 << 20)
        sparse.write(b"end\xff\xd9")
    (files / "s2.json").write_bytes(_json("s2"))
    (tmp_path / "src").mkdir()
    subprocess.run(["tar", "--format=gnu", "-S", "-cf", str(tmp_path / "src" / "part-000.tar"), "-C", str(files),
                    "s1.json", "s1.jpg", "s2.json"], check=True)
    rows, _ = _rows(tmp_path, qwen25_processor_dir)
    assert {key: status for key, (status, _) in rows.items()} == {"s1": "unsupported_member", "s2": "ok"}
    assert "sparse file" in rows["s1"][1]
