"""A rerun with a changed setting says which key changed (old -> new) and the first stage to rerun.

Each stage records the settings it was built from by name (``provenance``); every later stage checks
the chain manifest -> bins -> plan before its own work, so a changed counting setting is caught by
``bucket`` (not "up to date"), by ``plan`` and by ``write`` alike, and ``scan --rescan`` is the way on.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from vlmpack_offline.cli import cli
from vlmpack_offline.errors import VlmpackError
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, write_shard

MAX_PIXELS = "model.processor_kwargs.max_pixels"


@pytest.fixture
def packed(tmp_path: Path, qwen25_processor_dir: Path) -> Path:
    """Six image samples, scanned, bucketed, planned and written; returns the config path."""
    samples = [
        SyntheticSample(key=f"s{i}", json={"messages": [
            {"role": "user", "content": [{"type": "image", "image": "img.jpg"}, {"type": "text", "text": f"q{i}"}]},
            {"role": "assistant", "content": f"answer {i}"}]}, media={"img.jpg": image_bytes(96 + 16 * i, 64)})
        for i in range(6)
    ]
    write_shard(tmp_path / "wds" / "shard-000000.tar", samples)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "data": {"wds_dir": "wds", "work_dir": "work", "packed_wds_dir": "packed"},
        "sample": {"max_token_len": 1024},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(qwen25_processor_dir)}},
    }))
    for stage in ("scan", "bucket", "plan", "write"):
        result = _run(stage, config)
        assert result.exit_code == 0, result.output
    return config


@dataclass(frozen=True)
class _Outcome:
    exit_code: int  # what `vlmpack` exits with (cli.main maps a VlmpackError to its exit_code)
    output: str  # the summary, or the error's one line


def _run(stage: str, config: Path, *extra: str) -> _Outcome:
    result = CliRunner().invoke(cli, [stage, "--config", str(config), *extra])
    if isinstance(result.exception, VlmpackError):
        return _Outcome(result.exception.exit_code, str(result.exception))
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return _Outcome(result.exit_code, result.output)


def test_a_changed_counting_setting_is_named_by_bucket_plan_write_and_scan(packed):
    changed = f"{MAX_PIXELS}=50176"
    for stage in ("bucket", "plan", "write", "scan"):
        refused = _run(stage, packed, "--set", changed)
        assert refused.exit_code == 3, (stage, refused.output)
        assert f"{MAX_PIXELS} (now 50176; not set before)" in refused.output, (stage, refused.output)
        assert "`vlmpack scan --rescan`" in refused.output, (stage, refused.output)


def test_rescan_counts_again_and_the_later_stages_follow(packed):
    changed = f"{MAX_PIXELS}=50176"
    rescanned = _run("scan", packed, "--rescan", "--set", changed)
    assert rescanned.exit_code == 0, rescanned.output
    assert "up to date" not in rescanned.output
    bucketed = _run("bucket", packed, "--set", changed)
    assert bucketed.exit_code == 0 and "up to date" not in bucketed.output, bucketed.output
    # the old config is now the stale one, and is named as such
    back = _run("bucket", packed)
    assert back.exit_code == 3 and f"{MAX_PIXELS} (was 50176; not set now)" in back.output, back.output


def test_a_changed_packing_setting_names_the_key_and_bucket(packed):
    refused = _run("plan", packed, "--set", "sample.max_token_len=2048")
    assert refused.exit_code == 3
    assert "sample.max_token_len 1024 -> 2048): rerun `vlmpack bucket`, then plan and write" in refused.output


def test_a_changed_plan_setting_names_the_key_and_plan(packed):
    refused = _run("write", packed, "--set", "packing.seed=9")
    assert refused.exit_code == 3
    assert "packing.seed 0 -> 9): rerun `vlmpack plan`, then write" in refused.output, refused.output
    assert _run("plan", packed, "--set", "packing.seed=9").exit_code == 0
    assert _run("write", packed, "--set", "packing.seed=9").exit_code == 0


def test_a_setting_no_stage_reads_reruns_nothing(packed):
    for stage in ("scan", "bucket", "plan", "write"):
        again = _run(stage, packed, "--set", "scan.max_drop_ratio=0.5")
        assert again.exit_code == 0 and "up to date" in again.output, (stage, again.output)
