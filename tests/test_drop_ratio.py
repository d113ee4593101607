"""scan.max_drop_ratio: a scan that drops too much ends non-zero, after writing its report, naming the top reasons."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from click.testing import CliRunner

from vlmpack_offline.cli import cli
from vlmpack_offline.config import load_config
from vlmpack_offline.stages import scan
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, write_shard

REPO = Path(__file__).resolve().parents[1]


def _chat(i: int) -> dict:
    return {"messages": [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]}


def _dataset(root: Path) -> Path:
    """10 samples: 6 fine, 3 whose JSON does not parse, 1 naming an image part it lacks (40% dropped)."""
    samples = [SyntheticSample(key=f"ok{i}", json=_chat(i)) for i in range(6)]
    samples += [SyntheticSample(key=f"broken{i}", json=b"{not json") for i in range(3)]
    lost = {"messages": [{"role": "user", "content": [{"type": "image", "image": "img9.jpg"}]},
                         {"role": "assistant", "content": "a cat"}]}  # fmt: skip
    samples.append(SyntheticSample(key="lost", json=lost, media={"img0.jpg": image_bytes(64, 64)}))
    return write_shard(root / "wds" / "shard-000000.tar", samples).parent


def _config(tmp_path: Path, processor_dir: Path, **scan_section) -> Path:
    raw = {
        "data": {"wds_dir": "wds", "work_dir": "work", "packed_wds_dir": "packed"},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
    }
    if scan_section:
        raw["scan"] = scan_section
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_default_ratio_fails_the_scan_after_the_report_with_the_top_reasons(tmp_path, qwen25_processor_dir):
    _dataset(tmp_path)
    result = scan.run(load_config(_config(tmp_path, qwen25_processor_dir)))
    assert result.exit_code == 1
    last = result.summary[-1]
    assert "4 of 10 (40.0%) > scan.max_drop_ratio 0.05" in last
    assert "top reasons: bad_json 3, missing_media 1" in last
    report = [json.loads(line) for line in (tmp_path / "work" / "manifest.jsonl").read_text().splitlines()]
    assert sorted(r["reason"] for r in report if r["reason"]) == ["bad_json"] * 3 + ["missing_media"]
    again = scan.run(load_config(_config(tmp_path, qwen25_processor_dir)))  # a no-op rerun fails the same way
    assert again.skipped and again.exit_code == 1


def test_a_ratio_that_allows_the_drops_passes(tmp_path, qwen25_processor_dir):
    _dataset(tmp_path)
    result = scan.run(load_config(_config(tmp_path, qwen25_processor_dir, max_drop_ratio=0.4)))
    assert result.exit_code == 0 and result.counts["dropped"] == 4
    assert not any("max_drop_ratio" in line for line in result.summary)


def test_cli_exit_code_and_set_override(tmp_path, qwen25_processor_dir):
    _dataset(tmp_path)
    config = _config(tmp_path, qwen25_processor_dir)
    failed = CliRunner().invoke(cli, ["scan", "--config", str(config)])
    assert failed.exit_code == 1
    assert "too many samples dropped" in failed.output and "bad_json 3" in failed.output
    passed = CliRunner().invoke(cli, ["scan", "--config", str(config), "--set", "scan.max_drop_ratio=0.5"])
    assert passed.exit_code == 0, passed.output


def test_pack_wds_stops_at_the_scan(tmp_path, qwen25_processor_dir):
    _dataset(tmp_path)
    env = {"HOME": os.environ.get("HOME", str(tmp_path)), "PATH": "/usr/bin:/bin", "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "pack_wds.sh"), str(_config(tmp_path, qwen25_processor_dir))],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "too many samples dropped" in done.stdout
    assert not (tmp_path / "work" / "bins").exists()  # bucket never ran


def _ok_lengths(work: Path) -> list[int]:
    """token_len of every ok sample, read from the scan's report."""
    rows = [json.loads(line) for line in (work / "manifest.jsonl").read_text().splitlines()]
    return sorted(r["token_len"] for r in rows if not r["reason"])


def test_a_capacity_no_sample_fits_fails_bucket_after_its_report(tmp_path, qwen25_processor_dir):
    """sample.max_token_len = 10 (a typo for 10000?): every sample is overlong. Bucket writes its bins and
    overlong.jsonl, then exits 1 naming the capacity and the lengths it cut; a no-op rerun fails the same way."""
    _dataset(tmp_path)
    config = _config(tmp_path, qwen25_processor_dir, max_drop_ratio=0.5)
    assert CliRunner().invoke(cli, ["scan", "--config", str(config)]).exit_code == 0
    lengths = _ok_lengths(tmp_path / "work")
    assert len(lengths) == 6 and lengths[0] > 10
    cut = ["bucket", "--config", str(config), "--set", "sample.max_token_len=10"]
    failed = CliRunner().invoke(cli, cut)
    assert failed.exit_code == 1
    line = failed.output.strip().splitlines()[-1].strip()
    assert line == (f"no sample fits sample.max_token_len 10: all 6 are longer (ok samples: shortest {lengths[0]}, "
                    f"median {lengths[3]}, p99 {lengths[5]}, longest {lengths[5]} tokens); each is in "
                    f"{tmp_path / 'work' / 'bins' / 'overlong.jsonl'}; raise sample.max_token_len")  # fmt: skip
    overlong = (tmp_path / "work" / "bins" / "overlong.jsonl").read_text().splitlines()
    assert len(overlong) == 6 and all(json.loads(r)["status"] == "overlong" for r in overlong)
    again = CliRunner().invoke(cli, cut)
    assert again.exit_code == 1 and "up to date" in again.output and line in again.output
    fits = CliRunner().invoke(cli, ["bucket", "--config", str(config)])
    assert fits.exit_code == 0 and "no sample fits" not in fits.output and "warning" not in fits.output


def test_a_capacity_that_cuts_more_than_the_ratio_fails_every_stage_after_bucket_alike(tmp_path, qwen25_processor_dir):
    """Answers of 1..6 words: a capacity below the longest cuts the long ones. The scan dropped nothing, but
    overlong is a loss like any other: past scan.max_drop_ratio bucket exits 1 after its reports (with the
    lengths it cut), plan, write and pack_wds.sh stop with the same line; a ratio that allows it goes on."""
    chats = [{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": " ".join(["word"] * n)}]}
             for n in range(1, 7)]  # fmt: skip
    write_shard(tmp_path / "wds" / "shard-000000.tar", [SyntheticSample(key=f"k{n}", json=c) for n, c in enumerate(chats)])
    config = _config(tmp_path, qwen25_processor_dir)
    assert CliRunner().invoke(cli, ["scan", "--config", str(config)]).exit_code == 0
    lengths = _ok_lengths(tmp_path / "work")
    capacity = lengths[3]  # the two longest do not fit
    n_over = sum(length > capacity for length in lengths)
    assert 0 < n_over < len(lengths)
    cut = ("--set", f"sample.max_token_len={capacity}", "--set", "scan.max_drop_ratio=0.1")
    gate = f"too many samples dropped: {n_over} of 6 ({n_over / 6:.1%}) > scan.max_drop_ratio 0.1; top reasons: overlong {n_over}"
    for stage in ("bucket", "plan", "write"):
        done = CliRunner().invoke(cli, [stage, "--config", str(config), *cut])
        assert done.exit_code == 1 and gate in done.output, (stage, done.output)
    assert f"{n_over} of 6 ok samples are longer than sample.max_token_len {capacity}" in done.output or stage != "bucket"
    assert not (tmp_path / "packed").exists()
    env = {"HOME": os.environ.get("HOME", str(tmp_path)), "PATH": "/usr/bin:/bin", "PYTHON": sys.executable}
    piped = subprocess.run(["bash", str(REPO / "scripts" / "pack_wds.sh"), str(config), *cut],
                           capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)  # fmt: skip
    assert piped.returncode == 1 and gate in piped.stdout and "stage 'bucket' failed" in piped.stderr
    allowed = ("--set", f"sample.max_token_len={capacity}", "--set", "scan.max_drop_ratio=0.5")
    for stage in ("bucket", "plan", "write"):
        assert CliRunner().invoke(cli, [stage, "--config", str(config), *allowed]).exit_code == 0
