"""``vlmpack scan`` records every sample (ok or dropped with its reason), resumes after kill -9,
and gives the same manifest whatever the number of workers."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from vlmpack_offline.cli import cli
from vlmpack_offline.config import load_config
from vlmpack_offline.errors import StaleArtifactError
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.stages import scan
from vlmpack_offline.synthetic.shards import (
    FAULT_REASONS,
    SyntheticSample,
    expected_fault,
    generate_dataset,
    image_bytes,
    truncate,
    write_shard,
)


def _write_config(tmp_path: Path, wds, processor_dir: Path, work: str = "work", **sections) -> Path:
    raw = {
        "data": {
            "wds_dir": wds if isinstance(wds, list) else str(wds),
            "work_dir": str(tmp_path / work),
            "packed_wds_dir": str(tmp_path / "packed"),
        },
        "sample": {
            "max_token_len": 16384
        },  # the 4000x3000 image (15.5k tokens) fits; the overlong fault does not
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
        "scan": {"max_drop_ratio": 1.0},  # the datasets here are made of faults on purpose
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    path = tmp_path / f"{work}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _rows(work_dir: Path) -> list[tuple]:
    with Manifest(manifest_path(work_dir)) as manifest:
        return sorted(
            (
                s.id,
                s.shard,
                s.seq,
                s.key,
                s.media_type,
                s.token_len,
                s.media_tokens,
                s.n_images,
                s.n_videos,
                s.members,
                s.status,
                s.error,
            )
            for s in manifest.iter_samples()
        )


def _scan_cli(config: Path):
    result = CliRunner().invoke(cli, ["scan", "--config", str(config)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result


@pytest.fixture(scope="module")
def faulty_wds(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("faulty")
    generate_dataset(root, seed=1, n_shards=2, samples_per_shard=6, include_faults=True)
    # a sample with no .json part, and a shard cut in the middle of a member
    write_shard(
        root / "extra" / "no-json.tar",
        [SyntheticSample(key="lonely", json=None, media={"img0.jpg": image_bytes(40, 40)})],
    )
    samples = [
        SyntheticSample(
            key=f"t{i}",
            json={
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": f"answer {i}"},
                ]
            },
            media={"pad.bin": bytes(3000)},
        )
        for i in range(4)
    ]
    cut = write_shard(root / "extra" / "cut.tar", samples)
    truncate(cut, 2 * 4096 + 1536)  # inside the third sample's members
    return root


def test_every_fault_gets_its_reason_and_the_run_goes_on(tmp_path, faulty_wds, qwen25_processor_dir):
    config = _write_config(tmp_path, faulty_wds, qwen25_processor_dir)
    result = _scan_cli(config)
    assert "dropped by reason:" in result.output and "samples:" in result.output
    rows = {r[0]: r for r in _rows(tmp_path / "work")}
    statuses = {}
    for sample_id, row in rows.items():
        status, error = row[10], row[11]
        statuses[sample_id] = status
        if not sample_id.startswith("extra/"):
            meant = expected_fault(row[3])  # overlong is bucket's drop now: the scan records its length as ok
            assert status == ("ok" if meant in (None, "overlong") else meant), (sample_id, status, error)
        assert (status == "ok") == (error == ""), (sample_id, error)
    assert set(FAULT_REASONS) - {"overlong"} <= set(statuses.values())
    assert statuses["extra/no-json.tar/lonely"] == "bad_json"
    assert "no .json part" in rows["extra/no-json.tar/lonely"][11]
    # the truncated shard keeps the samples before the cut
    assert [statuses[f"extra/cut.tar/t{i}"] for i in range(2)] == ["ok", "ok"]
    assert statuses["extra/cut.tar/t2"] == "truncated_shard"
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        shard_status = {s.shard: s.status for s in manifest.shards()}
    assert shard_status["extra/cut.tar"] == "truncated_shard" and shard_status["extra/no-json.tar"] == "ok"
    # manifest.jsonl mirrors sqlite in (shard, seq) order
    lines = [json.loads(line) for line in (tmp_path / "work" / "manifest.jsonl").read_text().splitlines()]
    assert sorted(line["id"] for line in lines) == sorted(rows)
    assert all(line["reason"] == (None if line["status"] == "ok" else line["status"]) for line in lines)


def test_rerun_is_a_no_op_and_other_inputs_are_refused(tmp_path, faulty_wds, qwen25_processor_dir):
    config = _write_config(tmp_path, faulty_wds, qwen25_processor_dir)
    first = scan.run(load_config(config))
    again = scan.run(load_config(config))
    assert not first.skipped and again.skipped
    assert again.counts["ok"] == first.counts["ok"] and again.counts["dropped"] == first.counts["dropped"]
    assert scan.run(load_config(config, ("sample.max_token_len=4096",))).skipped  # capacity is bucket's business
    with pytest.raises(StaleArtifactError, match=r"model\.processor_kwargs\.max_pixels \(now 200704; not set "
                                                 r"before\).*`vlmpack scan --rescan`"):
        scan.run(load_config(config, ("model.processor_kwargs.max_pixels=200704",)))
    result = CliRunner().invoke(cli, ["scan", "--config", str(config), "--set", "video.fps=1.0"])
    assert result.exit_code != 0 and isinstance(result.exception, StaleArtifactError)


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("many")
    generate_dataset(root, seed=2, n_shards=6, samples_per_shard=8, include_faults=True)
    return root


def test_workers_two_equals_workers_one(tmp_path, many_shards, qwen25_processor_dir):
    one = _write_config(tmp_path, many_shards, qwen25_processor_dir, work="one", process={"workers": 1})
    two = _write_config(tmp_path, many_shards, qwen25_processor_dir, work="two", process={"workers": 2})
    scan.run(load_config(one))
    scan.run(load_config(two))
    assert _rows(tmp_path / "one") == _rows(tmp_path / "two")
    assert (tmp_path / "one" / "manifest.jsonl").read_bytes() == (
        tmp_path / "two" / "manifest.jsonl"
    ).read_bytes()


def test_kill_minus_9_then_rerun_gives_the_uninterrupted_manifest(
    tmp_path, many_shards, qwen25_processor_dir
):
    config = _write_config(tmp_path, many_shards, qwen25_processor_dir, work="killed")
    db = manifest_path(tmp_path / "killed")
    env = {**os.environ, "VLMPACK_TEST_KILL_AT": "scan:shard"}  # SIGKILL once a first shard is committed (kill_points.py)
    killed = subprocess.run(
        [sys.executable, "-c", "from vlmpack_offline.cli import main; main()", "scan", "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True,
        timeout=300,  # a hang guard, not a speed bound
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    with sqlite3.connect(db) as conn:
        done = conn.execute("SELECT COUNT(*) FROM shards").fetchone()[0]
    assert done == 1, f"{done} shards committed before the kill"
    with Manifest(db) as manifest:
        assert manifest.get_meta("fingerprint") is None  # later stages see an unfinished scan
    resumed = scan.run(load_config(config))
    assert resumed.counts["shards_scanned"] < 6
    reference = _write_config(tmp_path, many_shards, qwen25_processor_dir, work="reference")
    scan.run(load_config(reference))
    assert _rows(tmp_path / "killed") == _rows(tmp_path / "reference")
    assert (tmp_path / "killed" / "manifest.jsonl").read_bytes() == (
        tmp_path / "reference" / "manifest.jsonl"
    ).read_bytes()


def test_shards_from_a_glob_and_a_list_are_named_relative_to_their_common_root(tmp_path, many_shards):
    by_dir = scan.discover_shards(str(many_shards))
    assert [t.shard for t in by_dir][-1] == "sub/shard-000005.tar"
    by_glob = scan.discover_shards(str(many_shards / "shard-00000[0-1].tar"))
    assert [t.shard for t in by_glob] == ["shard-000000.tar", "shard-000001.tar"]
    by_list = scan.discover_shards([str(many_shards / "shard-000000.tar"), str(many_shards / "sub")])
    assert [t.shard for t in by_list] == ["shard-000000.tar", "sub/shard-000005.tar"]


def test_auto_tokenizer_keeps_text_and_drops_media_with_a_reason(tmp_path, qwen25_processor_dir):
    wds = tmp_path / "wds"
    generate_dataset(wds, seed=4, n_shards=1, samples_per_shard=8, video=False)
    config = _write_config(tmp_path, wds, qwen25_processor_dir, model={"processor_loader": "auto_tokenizer"})
    scan.run(load_config(config))
    rows = _rows(tmp_path / "work")
    assert {r[10] for r in rows if r[4] == "text"} == {"ok"}
    assert {r[10] for r in rows if r[4] == "image"} == {"unsupported_media"}
