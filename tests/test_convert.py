"""``vlmpack convert``: a LLaVA JSON + image folder becomes shards that the real pipeline packs whole.

The records use the layouts other tools write (LLaVA ``image`` with original paths,
LLaMA-Factory ``messages`` + ``images``, HF typed items with paths); the shards are
read back with webdataset's own reader and then scanned, planned and written by the
real stages: every converted record ends in exactly one pack.
"""

from __future__ import annotations

import json

import pytest
import webdataset as wds

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.convert import REPORT_NAME, convert_records
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.plan_file import read_plan
from vlmpack_offline.stages import bucket, plan, scan, write
from vlmpack_offline.synthetic.shards import image_bytes


def _raw_dataset(root):
    media = root / "media"
    (media / "coco" / "train2017").mkdir(parents=True)
    (media / "coco" / "train2017" / "000001.jpg").write_bytes(image_bytes(64, 48, seed=1))
    (media / "coco" / "train2017" / "000002.png").write_bytes(image_bytes(40, 40, fmt="PNG", seed=2))
    records = [
        {"id": "000001", "image": "coco/train2017/000001.jpg",
         "conversations": [{"from": "human", "value": "<image>\nWhat is it?"}, {"from": "gpt", "value": "A bus."}]},
        {"id": "a.b/c", "messages": [{"role": "user", "content": "<image><image>Same?"},
                                     {"role": "assistant", "content": "No."}],
         "images": ["coco/train2017/000001.jpg", "coco/train2017/000002.png"]},
        {"id": 7, "messages": [{"role": "user", "content": [{"type": "image", "image": "coco/train2017/000002.png"},
                                                            {"type": "text", "text": "Color?"}]},
                               {"role": "assistant", "content": "Grey."}]},
        {"id": "text", "conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello."}]},
        {"id": "gone", "image": "coco/missing.jpg", "conversations": [{"from": "human", "value": "<image>"}]},
        {"id": "escape", "image": "../outside.jpg", "conversations": [{"from": "human", "value": "<image>"}]},
        ["not", "an", "object"],
    ]  # fmt: skip
    (root / "outside.jpg").write_bytes(image_bytes(10, 10))
    source = root / "llava.json"
    source.write_text(json.dumps(records))
    return source, media


def test_converted_shards_pack_every_good_record_and_report_the_rest(tmp_path, qwen25_processor_dir):
    source, media = _raw_dataset(tmp_path)
    result = convert_records(source, media, tmp_path / "shards", maxcount=2)
    assert (result.written, result.skipped, len(result.shards)) == (4, 3, 2)
    report = [json.loads(line) for line in (tmp_path / "shards" / REPORT_NAME).read_text().splitlines()]
    assert [(r["index"], r["reason"]) for r in report] == [
        (4, "missing_media"), (5, "media_outside_root"), (6, "unknown_format")]  # fmt: skip

    samples = list(wds.WebDataset([str(p) for p in result.shards], shardshuffle=False))
    assert [s["__key__"] for s in samples] == ["00000000_000001", "00000001_a_b_c", "00000002_7", "00000003_text"]
    assert json.loads(samples[1]["json"])["images"] == ["img0.jpg", "img1.png"]
    assert samples[1]["img1.png"] == (media / "coco" / "train2017" / "000002.png").read_bytes()

    config = config_from_dict({
        "data": {"wds_dir": str(tmp_path / "shards"), "work_dir": str(tmp_path / "work"),
                 "packed_wds_dir": str(tmp_path / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(qwen25_processor_dir)}},
    }, source="test")  # fmt: skip
    for stage in (scan, bucket, plan, write):
        assert stage.run(config).exit_code == 0
    packed = sorted(s for pack in read_plan(config.work_dir) for s in pack.sample_ids)
    assert [s.rsplit("/", 1)[1] for s in packed] == [s["__key__"] for s in samples]


def test_same_input_same_bytes_and_no_overwrite(tmp_path):
    source, media = _raw_dataset(tmp_path)
    first = convert_records(source, media, tmp_path / "a")
    second = convert_records(source, media, tmp_path / "b")
    assert [p.read_bytes() for p in first.shards] == [p.read_bytes() for p in second.shards]
    with pytest.raises(ConfigError, match="already holds shard"):
        convert_records(source, media, tmp_path / "a")
