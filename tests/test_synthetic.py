"""The synthetic generator is deterministic and covers every layout, media kind and drop reason."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections import Counter

import decord
import pytest
from PIL import Image

from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.shards import (
    FAULT_REASONS,
    SyntheticSample,
    expected_fault,
    generate_dataset,
    image_bytes,
    video_bytes,
    write_shard,
)
from vlmpack_offline.tario import iter_samples, read_range


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load(paths):
    """(shard, key, {part: bytes}) for every sample of every shard."""
    out = []
    for path in paths:
        with open(path, "rb") as handle:
            for sample in iter_samples(path):
                parts = {m.part: read_range(handle, m.offset, m.size) for m in sample.members if not m.problem}
                out.append((path, sample, parts))
    return out


def test_same_seed_gives_identical_bytes_and_other_seed_differs(tmp_path, small_dataset):
    again = generate_dataset(tmp_path / "again", seed=0, n_shards=2, samples_per_shard=12)
    other = generate_dataset(tmp_path / "other", seed=1, n_shards=2, samples_per_shard=12)
    assert [_sha(p) for p in again] == [_sha(p) for p in small_dataset]
    assert [_sha(p) for p in other] != [_sha(p) for p in small_dataset]


def test_video_and_image_encoders_are_reproducible():
    assert video_bytes(16, 8, 64, 48, seed=3) == video_bytes(16, 8, 64, 48, seed=3)
    assert image_bytes(300, 200, mode="P", fmt="PNG", seed=3) == image_bytes(300, 200, mode="P", fmt="PNG", seed=3)


def test_shards_are_named_in_order_with_one_in_a_subfolder(small_dataset):
    assert [p.name for p in small_dataset] == ["shard-000000.tar", "shard-000001.tar"]
    assert small_dataset[1].parent.name == "sub"
    assert small_dataset[1].parent.parent == small_dataset[0].parent


def test_tar_members_have_fixed_metadata_and_no_pax_headers(small_dataset):
    with tarfile.open(small_dataset[0]) as tar:
        infos = tar.getmembers()
    assert infos and all(
        (i.mtime, i.uid, i.gid, i.uname, i.gname, i.mode, i.pax_headers) == (0, 0, 0, "", "", 0o644, {}) for i in infos
    )


def test_pax_option_puts_a_pax_header_on_every_member(tmp_path):
    path = write_shard(tmp_path / "p.tar", [SyntheticSample(key="k0", json={"a": 1}, media={"img0.jpg": b"x"})],
                       pax=True)
    with tarfile.open(path) as tar:
        assert [bool(i.pax_headers) for i in tar.getmembers()] == [True, True]


def test_dataset_covers_layouts_keys_and_media_kinds(small_dataset):
    layouts, modes, sides, keys, parts_seen = Counter(), Counter(), [], [], set()
    videos = 0
    for _, sample, parts in _load(small_dataset):
        keys.append(sample.key)
        raw = json.loads(parts["json"])
        layouts["messages" if "messages" in raw else "conversations"] += 1
        conv = parse_conversation(parts["json"], key=sample.key, parts=list(parts))
        for ref in conv.media:
            parts_seen.add(ref.part)
            data = parts[ref.part]
            if ref.kind == "image":
                with Image.open(io.BytesIO(data)) as image:
                    modes[(image.format, image.mode)] += 1
                    sides.extend(image.size)
            else:
                reader = decord.VideoReader(io.BytesIO(data))
                assert 8 <= len(reader) <= 16 and reader[0].shape == (48, 64, 3)
                videos += 1
        raw_text = json.dumps(raw)
        if "conversations" in raw and "images" not in raw and conv.media:
            layouts["sharegpt_unnamed"] += 1
        if '{"type": "image"}' in raw_text:
            layouts["hf_unnamed"] += 1
    assert layouts["messages"] and layouts["conversations"]
    assert layouts["sharegpt_unnamed"] and layouts["hf_unnamed"]
    assert {("JPEG", "RGB"), ("PNG", "RGBA"), ("PNG", "P"), ("JPEG", "L")} <= set(modes)
    assert min(sides) == 30 and max(sides) == 4000 and any(200 <= s <= 700 for s in sides)
    assert videos >= 2
    assert any(k.startswith("sub/dir/") for k in keys) and any("/" not in k for k in keys)
    assert {"img0.jpg", "img1.jpg"} & parts_seen  # multi-dot member names: key.img0.jpg
    assert len(set(keys)) == len(keys)


def test_text_lengths_vary(small_dataset):
    lengths = {len(parts["json"]) for _, _, parts in _load(small_dataset)}
    assert len(lengths) > 10


def test_faults_give_one_sample_per_drop_reason(faulty_dataset):
    samples = _load(faulty_dataset)
    by_reason: dict[str, list] = {}
    for _, sample, parts in samples:
        reason = expected_fault(sample.key)
        if reason is not None:
            by_reason.setdefault(reason, []).append((sample, parts))
    assert set(by_reason) == set(FAULT_REASONS)
    assert len(by_reason["corrupt_media"]) == 2  # a bad .jpg and a bad .mp4
    assert all(len(v) == 1 for k, v in by_reason.items() if k not in ("corrupt_media", "bad_member_name"))

    for reason in ("bad_json", "unknown_format", "missing_media"):
        (sample, parts), = by_reason[reason]
        with pytest.raises(DropError) as info:
            parse_conversation(parts["json"], key=sample.key, parts=list(parts))
        assert info.value.reason == reason
    for sample, _ in by_reason["bad_member_name"]:
        assert sample.problem == Reason.BAD_MEMBER_NAME
    for sample, parts in by_reason["corrupt_media"]:
        conv = parse_conversation(parts["json"], key=sample.key, parts=list(parts))
        (ref,) = conv.media
        with pytest.raises(Exception):  # noqa: B017 - Pillow and decord raise their own types
            if ref.kind == "image":
                Image.open(io.BytesIO(parts[ref.part])).load()
            else:
                decord.VideoReader(io.BytesIO(parts[ref.part]))
    (sample, parts), = by_reason["unsupported_aspect"]
    conv = parse_conversation(parts["json"], key=sample.key, parts=list(parts))
    with Image.open(io.BytesIO(parts[conv.media[0].part])) as image:
        assert max(image.size) / min(image.size) > 200
    (sample, parts), = by_reason["overlong"]
    assert len(parts["json"].split()) > 15_000
    good = [s for _, s, _ in samples if expected_fault(s.key) is None]
    assert len(good) == 24 and all(s.problem is None for s in good)
