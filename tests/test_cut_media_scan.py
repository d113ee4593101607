"""Cut media through the real stages: a default scan drops every cut file as ``truncated_media`` and keeps every
whole one; a pack whose media was damaged after the scan fails at load with one error naming where, through
DataLoader workers and in ``vlmpack inspect``."""

from __future__ import annotations

import sys
import tarfile

import pytest
from _cut_media import images, videos
from click.testing import CliRunner
from torch.utils.data import DataLoader

from vlmpack_offline.cli import cli, main
from vlmpack_offline.config import config_from_dict
from vlmpack_offline.errors import MediaDecodeError
from vlmpack_offline.loader import EncoderOptions, PackDataset, PackEncoder
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.packed_format import pack_key
from vlmpack_offline.plan_file import read_plan
from vlmpack_offline.stages import bucket, plan, scan, write
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, write_shard

IMAGE_SUFFIX = {"jpg": "jpg", "mpo": "jpg", "png": "png", "apng": "png", "webp": "webp", "gif": "gif", "bmp": "bmp"}


def _sample(key: str, part: str, data: bytes) -> SyntheticSample:
    kind = "video" if part.endswith((".mp4", ".mkv", ".webm", ".avi", ".mov")) else "image"
    messages = [{"role": "user", "content": [{"type": kind, kind: part}, {"type": "text", "text": "What is it?"}]},
                {"role": "assistant", "content": "A test picture."}]  # fmt: skip
    return SyntheticSample(key=key, json={"messages": messages}, media={part: data})


def _config(tmp_path, processor_dir, **sections):
    return config_from_dict({
        "data": {"wds_dir": str(tmp_path / "src"), "work_dir": str(tmp_path / "work"),
                 "packed_wds_dir": str(tmp_path / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
        **sections,
    }, source="test")  # fmt: skip


def test_a_default_scan_drops_every_cut_file_and_keeps_every_whole_one(tmp_path, qwen25_processor_dir):
    """Each image kind and each video container, whole and cut at a quarter, half, three quarters and one byte
    short: 0 cut files counted ok, every whole one ok."""
    media = {name: data for name, data in images().items()}
    media |= {name: data for name, data in videos(tmp_path).items() if not name.endswith(".mov")}
    samples, expected = [], {}
    for number, (name, data) in enumerate(sorted(media.items())):
        stem, ext = name.rsplit(".", 1)
        part = f"m.{IMAGE_SUFFIX.get(ext, ext)}"
        cuts = {"whole": data} | {f"cut{cut}": data[:cut] for cut in
                                  sorted({len(data) // 4, len(data) // 2, 3 * len(data) // 4, len(data) - 1})}
        for label, piece in cuts.items():
            key = f"s{number:02d}_{stem}_{label}"
            samples.append(_sample(key, part, piece))
            expected[f"part-000.tar/{key}"] = "ok" if label == "whole" else "truncated_media"
    write_shard(tmp_path / "src" / "part-000.tar", samples)
    scan.run(_config(tmp_path, qwen25_processor_dir, scan={"max_drop_ratio": 1.0}))
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        rows = {row.id: row for row in manifest.iter_samples()}
    assert {sample_id: row.status for sample_id, row in rows.items()} == expected, {
        sample_id: row.error for sample_id, row in rows.items() if row.status != expected[sample_id]}
    cut_ok = [sample_id for sample_id, row in rows.items() if "_cut" in sample_id and row.status == "ok"]
    assert cut_ok == []
    assert all("m." in rows[i].error and "cut short" in rows[i].error for i in rows if expected[i] != "ok")


@pytest.fixture(scope="module")
def damaged(tmp_path_factory, qwen25_processor_dir):
    """A packed dataset written from whole JPEGs, then one pack's JPEG zeroed from its middle on inside the
    packed tar (the tar's size and index unchanged): damage after the scan, as a bad copy leaves it."""
    root = tmp_path_factory.mktemp("damaged")
    samples = [_sample(f"k{i}", "img0.jpg", image_bytes(200, 150, seed=i)) for i in range(3)]
    write_shard(root / "src" / "part-000.tar", samples)
    config = _config(root, qwen25_processor_dir, packing={"group_by": "none"}, split={"val_packs": 0})
    for stage in (scan, bucket, plan, write):
        stage.run(config)
    (pack,) = list(read_plan(config.work_dir))
    tar_path = config.packed_wds_dir / "pretrain-000000.tar"
    member = f"{pack_key(pack.pack_id)}.m0001.jpg"
    with tarfile.open(tar_path) as tar:
        info = tar.getmember(member)
    with open(tar_path, "r+b") as handle:
        handle.seek(info.offset_data + info.size // 2)
        handle.write(bytes(info.size - info.size // 2))
    return config, pack, member


def _names_everything(text: str, pack, member: str) -> None:
    assert f"pack {pack.pack_id}, sample {pack.sample_ids[1]!r}" in text
    assert f"pretrain-000000.tar member {member}" in text
    assert "rescan with scan.decode_check: true" in text and "remove the file from its source shard" in text


def test_a_pack_that_does_not_decode_names_itself_through_dataloader_workers(damaged):
    config, pack, member = damaged
    encoder = PackEncoder.from_packed_dir(config.packed_wds_dir, options=EncoderOptions())
    loader = DataLoader(PackDataset(config.packed_wds_dir, encoder), batch_size=None, num_workers=1, timeout=120)
    with pytest.raises(MediaDecodeError) as caught:
        next(iter(loader))
    text = str(caught.value)
    assert "in DataLoader worker process 0" in text  # torch re-raised the worker's error in this process
    _names_everything(text, pack, member)
    assert "OSError" in text  # PIL's own error, kept in the line


def test_inspect_says_it_in_one_line_and_exits_1(damaged, monkeypatch, capsys):
    config, pack, member = damaged
    args = ["inspect", str(config.packed_wds_dir), "--pack", str(pack.pack_id)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and isinstance(result.exception, MediaDecodeError)
    assert "Traceback" not in result.output
    _names_everything(str(result.exception), pack, member)
    monkeypatch.setattr(sys, "argv", ["vlmpack", *args])  # the real entry point's handler: one line on stderr
    monkeypatch.setattr(sys, "stdin", sys.stdin)  # main() points stdin at /dev/null; put it back afterwards
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error: pack {pack.pack_id}, sample ")
    _names_everything(err, pack, member)
