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


# -- HF datasets saved to disk, and parquet ------------------------------------------------------------------


def _hf_records(root):
    """LLaVA-OneVision-style rows: an Image() column (embedded bytes), ShareGPT turns; one text row, one bad row."""
    datasets = pytest.importorskip("datasets")
    jpg, png = image_bytes(64, 48, seed=1), image_bytes(40, 40, fmt="PNG", seed=2)
    rows = {
        "id": ["a", "b", "c", "d"],
        "image": [{"bytes": jpg, "path": "coco/1.jpg"}, {"bytes": png, "path": None}, None,
                  {"bytes": b"not an image", "path": None}],
        "conversations": [
            [{"from": "human", "value": "<image>\nWhat is it?"}, {"from": "gpt", "value": "A bus."}],
            [{"from": "human", "value": "<image>\nColor?"}, {"from": "gpt", "value": "Grey."}],
            [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello."}],
            [{"from": "human", "value": "<image>\n?"}, {"from": "gpt", "value": "!"}],
        ],
    }  # fmt: skip
    features = datasets.Features({
        "id": datasets.Value("string"),
        "image": datasets.Image(),
        "conversations": [{"from": datasets.Value("string"), "value": datasets.Value("string")}],
    })  # fmt: skip
    return datasets.Dataset.from_dict(rows, features=features), jpg, png


def _pack(tmp_path, shards_dir, processor_dir):
    config = config_from_dict({
        "data": {"wds_dir": str(shards_dir), "work_dir": str(tmp_path / "work"), "packed_wds_dir": str(tmp_path / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
    }, source="test")  # fmt: skip
    for stage in (scan, bucket, plan, write):
        assert stage.run(config).exit_code == 0
    return sorted(s.rsplit("/", 1)[1] for pack in read_plan(config.work_dir) for s in pack.sample_ids)


def _check_round_trip(tmp_path, result, jpg, png, processor_dir):
    assert (result.written, result.skipped) == (3, 1)  # the row whose bytes are no image is reported
    report = [json.loads(line) for line in (tmp_path / "shards" / REPORT_NAME).read_text().splitlines()]
    assert [(r["index"], r["reason"]) for r in report] == [(3, "unsupported_media")]
    samples = list(wds.WebDataset([str(p) for p in result.shards], shardshuffle=False))
    assert [s["__key__"] for s in samples] == ["00000000_a", "00000001_b", "00000002_c"]
    assert samples[0]["img0.jpg"] == jpg and json.loads(samples[0]["json"])["image"] == "img0.jpg"
    assert samples[1]["img0.png"] == png  # no path: the extension from the PNG signature
    assert _pack(tmp_path, tmp_path / "shards", processor_dir) == ["00000000_a", "00000001_b", "00000002_c"]


def test_hf_save_to_disk_round_trip_to_packed_shards(tmp_path, qwen25_processor_dir):
    dataset, jpg, png = _hf_records(tmp_path)
    dataset.save_to_disk(str(tmp_path / "hf"))
    result = convert_records(tmp_path / "hf", None, tmp_path / "shards")  # every image embedded: no media root
    _check_round_trip(tmp_path, result, jpg, png, qwen25_processor_dir)


def test_parquet_round_trip_to_packed_shards(tmp_path, qwen25_processor_dir):
    dataset, jpg, png = _hf_records(tmp_path)
    (tmp_path / "pq").mkdir()
    dataset.select([0, 1]).to_parquet(str(tmp_path / "pq" / "train-00000.parquet"))
    dataset.select([2, 3]).to_parquet(str(tmp_path / "pq" / "train-00001.parquet"))
    result = convert_records(tmp_path / "pq", None, tmp_path / "shards")  # a folder of parquet files, name order
    _check_round_trip(tmp_path, result, jpg, png, qwen25_processor_dir)


def test_dataset_dict_needs_a_split_and_paths_need_a_media_root(tmp_path):
    datasets = pytest.importorskip("datasets")
    dataset, _, _ = _hf_records(tmp_path)
    datasets.DatasetDict({"train": dataset, "test": dataset}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ConfigError, match="splits test, train: choose one with --split"):
        convert_records(tmp_path / "dd", None, tmp_path / "out")
    assert convert_records(tmp_path / "dd", None, tmp_path / "out", split="test").written == 3
    source, _ = _raw_dataset(tmp_path)
    with pytest.raises(ConfigError, match="pass --media-root"):
        convert_records(source, None, tmp_path / "out2")
    assert list((tmp_path / "out2").iterdir()) == []  # no partial shard or report left behind


def test_cli_converts_a_parquet_file(tmp_path):
    from click.testing import CliRunner

    from vlmpack_offline.cli import cli

    dataset, _, _ = _hf_records(tmp_path)
    dataset.to_parquet(str(tmp_path / "data.parquet"))
    done = CliRunner().invoke(cli, ["convert", str(tmp_path / "data.parquet"), "--out", str(tmp_path / "shards")])
    assert done.exit_code == 0, done.output
    assert "convert: 3 samples in 1 shards, 1 records skipped" in done.output


def test_audio_records_convert_by_path_and_embedded_bytes(tmp_path):
    """LLaMA-Factory audio records (``audios`` paths, an HF ``messages`` audio item, an HF ``Audio()``-style value of
    bytes without a path) become audio parts the scan reads, named ``aud<i>.<ext>`` by kind."""
    from vlmpack_offline.conversation import parse_conversation
    from vlmpack_offline.synthetic.audio import encode_audio

    media = tmp_path / "media"
    media.mkdir()
    wav, flac = encode_audio("wav", samples=8000, sample_rate=16000), encode_audio("flac", samples=4000, sample_rate=8000)
    (media / "speech.wav").write_bytes(wav)
    (media / "tone.flac").write_bytes(flac)
    records = [
        {"messages": [{"role": "user", "content": "<audio>Transcribe.<audio>"}, {"role": "assistant", "content": "Hi."}],
         "audios": ["speech.wav", "tone.flac"]},
        {"messages": [{"role": "user", "content": [{"type": "audio", "audio": {"bytes": wav, "path": None}}]},
                      {"role": "assistant", "content": "A tone."}]},
    ]  # fmt: skip
    source = tmp_path / "records.jsonl"
    source.write_text("\n".join(json.dumps(r, default=lambda b: None) for r in records[:1]))
    result = convert_records(source, media, tmp_path / "shards")
    assert (result.written, result.skipped) == (1, 0)
    (sample,) = wds.WebDataset([str(p) for p in result.shards], shardshuffle=False)
    assert json.loads(sample["json"])["audios"] == ["aud0.wav", "aud1.flac"]
    assert (sample["aud0.wav"], sample["aud1.flac"]) == (wav, flac)
    conversation = parse_conversation(sample["json"], key=sample["__key__"], parts=["aud0.wav", "aud1.flac"])
    assert [(m.kind, m.part) for m in conversation.media] == [("audio", "aud0.wav"), ("audio", "aud1.flac")]

    from vlmpack_offline.convert import _MediaRenamer, _rename_media

    renamer = _MediaRenamer(None)  # embedded bytes need no media root; the kind comes from the bytes (RIFF WAVE)
    renamed = _rename_media(records[1], renamer)
    assert renamed["messages"][0]["content"][0] == {"type": "audio", "audio": "aud0.wav"}
    assert renamer.parts == {"aud0.wav": wav}
