"""A corpus of bad and odd inputs, more than 40 kinds, through the real pipeline as a user runs it.

Every kind is a real file in ``tmp_path``: samples whose key names their kind and the reason
they must end with, and files named like shards that are not plain tars. The pipeline runs
as the CLI (``python -m vlmpack_offline``, scan with ``decode_check`` and write with
``check_sources: sha256``); every stage must exit 0, and the accounting must close:

    input samples (counted by this test as it writes them)
        = packed (read back from pretrain-*.tar) + dropped (a manifest row with a reason,
          or bucket's overlong report) + unread (counted in a shard row)
"""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, truncate, video_bytes, write_shard

pytestmark = pytest.mark.slow

ANSWER = {"role": "assistant", "content": "Fine."}
SRC = "src"


def _hf(content, *extra_turns) -> dict:
    return {"messages": [{"role": "user", "content": content}, *extra_turns, ANSWER]}


def _img_turn(*parts: str, text: str = "What is it?") -> list:
    return [*({"type": "image", "image": p} for p in parts), {"type": "text", "text": text}]


@dataclass
class Corpus:
    """What the test wrote: the reason each input sample must end with, and the shard-level expectations."""

    expected: dict[str, str] = field(default_factory=dict)  # "<shard>/<key>" -> "ok" | reason
    shard_status: dict[str, tuple[str, int]] = field(default_factory=dict)  # shard -> (status, n_unread)
    unused_media: dict[str, int] = field(default_factory=dict)  # sample id -> unused media parts

    def add(self, shard: str, samples: list[tuple[str, SyntheticSample]], **kwargs) -> Path:
        path = write_shard(Path(self.root) / SRC / shard, [s for _, s in samples], **kwargs)
        for reason, sample in samples:
            self.expected[f"{shard}/{sample.key}"] = reason
        self.shard_status.setdefault(shard, ("ok", 0))
        return path

    root: str = ""

    @property
    def input_samples(self) -> int:
        return len(self.expected) + sum(unread for _, unread in self.shard_status.values())


def _sample_kinds(jpeg: bytes, png: bytes, mp4: bytes) -> list[tuple[str, SyntheticSample]]:
    """(expected reason, sample) for every sample-level kind; the key says what it is."""
    s = SyntheticSample
    big = image_bytes(640, 480)
    cut_jpeg = big[: len(big) // 2]  # header intact, data cut: the default scan's structure walk sees it
    words = " ".join(["word"] * 12_000)
    return [
        # good samples of every layout, around the faults
        ("ok", s(key="ok_text_hf", json=_hf("Hello?"))),
        ("ok", s(key="ok_image_hf", json=_hf(_img_turn("img0.jpg")), media={"img0.jpg": jpeg})),
        ("ok", s(key="ok_png_sharegpt", json={"conversations": [{"from": "human", "value": "<image>\nWhat?"},
                                                               {"from": "gpt", "value": "A."}],
                                             "images": ["img0.png"]}, media={"img0.png": png})),
        ("ok", s(key="ok_llamafactory", json={"messages": [{"role": "user", "content": "<image>Describe."},
                                                           ANSWER], "images": ["a.jpg"]}, media={"a.jpg": jpeg})),
        ("ok", s(key="ok_video", json=_hf([{"type": "video", "video": "clip.mp4"}, {"type": "text", "text": "?"}]),
                 media={"clip.mp4": mp4})),
        ("ok", s(key="ok_multi_turn", json={"messages": [{"role": "system", "content": "Be brief."},
                                                         {"role": "user", "content": "1?"}, ANSWER,
                                                         {"role": "user", "content": "2?"}, ANSWER]})),
        ("ok", s(key="ok_unicode_key_é", json=_hf("Ünïcödé text ✓?"))),
        ("ok", s(key="ok_extra_image_unused", json=_hf(_img_turn("img0.jpg")),
                 media={"img0.jpg": jpeg, "img1.jpg": jpeg})),  # the extra image: a warning, still packed
        ("ok", s(key="ok_json_bom", json=b"\xef\xbb\xbf" + json.dumps(_hf("BOM?")).encode())),
        # JSON that is not valid or is hostile
        ("bad_json", s(key="bad_json_cut", json=b'{"messages": [{"role": "user", "content": ')),
        ("bad_json", s(key="bad_json_missing", json=None, media={"img0.jpg": jpeg})),
        ("bad_json", s(key="bad_json_huge_int", json=b'{"messages": [], "n": ' + b"9" * 5000 + b"}")),
        ("bad_json", s(key="bad_json_deep", json=b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")),
        ("bad_json", s(key="bad_json_surrogate", json=b'{"messages": [{"role": "user", "content": "\\ud800"}, '
                                                      b'{"role": "assistant", "content": "x"}]}')),
        ("bad_json", s(key="bad_json_not_utf8", json=b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}')),
        ("bad_json", s(key="bad_json_empty", json=b"")),
        ("bad_json", s(key="bad_json_nan_text", json=b"NaNaN")),
        # JSON in no layout we read
        ("unknown_format", s(key="fmt_number", json=b"5")),
        ("unknown_format", s(key="fmt_no_conversation", json={"foo": 1})),
        ("unknown_format", s(key="fmt_unknown_role", json={"messages": [{"role": "robot", "content": "x"}, ANSWER]})),
        ("unknown_format", s(key="fmt_content_number", json={"messages": [{"role": "user", "content": 5}, ANSWER]})),
        ("unknown_format", s(key="fmt_value_not_string", json={"conversations": [{"from": "human", "value": 3},
                                                                                 {"from": "gpt", "value": "x"}]})),
        ("unknown_format", s(key="fmt_empty_messages", json={"messages": []})),
        ("unknown_format", s(key="fmt_images_number", json={"conversations": [{"from": "human", "value": "<image>"},
                                                                              {"from": "gpt", "value": "x"}],
                                                            "images": 5}, media={"img0.jpg": jpeg})),
        ("unknown_format", s(key="fmt_item_type", json=_hf([{"type": "hologram", "hologram": "x"}]))),
        ("unknown_format", s(key="fmt_message_string", json={"messages": ["hello", "world"]})),
        # media named but absent, or tags and lists that disagree
        ("missing_media", s(key="media_absent", json=_hf(_img_turn("img0.jpg", "img1.jpg")),
                            media={"img0.jpg": jpeg})),
        ("missing_media", s(key="media_tag_without_part", json={"conversations": [
            {"from": "human", "value": "<image>\nWhat?"}, {"from": "gpt", "value": "x"}]})),
        ("media_mismatch", s(key="media_fewer_tags", json={"messages": [{"role": "user", "content": "<image> one"},
                                                                         ANSWER], "images": ["a.jpg", "b.jpg"]},
                             media={"a.jpg": jpeg, "b.jpg": jpeg})),
        # media that cannot be used
        ("corrupt_media", s(key="corrupt_random_jpg", json=_hf(_img_turn("img0.jpg")),
                            media={"img0.jpg": bytes(range(256)) * 2})),
        ("corrupt_media", s(key="corrupt_empty_jpg", json=_hf(_img_turn("img0.jpg")), media={"img0.jpg": b""})),
        ("corrupt_media", s(key="corrupt_png_header", json=_hf(_img_turn("img0.png")),
                            media={"img0.png": b"\x89PNG\r\n\x1a\n" + b"\0" * 64})),
        ("truncated_media", s(key="truncated_cut_jpeg", json=_hf(_img_turn("img0.jpg")), media={"img0.jpg": cut_jpeg})),
        ("corrupt_media", s(key="corrupt_random_mp4", json=_hf([{"type": "video", "video": "v.mp4"}]),
                            media={"v.mp4": b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 4})),
        ("corrupt_media", s(key="corrupt_empty_mp4", json=_hf([{"type": "video", "video": "v.mp4"}]),
                            media={"v.mp4": b""})),
        ("truncated_media", s(key="truncated_cut_mp4", json=_hf([{"type": "video", "video": "v.mp4"}]),
                            media={"v.mp4": mp4[: len(mp4) // 3]})),
        ("unsupported_aspect", s(key="aspect_4000x10", json=_hf(_img_turn("img0.png")),
                                 media={"img0.png": image_bytes(4000, 10, fmt="PNG")})),
        # nothing to learn, too long
        ("no_labels", s(key="labels_user_only", json={"messages": [{"role": "user", "content": "Just a question"}]})),
        ("no_labels", s(key="labels_system_user", json={"messages": [{"role": "system", "content": "S"},
                                                                     {"role": "user", "content": "Q"}]})),
        ("overlong", s(key="overlong_text", json=_hf(words))),
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Corpus:
    root = tmp_path_factory.mktemp("corpus")
    c = Corpus(root=str(root))
    jpeg, png = image_bytes(64, 48), image_bytes(40, 40, fmt="PNG", mode="RGBA")
    mp4 = video_bytes(8, 4, 64, 48)
    c.add("samples.tar", _sample_kinds(jpeg, png, mp4))

    # member names and keys
    bad_utf8 = b"bad\xff".decode("utf-8", "surrogateescape")
    c.add("names.tar", [("ok", SyntheticSample(key="names_before", json=_hf("a?")))],
          extra_members=[("../evil.json", json.dumps(_hf("x")).encode()), ("/abs/x.json", json.dumps(_hf("x")).encode()),
                         (f"{bad_utf8}.json", json.dumps(_hf("x")).encode()),
                         ("names_after.json", json.dumps(_hf("b?")).encode())])
    for key in ("../evil", "/abs/x", bad_utf8):
        c.expected[f"names.tar/{key if key != bad_utf8 else 'bad' + chr(92) + 'xff'}"] = "bad_member_name"
    c.expected["names.tar/names_after"] = "ok"
    dup = [("ok", SyntheticSample(key="dup", json=_hf("first?"))), ("ok", SyntheticSample(key="other", json=_hf("o?")))]
    c.add("duplicates.tar", dup, extra_members=[("dup.json", json.dumps(_hf("second?")).encode())])
    c.expected["duplicates.tar/dup#2"] = "duplicate_key"

    # a directory entry holds no data (skipped); a symbolic link is its sample's reasoned drop, never followed
    with tarfile.open(root / SRC / "links.tar", "w", format=tarfile.GNU_FORMAT) as tar:
        folder = tarfile.TarInfo("folder")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        link = tarfile.TarInfo("folder/link.json")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
        data = json.dumps(_hf("linked?")).encode()
        info = tarfile.TarInfo("folder/real.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    c.expected["links.tar/folder/real"] = "ok"
    c.expected["links.tar/folder/link"] = "unsupported_member"
    c.shard_status["links.tar"] = ("ok", 0)

    # a shard cut mid-member: what precedes the cut is kept
    path = c.add("truncated.tar", [("ok", SyntheticSample(key=f"t{i}", json=_hf(f"{i}?" * 200))) for i in range(3)])
    with tarfile.open(path) as tar:
        last = tar.getmembers()[-1]
    truncate(path, last.offset_data + last.size // 2)
    c.expected["truncated.tar/t2"] = "truncated_shard"
    c.shard_status["truncated.tar"] = ("truncated_shard", 0)

    # a header mid-file whose checksum fails: its sample drops, the ones after it are read
    path = c.add("damaged.tar", [("ok", SyntheticSample(key=f"d{i}", json=_hf(f"{i}?"))) for i in range(5)])
    with tarfile.open(path) as tar:
        header = next(m for m in tar.getmembers() if m.name == "d2.json").offset
    with open(path, "r+b") as handle:
        handle.seek(header + 148)
        handle.write(b"0000000\0")
    c.expected["damaged.tar/d2"] = "damaged_header"
    c.shard_status["damaged.tar"] = ("damaged_header", 0)

    # files named like shards that are not plain tars
    write_shard(root / "tmp-inner.tar", [SyntheticSample(key=f"z{i}", json=_hf("z?")) for i in range(3)])
    raw_tar = (root / "tmp-inner.tar").read_bytes()
    (root / "tmp-inner.tar").unlink()
    (root / SRC / "gzipped.tar.gz").write_bytes(gzip.compress(raw_tar, mtime=0))
    c.shard_status["gzipped.tar.gz"] = ("compressed_shard", 3)
    (root / SRC / "gzipped.tgz").write_bytes(gzip.compress(raw_tar, mtime=0))
    c.shard_status["gzipped.tgz"] = ("compressed_shard", 3)
    (root / SRC / "gzip-named.tar").write_bytes(gzip.compress(raw_tar, mtime=0))
    c.shard_status["gzip-named.tar"] = ("compressed_shard", 3)
    (root / SRC / "gzip-of-text.tar").write_bytes(gzip.compress(b"not a tar at all\n" * 10, mtime=0))
    c.shard_status["gzip-of-text.tar"] = ("compressed_shard", 0)
    (root / SRC / "notes.tar").write_text("these are my notes, not a tar file\n" * 20)
    c.shard_status["notes.tar"] = ("not_a_tar", 0)
    (root / SRC / "zeros-header.tar").write_bytes(b"\x01" * 2048)
    c.shard_status["zeros-header.tar"] = ("not_a_tar", 0)
    (root / SRC / "empty.tar").write_bytes(b"")
    c.shard_status["empty.tar"] = ("ok", 0)
    with tarfile.open(root / SRC / "no-members.tar", "w"):
        pass
    c.shard_status["no-members.tar"] = ("ok", 0)
    outside = write_shard(root / "outside" / "elsewhere.tar", [SyntheticSample(key="x", json=_hf("x?"))])
    os.symlink(outside, root / SRC / "link-outside.tar")
    c.shard_status["link-outside.tar"] = ("symlink_outside_input", 0)
    c.unused_media = {"samples.tar/ok_extra_image_unused": 1}
    return c


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vlmpack_offline", *args, "--config", str(root / "config.yaml")],
                          capture_output=True, text=True, timeout=600)  # fmt: skip


@pytest.fixture(scope="module")
def pipeline(corpus, qwen25_processor_dir) -> dict:
    root = Path(corpus.root)
    config = {
        "data": {"wds_dir": str(root / SRC), "work_dir": str(root / "work"), "packed_wds_dir": str(root / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(qwen25_processor_dir)}},
        "sample": {"max_token_len": 4096},
        "process": {"workers": 2},
        "scan": {"decode_check": True, "max_drop_ratio": 1.0},  # a corpus of faults: drops are the point
        "write": {"check_sources": "sha256"},
    }
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    runs = {stage: _cli(root, stage) for stage in ("scan", "bucket", "plan", "write", "verify")}
    return {"runs": runs, "root": root}


def test_every_stage_exits_0_on_the_corpus(pipeline):
    for stage, run in pipeline["runs"].items():
        assert run.returncode == 0, f"{stage}: {run.stdout[-2000:]}\n{run.stderr[-3000:]}"
        assert "Traceback" not in run.stderr, f"{stage}: {run.stderr[-3000:]}"


def test_the_corpus_holds_at_least_40_kinds(corpus):
    sample_kinds = {key.split("/", 1)[1] for key in corpus.expected}
    shard_kinds = {shard for shard, status in corpus.shard_status.items() if status != ("ok", 0)}
    assert len(sample_kinds) + len(shard_kinds) >= 40


def test_every_input_sample_has_one_row_with_the_expected_reason(corpus, pipeline):
    with Manifest(manifest_path(pipeline["root"] / "work")) as manifest:
        rows = {row.id: row for row in manifest.iter_samples()}
        shards = {s.shard: s for s in manifest.shards()}
    scanned = {sample_id: row.status for sample_id, row in rows.items()}
    expected = {k: ("ok" if v == "overlong" else v) for k, v in corpus.expected.items()}  # overlong is bucket's
    assert scanned == expected
    assert all(row.error for row in rows.values() if row.status != "ok")
    assert {s: (r.status, r.n_unread) for s, r in shards.items()} == corpus.shard_status
    assert all(r.error for r in shards.values() if r.status != "ok")
    assert "byte" in shards["damaged.tar"].error and "gunzip" in shards["gzipped.tgz"].error
    assert {i: r.unused_media for i, r in rows.items() if r.unused_media} == corpus.unused_media


def test_input_samples_equal_packed_plus_dropped_plus_unread(corpus, pipeline):
    root = pipeline["root"]
    packed: list[str] = []
    for tar_path in sorted((root / "packed").glob("pretrain-*.tar")):
        with tarfile.open(tar_path) as tar:
            for member in tar:
                if member.name.endswith(".json"):
                    packed += [s["id"] for s in json.load(tar.extractfile(member))["samples"]]
    with Manifest(manifest_path(root / "work")) as manifest:
        dropped = [row.id for row in manifest.iter_samples() if row.status != "ok"]
        unread = sum(s.n_unread for s in manifest.shards())
    overlong = [json.loads(line)["id"] for line in (root / "work" / "bins" / "overlong.jsonl").read_text().splitlines()]
    assert len(packed) == len(set(packed))
    assert sorted(packed) == sorted(k for k, v in corpus.expected.items() if v == "ok")
    assert overlong == [k for k, v in corpus.expected.items() if v == "overlong"]
    assert len(packed) + len(dropped) + len(overlong) + unread == corpus.input_samples


def test_the_scan_summary_says_what_could_not_be_read(corpus, pipeline):
    out = pipeline["runs"]["scan"].stdout
    unread = sum(n for _, n in corpus.shard_status.values())
    assert f"of which {unread} could not be read at all" in out
    bad = sum(1 for status, _ in corpus.shard_status.values() if status != "ok")
    assert f"shards with a problem: {bad}" in out
    assert "warning: 1 media parts are in their sample but never referenced" in out


def test_a_cut_jpeg_is_truncated_media_without_decode_check(tmp_path, make_config):
    from vlmpack_offline.stages import scan

    jpeg = image_bytes(640, 480)
    write_shard(tmp_path / "src" / "a.tar", [SyntheticSample(key="cut", json=_hf(_img_turn("img0.jpg")),
                                                             media={"img0.jpg": jpeg[: len(jpeg) // 2]})])
    scan.run(make_config(wds_dir=tmp_path / "src", scan={"max_drop_ratio": 1.0}))
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        assert [row.status for row in manifest.iter_samples()] == ["truncated_media"]  # the header reads, the data ends
