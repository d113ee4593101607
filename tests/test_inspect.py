"""``vlmpack inspect`` on real write output: the learned text it shows is each sample's assistant answer."""

from __future__ import annotations

from click.testing import CliRunner

from vlmpack_offline.cli import cli
from vlmpack_offline.config import config_from_dict
from vlmpack_offline.plan_file import read_plan
from vlmpack_offline.stages import bucket, plan, scan, write
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, write_shard


def test_inspect_shows_splits_and_a_pack_with_what_each_sub_sample_learns(tmp_path, qwen25_processor_dir):
    answers = {f"k{i}": f"Answer number {i}." for i in range(6)}
    samples = []
    for i, (key, answer) in enumerate(answers.items()):
        user = [{"type": "image", "image": "img0.jpg"}, {"type": "text", "text": f"Q{i}?"}] if i % 2 else f"Q{i}?"
        media = {"img0.jpg": image_bytes(40, 30, seed=i)} if i % 2 else {}
        samples.append(SyntheticSample(key=key, json={"messages": [{"role": "user", "content": user},
                                                                   {"role": "assistant", "content": answer}]},
                                       media=media))  # fmt: skip
    write_shard(tmp_path / "src" / "part-000.tar", samples)
    config = config_from_dict({
        "data": {"wds_dir": str(tmp_path / "src"), "work_dir": str(tmp_path / "work"),
                 "packed_wds_dir": str(tmp_path / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(qwen25_processor_dir)}},
        "packing": {"group_by": "none"}, "split": {"val_packs": 0},
    }, source="test")  # fmt: skip
    for stage in (scan, bucket, plan, write):
        stage.run(config)
    runner = CliRunner()
    summary = runner.invoke(cli, ["inspect", str(config.packed_wds_dir)])
    assert summary.exit_code == 0, summary.output
    assert "train" in summary.output and "qwen2_5_vl" in summary.output
    (pack,) = list(read_plan(config.work_dir))
    shown = runner.invoke(cli, ["inspect", str(config.packed_wds_dir), "--pack", str(pack.pack_id), "--render"])
    assert shown.exit_code == 0, shown.output
    for sample_id in pack.sample_ids:
        key = sample_id.rsplit("/", 1)[1]
        assert sample_id in shown.output
        assert f"learns: {(answers[key] + '<|im_end|>')!r}" in shown.output
    assert "<image m0000.jpg>" in shown.output
    missing = runner.invoke(cli, ["inspect", str(config.packed_wds_dir), "--pack", "999"])
    assert missing.exit_code != 0


def test_inspect_of_a_bucket_url_says_it_reads_a_local_folder():
    result = CliRunner().invoke(cli, ["inspect", "s3://team/packed"])
    assert result.exit_code == 2
    assert "'s3://team/packed' is a URL: inspect reads a local packed folder" in result.output
    assert "does not exist" not in result.output
