"""Inputs that once aborted the whole scan or lost samples without a word: each is now one sample's drop.

Every shard is a real tar written in ``tmp_path``; the scan runs for real (``stages.scan.run``)
and each sample must end in exactly one manifest row with the expected reason, the good
samples around it ``ok``.
"""

from __future__ import annotations

import io
import json
import tarfile

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.stages import scan
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, write_shard

ANSWER = {"role": "assistant", "content": "Fine."}


def _good(key: str) -> SyntheticSample:
    return SyntheticSample(key=key, json={"messages": [{"role": "user", "content": f"{key}?"}, ANSWER]})


def _scan(tmp_path, processor_dir) -> dict[str, tuple[str, str]]:
    config = config_from_dict({
        "data": {"wds_dir": str(tmp_path / "src"), "work_dir": str(tmp_path / "work"),
                 "packed_wds_dir": str(tmp_path / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
    }, source="test")  # fmt: skip
    scan.run(config)
    with Manifest(manifest_path(config.work_dir)) as manifest:
        return {row.key: (row.status, row.error) for row in manifest.iter_samples()}


def test_hostile_json_drops_only_its_sample(tmp_path, qwen25_processor_dir):
    image = image_bytes(40, 30)
    user_image = [{"type": "image", "image": "img0.jpg"}, {"type": "text", "text": "x"}]
    write_shard(tmp_path / "src" / "part-000.tar", [
        _good("a_first"),
        SyntheticSample(key="images_not_a_list", json={
            "conversations": [{"from": "human", "value": "<image>"}, {"from": "gpt", "value": "x"}], "images": 5},
            media={"img0.jpg": image}),
        SyntheticSample(key="deep_nesting", json=b'{"messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        SyntheticSample(key="huge_int", json=b'{"messages": [], "n": ' + b"9" * 5000 + b"}"),
        SyntheticSample(key="lone_surrogate", json=b'{"messages": [{"role": "user", "content": "\\ud800"}, '
                                                   b'{"role": "assistant", "content": "x"}]}'),
        SyntheticSample(key="tags_disagree", json={
            "messages": [{"role": "user", "content": "<image> one tag"}, ANSWER], "images": ["img0.jpg", "img1.jpg"]},
            media={"img0.jpg": image, "img1.jpg": image}),
        SyntheticSample(key="typed_image_ok", json={"messages": [{"role": "user", "content": user_image}, ANSWER]},
                        media={"img0.jpg": image}),
        _good("z_last"),
    ])  # fmt: skip
    rows = _scan(tmp_path, qwen25_processor_dir)
    status = {key: value[0] for key, value in rows.items()}
    assert status == {
        "a_first": "ok", "images_not_a_list": "unknown_format", "deep_nesting": "bad_json", "huge_int": "bad_json",
        "lone_surrogate": "bad_json", "tags_disagree": "media_mismatch", "typed_image_ok": "ok", "z_last": "ok",
    }  # fmt: skip
    assert "1 <image> tags" in rows["tags_disagree"][1] and "lists 2" in rows["tags_disagree"][1]
    assert all(error for s, error in rows.values() if s != "ok")


def _tar(path, members: list[tuple[str, bytes]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT, encoding="utf-8", errors="surrogateescape") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _conversation(text: str) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": text}, ANSWER]}).encode()


def test_a_member_name_that_is_not_utf8_drops_its_sample(tmp_path, qwen25_processor_dir):
    bad = b"bad\xff.json".decode("utf-8", "surrogateescape")
    _tar(tmp_path / "src" / "part-000.tar", [("a.json", _conversation("a")), (bad, _conversation("b")),
                                             ("c.json", _conversation("c"))])  # fmt: skip
    rows = _scan(tmp_path, qwen25_processor_dir)
    assert rows["a"][0] == rows["c"][0] == "ok"
    (bad_key,) = set(rows) - {"a", "c"}
    assert rows[bad_key][0] == "bad_member_name" and "not valid UTF-8" in rows[bad_key][1]


def test_a_damaged_header_mid_file_keeps_the_samples_after_it(tmp_path, qwen25_processor_dir):
    path = tmp_path / "src" / "part-000.tar"
    _tar(path, [(f"s{i}.json", _conversation(f"sample {i}")) for i in range(6)])
    with tarfile.open(path) as tar:
        header = next(m for m in tar.getmembers() if m.name == "s3.json").offset
    with open(path, "r+b") as handle:  # break the checksum field of s3's header
        handle.seek(header + 148)
        handle.write(b"0000000\0")
    rows = _scan(tmp_path, qwen25_processor_dir)
    # the damaged header's name field survived: its own sample is the one dropped, every sample has one row
    assert {k: v[0] for k, v in rows.items()} == {f"s{i}": "ok" if i != 3 else "damaged_header" for i in range(6)}
    assert f"damaged tar header at byte {header}" in rows["s3"][1]
