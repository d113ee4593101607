"""No dead ends: a setup mistake ends a stage at once with one line naming the real cause.

The pool tests run ``python -m vlmpack_offline`` in a subprocess with a timeout: what
they prove is that the process exits (a worker that cannot start used to be restarted
by the pool forever).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from vlmpack_offline.cli import cli
from vlmpack_offline.errors import ConfigError, StaleArtifactError
from vlmpack_offline.executor import WorkerDiedError, WorkerStartError, process_map
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.synthetic.shards import generate_dataset
from vlmpack_offline.tokens import FAST_FAMILIES, load_model_rules

REPO = Path(__file__).resolve().parents[1]
EXIT_LIMIT_S = 120  # a hang guard, not a speed bound: the hang it guards against never ends


def _config_file(tmp_path: Path, wds, processor_dir: Path | str, **sections) -> Path:
    raw = {
        "data": {
            "wds_dir": [str(p) for p in wds] if isinstance(wds, list) else str(wds),
            "work_dir": str(tmp_path / "work"),
            "packed_wds_dir": str(tmp_path / "packed"),
        },
        "sample": {"max_token_len": 16384},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _without_chat_template(source: Path, target: Path) -> Path:
    """A processor folder whose model checks pass but whose tokenizer a worker cannot set up."""
    shutil.copytree(source, target)
    (target / "chat_template.jinja").unlink()
    return target


@pytest.mark.parametrize("broken", ["missing_folder", "worker_setup_fails"])
def test_two_workers_that_cannot_start_end_the_scan_with_one_line(
    broken, tmp_path, small_dataset, qwen25_processor_dir
):
    if broken == "missing_folder":
        processor, cause = tmp_path / "no-such-processor", "does not exist"
    else:
        processor, cause = _without_chat_template(qwen25_processor_dir, tmp_path / "proc"), "no chat template"
    config = _config_file(tmp_path, small_dataset, processor, process={"workers": 2})
    done = subprocess.run(  # returns at all: the process exits (the timeout only guards the suite from a hang)
        [sys.executable, "-m", "vlmpack_offline", "scan", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=EXIT_LIMIT_S,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and cause in lines[0], done.stderr
    assert str(processor) in lines[0]


def test_a_scan_stopped_before_its_first_shard_restarts_with_the_fixed_setup(
    tmp_path, small_dataset, qwen25_processor_dir
):
    broken = _without_chat_template(qwen25_processor_dir, tmp_path / "proc")
    config = _config_file(tmp_path, small_dataset, broken)
    first = CliRunner().invoke(cli, ["scan", "--config", str(config)])
    assert isinstance(first.exception, ConfigError) and "no chat template" in str(first.exception)
    fixed = ["scan", "--config", str(config), "--set",
             f"model.processor_kwargs.pretrained_model_name_or_path={qwen25_processor_dir}"]  # fmt: skip
    second = CliRunner().invoke(cli, fixed)
    assert second.exit_code == 0, repr(second.exception)  # not "built from other inputs: delete work_dir"


def test_a_model_type_typo_lists_the_supported_families(make_config, qwen25_processor_dir):
    config = make_config(wds_dir="unused", model={"model_type": "qwen2_5vl"})
    with pytest.raises(ConfigError) as caught:
        load_model_rules(config.model)
    message = str(caught.value)
    assert "'qwen2_5vl'" in message and "did you mean 'qwen2_5_vl'" in message
    for family in sorted(FAST_FAMILIES):
        assert family in message
    for slow in ("gemma3", "llava_onevision", "mistral3"):  # HF vision-language types the slow path loads
        assert slow in message
    assert "\n" not in message


def test_a_model_type_the_folder_contradicts_is_refused_naming_both(
    tmp_path, make_config, qwen25_processor_dir
):
    config = make_config(wds_dir="unused", model={"model_type": "qwen3_vl"})
    with pytest.raises(
        ConfigError, match=r"'qwen3_vl' contradicts .*config.json has model_type 'qwen2_5_vl'"
    ):
        load_model_rules(config.model)
    # without config.json the folder's processor class still tells
    bare = shutil.copytree(qwen25_processor_dir, tmp_path / "bare")
    (bare / "config.json").unlink()
    config = make_config(wds_dir="unused", processor_dir=bare, model={"model_type": "qwen3_vl"})
    with pytest.raises(ConfigError, match=r"'Qwen2_5_VLProcessor', a qwen3_vl folder has 'Qwen3VLProcessor'"):
        load_model_rules(config.model)


def test_a_custom_model_type_the_folder_declares_is_accepted(tmp_path, make_config, qwen25_processor_dir):
    custom = shutil.copytree(qwen25_processor_dir, tmp_path / "custom")
    (custom / "config.json").write_text('{"model_type": "my_remote_code_vlm"}')
    (custom / "preprocessor_config.json").write_text('{"patch_size": 14}')  # no processor_class
    config = make_config(wds_dir="unused", processor_dir=custom, model={"model_type": "my_remote_code_vlm"})
    rules = load_model_rules(config.model)
    assert rules.model_type == "my_remote_code_vlm" and not rules.fast


def test_limit_shards_scans_the_first_shards_and_leaves_the_scan_unfinished(
    tmp_path, small_dataset, qwen25_processor_dir
):
    config = _config_file(tmp_path, small_dataset, qwen25_processor_dir)
    help_text = CliRunner().invoke(cli, ["scan", "--help"]).output
    assert "--limit-shards" in help_text and "first N shards" in help_text
    trial = CliRunner().invoke(cli, ["scan", "--config", str(config), "--limit-shards", "1"])
    assert trial.exit_code == 0, repr(trial.exception)
    assert "1 not scanned yet" in trial.output and "rerun without it" in trial.output
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        assert [s.shard for s in manifest.shards()] == ["shard-000000.tar"]  # the first in sorted order
        assert manifest.get_meta("fingerprint") is None
    refused = CliRunner().invoke(cli, ["bucket", "--config", str(config)])
    assert isinstance(refused.exception, StaleArtifactError)
    full = CliRunner().invoke(cli, ["scan", "--config", str(config)])
    assert full.exit_code == 0 and "(1 scanned now, 1 already done)" in full.output


def test_pack_wds_runs_without_vlmpack_on_path_and_ends_with_stats(tmp_path, qwen25_processor_dir):
    wds = tmp_path / "wds"
    generate_dataset(wds, seed=5, n_shards=1, samples_per_shard=4, video=False)
    config = _config_file(tmp_path, wds, qwen25_processor_dir, packed_wds={"maxcount": 2})
    env = {
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "PATH": "/usr/bin:/bin",  # no .venv/bin: no `vlmpack` console script
        "PYTHON": sys.executable,
    }
    assert shutil.which("vlmpack", path=env["PATH"]) is None
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "pack_wds.sh"), str(config)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for stage in ("scan", "bucket", "plan", "write", "verify", "stats"):
        assert f"-m vlmpack_offline {stage} --config" in done.stdout
    assert "fill ratio" in done.stdout and (tmp_path / "work" / "stats.json").is_file()
    assert done.stdout.rstrip().splitlines()[-2].split()[0] == "stats"  # timing table: stats ran last


def _setup_that_fails(reason: str) -> None:
    raise ImportError(f"{reason}\n(second line of a long message)")


def _square(x: int) -> int:
    return x * x


def _die(_x: int) -> int:
    os._exit(9)  # like the OOM killer: no exception, no result


@pytest.mark.parametrize("workers", [1, 2])
def test_a_setup_failure_is_one_line_exit_2_for_any_number_of_workers(workers):
    with pytest.raises(WorkerStartError) as caught:
        list(
            process_map(
                _square,
                range(8),
                workers=workers,
                initializer=_setup_that_fails,
                initargs=("no torchvision",),
            )
        )
    assert str(caught.value) == (
        "a worker process could not start: ImportError: no torchvision (second line of a long message)"
    )
    assert caught.value.exit_code == 2


def test_pool_results_keep_item_order_and_a_killed_worker_ends_the_stage():
    assert list(process_map(_square, range(10), workers=2)) == [0, 1, 4, 9, 16, 25, 36, 49, 64, 81]
    assert sorted(process_map(_square, range(5), workers=2, ordered=False)) == [0, 1, 4, 9, 16]
    with pytest.raises(WorkerDiedError, match="worker process died"):
        list(process_map(_die, range(4), workers=2, stage="write"))
