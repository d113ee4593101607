"""The fast tar header reader gives the members stdlib ``tarfile`` gives, on every tar and every damage to it.

The oracle is ``iter_members(path, reader="tarfile")``: stdlib ``tarfile.TarFile`` walking the same file
(the reader scans used before the fast one). Every tar here is real: written by Python's ``tarfile`` in its
three formats and by GNU tar where it is installed (gnu, oldgnu, posix, ustar, v7; sparse files in every
sparse version), then damaged: header bytes flipped, header fields rewritten under a valid checksum, the
file cut at many lengths, a size pointing past the end, zero blocks and garbage where they do not belong.

Equal means the same ``TarMember`` sequence (name, offset, size, problem, detail), hence the same samples.
Where tarfile itself raises or walks back over the same headers forever (a hostile header), the fast
reader must instead stop or go on with a reasoned problem member: never a crash, a hang or a lost sample.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import signal
import subprocess
import tarfile
from contextlib import contextmanager
from itertools import islice
from pathlib import Path

import fsspec
import pytest

from vlmpack_offline.reasons import Reason
from vlmpack_offline.synthetic.shards import SyntheticSample, write_shard
from vlmpack_offline.tario import TarMember, group_samples, iter_members

HAS_GNU_TAR = shutil.which("tar") is not None and b"GNU tar" in subprocess.run(
    ["tar", "--version"], capture_output=True).stdout  # fmt: skip
_REASONED_STOPS = {Reason.DAMAGED_HEADER, Reason.TRUNCATED_SHARD, Reason.NOT_A_TAR}


# ---------------------------------------------------------------- tars of every member kind


def _add(tar: tarfile.TarFile, name: str, data: bytes = b"", **fields) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), 0
    for field, value in fields.items():
        setattr(info, field, value)
    tar.addfile(info, io.BytesIO(data) if info.isreg() else None)


def _every_kind(tar: tarfile.TarFile, *, long_names: bool) -> None:
    """Each member kind a shard may hold, with and without a sample around it."""
    _add(tar, "folder/", type=tarfile.DIRTYPE)
    _add(tar, "folder/k0.json", b'{"a": 1}')
    _add(tar, "folder/k0.img0.jpg", bytes(range(256)) * 3)
    _add(tar, "folder/k0.hard.jpg", type=tarfile.LNKTYPE, linkname="folder/k0.img0.jpg")
    _add(tar, "k1.json", b"{}")
    _add(tar, "k1.sym.jpg", type=tarfile.SYMTYPE, linkname="folder/k0.img0.jpg")
    _add(tar, "k2.fifo", type=tarfile.FIFOTYPE)
    _add(tar, "k3.chr", type=tarfile.CHRTYPE, devmajor=1, devminor=3)
    _add(tar, "k4.blk", type=tarfile.BLKTYPE, devmajor=8, devminor=1)
    _add(tar, "k5.json", b"")  # an empty member
    _add(tar, "no_dot_name", b"data without a part name")
    _add(tar, "k6.dangling.jpg", type=tarfile.LNKTYPE, linkname="not/in/this.tar")
    _add(tar, "k7.cont", b"contiguous", type=tarfile.CONTTYPE)
    _add(tar, "k8.odd", b"a type tarfile does not know", type=b"Z")
    _add(tar, "ünï/cödé.json", "{\"ü\": 1}".encode())
    _add(tar, "k9.json", b"x" * 1000)
    _add(tar, "k9.json", b"y" * 10)  # a part twice
    if long_names:
        deep = "/".join(["d" * 40] * 4)  # 163 characters: GNU long name / ustar prefix / PAX path
        _add(tar, f"{deep}/k10.json", b"{}")
        _add(tar, f"{'e' * 120}/{'f' * 140}.json", b"{}")  # over 255 characters
        _add(tar, "k11.link.json", type=tarfile.LNKTYPE, linkname=f"{deep}/k10.json")  # a long link target
        _add(tar, "k12.sym.json", type=tarfile.SYMTYPE, linkname="s" * 150)
    _add(tar, "last.json", b"[]")


def _python_tars(folder: Path) -> dict[str, Path]:
    tars = {}
    for fmt, name in ((tarfile.GNU_FORMAT, "gnu"), (tarfile.PAX_FORMAT, "pax"), (tarfile.USTAR_FORMAT, "ustar")):
        path = tars[f"python-{name}"] = folder / f"python-{name}.tar"
        with tarfile.open(path, "w", format=fmt) as tar:
            _every_kind(tar, long_names=fmt != tarfile.USTAR_FORMAT)
    path = tars["python-gnu-volume-label"] = folder / "label.tar"
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        _add(tar, "label", type=b"V")  # tar --label: no data, no sample
        _add(tar, "k0.json", b"{}")
        _add(tar, "old-style-dir/", type=tarfile.AREGTYPE)  # a V7 directory: a regular type, a trailing slash
        _add(tar, "k1.json", b"{}")
    path = tars["pax-records"] = folder / "pax-records.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, pax_headers={"comment": "global"}) as tar:
        _add(tar, "k0.json", b"{}", pax_headers={"path": "renamed/k0.json", "mtime": "1.5"})
        _add(tar, "k1.json", b"{}", pax_headers={"size": "not a number"})
        _add(tar, "k2.dir", type=tarfile.DIRTYPE, pax_headers={"path": "k2.dir///"})
        _add(tar, "k3.lnk", type=tarfile.LNKTYPE, linkname="x", pax_headers={"linkpath": "renamed/k0.json"})
        _add(tar, "k4.json", b"{}", pax_headers={"GNU.sparse.map": "0,2", "GNU.sparse.name": "k4.sparse"})
        _add(tar, "k5.json", b"{}", pax_headers={"GNU.sparse.size": "2", "GNU.sparse.realsize": "9"})
        _add(tar, "k6.json", b"{}")
        _add(tar, "k7.json", b"{}", pax_headers={"size": str(10 * 2**30)})  # 10 GiB: past the end of the file
    path = tars["pax-global-path"] = folder / "pax-global.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, pax_headers={"path": "same/name.json"}) as tar:
        _add(tar, "a.json", b"{}")  # every member gets the global path
        _add(tar, "b.json", b"{}")
    path = tars["pax-binary-names"] = folder / "pax-binary.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, encoding="latin-1") as tar:
        _add(tar, "caf\xe9.json", b"{}")  # written as latin-1 bytes under hdrcharset=BINARY
        _add(tar, "ok.json", b"{}")
    tars["webdataset-gnu"] = _webdataset(folder / "wds-gnu.tar", pax=False)
    tars["webdataset-pax"] = _webdataset(folder / "wds-pax.tar", pax=True)
    return tars


def _webdataset(path: Path, *, pax: bool) -> Path:
    """A webdataset shard past one read window: small members, then ones larger than a window."""
    rng = random.Random(7)
    samples = [SyntheticSample(key=f"{i // 50:03d}/sample{i:06d}", json={"i": i},
                               media={"img0.jpg": rng.randbytes(rng.randrange(0, 6000))}) for i in range(300)]
    samples += [SyntheticSample(key=f"big{i}", json={"i": i}, media={"mp4": bytes(size)})
                for i, size in enumerate((1_500_000, 3_000_001, 100))]  # fmt: skip
    return write_shard(path, samples, pax=pax)


def _gnu_tars(folder: Path) -> dict[str, Path]:
    if not HAS_GNU_TAR:
        return {}
    files = folder / "files"
    (files / "sub").mkdir(parents=True)
    (files / "sub" / "a.json").write_bytes(b'{"a": 1}')
    os.link(files / "sub" / "a.json", files / "sub" / "b.json")
    os.symlink("a.json", files / "sub" / "c.json")
    os.mkfifo(files / "sub" / "d.json")
    (files / "sub" / "ünïcödé.json").write_bytes(b"{}")
    (files / "sub" / ("x" * 120 + ".json")).write_bytes(b"{}")
    (files / "sub" / "empty.json").write_bytes(b"")
    with open(files / "sub" / "sparse.jpg", "wb") as sparse:  # mostly a hole: -S stores only the data
        sparse.write(b"\xff\xd8start")
        sparse.seek(1 << 16)
        sparse.write(b"end\xff\xd9")
    (files / "sub" / "z.json").write_bytes(b"[]")
    runs = {
        "gnu": ["--format=gnu"], "oldgnu": ["--format=oldgnu"], "posix": ["--format=posix"],
        "ustar": ["--format=ustar"], "v7": ["--format=v7"], "gnu-sparse": ["--format=gnu", "-S"],
        "posix-sparse-0.0": ["--format=posix", "-S", "--sparse-version=0.0"],
        "posix-sparse-0.1": ["--format=posix", "-S", "--sparse-version=0.1"],
        "posix-sparse-1.0": ["--format=posix", "-S", "--sparse-version=1.0"],
    }  # fmt: skip
    tars = {}
    for name, flags in runs.items():
        path = folder / f"gnutar-{name}.tar"
        result = subprocess.run(["tar", *flags, "--sort=name", "--mtime=@0", "-cf", str(path), "-C", str(files),
                                 "sub"], capture_output=True)  # fmt: skip
        if path.exists() and path.stat().st_size:  # ustar and v7 refuse some names and still write the rest
            tars[f"gnutar-{name}"] = path
        assert result.returncode in (0, 2), result.stderr
    return tars


@pytest.fixture(scope="module")
def tars(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tars")
    return {**_python_tars(folder), **_gnu_tars(folder)}


# ---------------------------------------------------------------- the comparison


class _OracleLoops(Exception):
    """tarfile yielded more members than the file has blocks, or did not finish: it walks in a circle."""


@contextmanager
def _oracle_deadline(seconds: float):
    """tarfile can loop without yielding (a member stepping back over headers): stop it, it is the oracle."""

    def fire(signum, frame):
        raise _OracleLoops("no end after the deadline")

    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _most_members(path: Path) -> int:
    return path.stat().st_size // tarfile.BLOCKSIZE + 2  # every member takes a header block


def _oracle(path: Path) -> list[TarMember] | Exception:
    limit = _most_members(path)
    try:
        with _oracle_deadline(20):
            members = list(islice(iter_members(path, reader="tarfile"), limit + 1))
    except Exception as error:  # noqa: BLE001 - tarfile's own crash on a hostile header is the finding
        return error
    return _OracleLoops(f"more than {limit} members") if len(members) > limit else members


def _fast(path: str | Path, limit: int) -> list[TarMember]:
    members = list(islice(iter_members(path, reader="fast"), limit + 1))
    assert len(members) <= limit, f"the fast reader yields more members than {path} has blocks"
    return members


def _assert_same(path: Path, what: str) -> None:
    fast, oracle = _fast(path, _most_members(path)), _oracle(path)
    if isinstance(oracle, list) and any(m.size < 0 for m in oracle):
        oracle = ValueError("tarfile yields a member of negative size")  # no reader can read it
    if isinstance(oracle, Exception):  # a hostile header: tarfile raised or looped; fast must give a reason
        assert any(m.problem in _REASONED_STOPS for m in fast), f"{what}: tarfile {oracle!r}, fast {fast}"
        return
    assert fast == oracle, what
    assert list(group_samples(fast)) == list(group_samples(oracle)), what


def _with_checksum(block: bytearray) -> bytearray:
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return block


def _header_offsets(path: Path) -> list[int]:
    """Where the headers of the first members and of the last one start (extension headers included)."""
    with tarfile.open(path) as tar:
        infos = tar.getmembers()
    chosen = infos[:3] + infos[-1:]
    return sorted({at for info in chosen for at in (info.offset, info.offset_data - tarfile.BLOCKSIZE)})


_FLIP_AT = (0, 1, 50, 99, 100, 106, 124, 130, 134, 135, 136, 148, 150, 154, 155, 156, 157, 257, 263, 265,
            329, 345, 386, 482, 483, 500, 511)  # name, mode, size, mtime, chksum, type, link, magic, prefix, sparse
_FLIP_RAW = (0, 124, 148, 155, 156, 345)
_FIELDS = {  # (start, value) rewritten under a valid checksum: each a way a header can lie
    "size past the end": (124, b"77777777777\0"),
    "size 10 GiB base-256": (124, b"\x80" + (10 * 2**30).to_bytes(11, "big")),
    "size -1 base-256": (124, b"\xff" * 12),
    "size -512 base-256": (124, b"\xff" * 10 + (-512 % 65536).to_bytes(2, "big")),
    "size -1024 base-256": (124, b"\xff" * 10 + (-1024 % 65536).to_bytes(2, "big")),
    "size not octal": (124, b"12345678901\0"),
    "size with spaces": (124, b"  1234 \0    "),
    "size empty": (124, b"\0" * 12),
    "mode not a number": (100, b"rw-r--r"),
    "uid base-256": (108, b"\x80\0\0\0\0\0\x10\0"),
    "devmajor garbage": (329, b"zz\0"),
    "name absolute": (0, b"/etc/k.json\0"),
    "name dot-dot": (0, b"../k.json\0"),
    "name not utf-8": (0, b"k\xff\xfe.json\0"),
    "name 100 chars": (0, b"n" * 100),
    "name empty": (0, b"\0" * 100),
    "prefix on any header": (345, b"some/prefix\0"),
    "old sparse extended": (482, b"\x01"),
}
_TYPES = b"0\x0012345670LKSxgXVZD"


def _variants(path: Path):
    """(what, bytes) of damaged copies of a tar: flips, lying fields, cuts, zero blocks, trailing garbage."""
    raw = path.read_bytes()
    blocks = len(raw) // tarfile.BLOCKSIZE
    for at in _header_offsets(path):
        for pos in _FLIP_AT:
            flipped = bytearray(raw)
            flipped[at + pos] ^= 0xFF
            if pos in _FLIP_RAW:  # a checksum error, read the same way wherever it is: a few suffice
                yield f"byte {at + pos} flipped", bytes(flipped)
            if not 148 <= pos < 156:
                block = _with_checksum(bytearray(flipped[at : at + 512]))
                yield f"byte {at + pos} flipped, checksum valid", raw[:at] + bytes(block) + raw[at + 512 :]
        for what, (start, value) in _FIELDS.items():
            block = bytearray(raw[at : at + 512])
            block[start : start + len(value)] = value
            yield f"header at {at}: {what}", raw[:at] + bytes(_with_checksum(block)) + raw[at + 512 :]
        for kind in _TYPES:
            block = bytearray(raw[at : at + 512])
            block[156] = kind
            yield f"header at {at}: type {bytes([kind])!r}", raw[:at] + bytes(_with_checksum(block)) + raw[at + 512 :]
        for kind in b"ZVS7":  # data-carrying kinds tarfile does not check against the file size
            block = bytearray(raw[at : at + 512])
            block[124:136], block[156] = b"\x80" + (2**88 - 1).to_bytes(11, "big"), kind
            yield f"header at {at}: type {bytes([kind])!r} of 2**88 bytes", raw[:at] + bytes(_with_checksum(block)) + raw[
                at + 512 :]  # fmt: skip
        block = bytearray(raw[at : at + 512])
        signed = sum(b - 256 if b > 127 and not 148 <= i < 156 else b for i, b in enumerate(block)) - sum(
            block[148:156]) + 256  # fmt: skip
        block[148:156] = b"%06o\0 " % (signed % 8**6)  # a Sun/NeXT signed-char checksum
        yield f"header at {at}: signed checksum", raw[:at] + bytes(block) + raw[at + 512 :]
        yield f"zero block at {at}", raw[:at] + bytes(512) + raw[at:]
    rng = random.Random(len(raw))
    cut_blocks = sorted(set(range(min(blocks, 48))) | set(range(max(blocks - 8, 0), blocks + 1))
                        | set(rng.sample(range(blocks), min(blocks, 24))))  # fmt: skip
    for block_at in cut_blocks:
        for within in (0, 1, 100, 156, 300, 511):
            if (cut := block_at * 512 + within) < len(raw):
                yield f"cut at {cut}", raw[:cut]
    end = len(raw.rstrip(b"\0"))
    yield "no end-of-archive blocks", raw[: -(-end // 512) * 512]
    yield "garbage after the end", raw + rng.randbytes(1500)
    yield "a header after the end", raw + raw[:1024]
    yield "nothing", b""
    yield "one zero block", bytes(512)
    yield "not a tar", b"hello, I am plain text" * 40


def test_every_reader_sees_the_same_members_on_real_tars(tars):
    assert len(tars) >= 9 + (9 if HAS_GNU_TAR else 0)  # every builder above ran
    for name, path in tars.items():
        _assert_same(path, name)
        assert _fast(path, _most_members(path)), f"{name}: no members read"


@pytest.mark.slow
@pytest.mark.parametrize("base", ["python-gnu", "python-pax", "python-ustar", "python-gnu-volume-label",
                                  "pax-records", "pax-global-path", "pax-binary-names", "gnutar-gnu",
                                  "gnutar-oldgnu", "gnutar-posix", "gnutar-v7", "gnutar-gnu-sparse",
                                  "gnutar-posix-sparse-0.0", "gnutar-posix-sparse-0.1",
                                  "gnutar-posix-sparse-1.0"])  # fmt: skip
def test_damaged_copies_give_the_same_members_or_a_reason(tars, tmp_path, base):
    if base not in tars:
        pytest.skip("GNU tar is not installed")
    copy = tmp_path / "damaged.tar"
    count = 0
    for what, data in _variants(tars[base]):
        copy.write_bytes(data)
        _assert_same(copy, f"{base}: {what}")
        count += 1
    assert count > 250  # the damage above was really applied


@pytest.mark.slow
@pytest.mark.parametrize("base", ["webdataset-gnu", "webdataset-pax"])
def test_large_shards_cut_anywhere_give_the_same_members(tars, tmp_path, base):
    """Shards past the read window: cuts inside and around the large members, and around window edges."""
    raw = tars[base].read_bytes()
    copy = tmp_path / "cut.tar"
    with tarfile.open(tars[base]) as tar:
        big = [info for info in tar.getmembers() if info.size > 100_000]
    cuts = {info.offset_data + d for info in big for d in (-512, -1, 0, 1, info.size // 2, info.size, info.size + 1)}
    cuts |= {edge + d for edge in range(1 << 20, len(raw), 1 << 20) for d in (-600, -1, 0, 300)}  # read windows
    cuts |= set(random.Random(3).sample(range(len(raw)), 12))
    for cut in sorted(c for c in cuts if 0 < c < len(raw)):
        copy.write_bytes(raw[:cut])
        _assert_same(copy, f"{base}: cut at {cut}")


def test_urls_read_the_members_a_local_path_reads(tars, tmp_path):
    fs = fsspec.filesystem("memory")
    root = f"/vlmpack-fast-reader-{os.getpid()}"
    try:
        for name in ("python-pax", "webdataset-gnu", "pax-records"):
            raw = tars[name].read_bytes()
            for cut in (len(raw), len(raw) // 2, len(raw) // 3 + 100):
                local = tmp_path / f"{name}-{cut}.tar"
                local.write_bytes(raw[:cut])
                fs.pipe(f"{root}/{name}-{cut}.tar", raw[:cut])
                expected = _fast(local, _most_members(local))
                assert expected == _oracle(local)
                for url in (f"memory://{root}/{name}-{cut}.tar", f"file://{local}"):
                    assert _fast(url, _most_members(local)) == expected, url
    finally:
        fs.rm(root, recursive=True)


# ---------------------------------------------------------------- what the reader says, read as a user would


def _rewrite_size(path: Path, member: str, size_field: bytes) -> None:
    with tarfile.open(path) as tar:
        at = tar.getmember(member).offset
    raw = bytearray(path.read_bytes())
    block = bytearray(raw[at : at + 512])
    block[124:136] = size_field
    raw[at : at + 512] = _with_checksum(block)
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("size_field", [b"77777777777\0", b"\x80" + (10 * 2**30).to_bytes(11, "big")],
                         ids=["octal-8GiB", "base256-10GiB"])
def test_a_size_past_the_end_of_the_file_drops_that_sample_and_keeps_the_ones_before(tmp_path, size_field):
    path = write_shard(tmp_path / "s.tar", [SyntheticSample(key=f"k{i}", json={"i": i}) for i in range(3)])
    _rewrite_size(path, "k2.json", size_field)
    samples = list(group_samples(iter_members(path)))
    assert [(s.key, s.problem) for s in samples] == [("k0", None), ("k1", None), ("k2", Reason.TRUNCATED_SHARD)]
    assert samples[-1].members[-1].size > path.stat().st_size
    assert list(iter_members(path)) == list(iter_members(path, reader="tarfile"))


def test_a_header_that_loops_tarfile_is_a_damaged_member_and_reading_goes_on(tmp_path):
    """A size of -1024 (GNU base-256) sends tarfile back two blocks, over the same members forever."""
    path = write_shard(tmp_path / "s.tar", [SyntheticSample(key=f"k{i}", json={"i": i}) for i in range(4)])
    _rewrite_size(path, "k2.json", b"\xff" * 10 + (-1024 % 65536).to_bytes(2, "big"))
    assert isinstance(_oracle(path), _OracleLoops)  # what tarfile does with it
    samples = list(group_samples(iter_members(path)))
    assert [(s.key, s.problem) for s in samples] == [
        ("k0", None), ("k1", None), ("k2", Reason.DAMAGED_HEADER), ("k3", None)]
    assert "damaged tar header at byte" in samples[2].error


def test_reading_resumed_at_a_long_name_whose_header_is_damaged_reads_the_samples_after_it(tmp_path):
    """Two damaged headers in a row behind GNU long names: reading resumes at a long-name header whose own
    member header is bad. Both readers used to stop there with no reason, leaving k2 and k3 unread."""
    folder = "d" * 60 + "/" + "e" * 60 + "/"  # over 100 characters: every member has a long-name header
    path = write_shard(tmp_path / "s.tar", [SyntheticSample(key=f"{folder}k{i}", json={"i": i},
                                                            media={"img0.jpg": b"x" * 700}) for i in range(4)])
    with tarfile.open(path) as tar:
        headers = [tar.getmember(f"{folder}k1.{part}").offset_data - 512 for part in ("json", "img0.jpg")]
    raw = bytearray(path.read_bytes())
    for at in headers:  # the member headers after k1's two long-name headers
        raw[at + 148] ^= 0xFF
    path.write_bytes(bytes(raw))
    for reader in ("fast", "tarfile"):
        samples = list(group_samples(iter_members(path, reader=reader)))
        assert [(s.key.removeprefix(folder), s.problem) for s in samples] == [
            ("k0", Reason.DAMAGED_HEADER), ("k2", None), ("k3", None)], reader  # k1's names are in the lost bytes
