"""``process.executor: ray``: scan and write on a local Ray cluster give the local executor's bytes,
a lost worker's task is retried, and a killed driver resumes without redoing finished shards."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _packed_fixture import build_inputs

from vlmpack_offline.config import config_from_dict, load_config
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.stages import scan, write
from vlmpack_offline.synthetic.shards import generate_dataset

ray = pytest.importorskip("ray")
N_SHARDS = 4  # source shards of the scan tests, one Ray task each


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster of 2 CPUs for the module; drivers in subprocesses join it by address."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ray_wds")
    generate_dataset(root, seed=3, n_shards=N_SHARDS, samples_per_shard=6, include_faults=False, video=False)
    return root


def _scan_config(tmp_path: Path, wds: Path, processor_dir: Path, work: str, **process) -> Path:
    raw = {
        "data": {"wds_dir": str(wds), "work_dir": str(tmp_path / work), "packed_wds_dir": str(tmp_path / "packed")},
        "sample": {"max_token_len": 16384},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
        "process": {"workers": 2, **process},
    }
    path = tmp_path / f"{work}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


def _rows(work_dir: Path) -> list:
    with Manifest(manifest_path(work_dir)) as manifest:
        return sorted((s.id, s.status, s.token_len, s.media_tokens, s.members, s.error) for s in manifest.iter_samples())


def _samples(work_dir: Path) -> list:
    with Manifest(manifest_path(work_dir)) as manifest:
        return list(manifest.iter_samples())


def _driver(config: Path, stage: str, die_after: str) -> int:
    """Run ``vlmpack <stage>`` in a subprocess that SIGKILLs itself after N results (the test hook)."""
    command = [sys.executable, "-c", "from vlmpack_offline.cli import main; main()", stage, "--config", str(config)]
    env = {**__import__("os").environ, "VLMPACK_TEST_RAY_DIE_AFTER": die_after}
    return subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300).returncode


@pytest.fixture(scope="module")
def local_scan(tmp_path_factory, shards, qwen25_processor_dir) -> Path:
    tmp = tmp_path_factory.mktemp("local_scan")
    scan.run(load_config(_scan_config(tmp, shards, qwen25_processor_dir, "work")))
    return tmp / "work"


@pytest.mark.slow
def test_ray_scan_with_a_lost_worker_equals_the_local_scan(
    cluster, tmp_path, shards, local_scan, qwen25_processor_dir, monkeypatch
):
    marker = tmp_path / "crashed-once"
    monkeypatch.setenv("VLMPACK_TEST_RAY_CRASH", f"1:{marker}")  # the first attempt of task 1 exits
    config = load_config(_scan_config(tmp_path, shards, qwen25_processor_dir, "work", executor="ray"))
    result = scan.run(config)
    assert marker.exists(), "the crash hook never fired"
    assert result.counts["shards_scanned"] == N_SHARDS
    assert (tmp_path / "work" / "manifest.jsonl").read_bytes() == (local_scan / "manifest.jsonl").read_bytes()
    assert _rows(tmp_path / "work") == _rows(local_scan)


@pytest.mark.slow
def test_killed_ray_scan_driver_resumes_and_ends_identical(
    cluster, tmp_path, shards, local_scan, qwen25_processor_dir
):
    config = _scan_config(tmp_path, shards, qwen25_processor_dir, "work", executor="ray", ray_address=cluster)
    assert _driver(config, "scan", "scan:2") == -9
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        assert len(manifest.done_shards()) == 2
        assert manifest.get_meta("fingerprint") is None
    resumed = scan.run(load_config(config))
    assert resumed.counts["shards_scanned"] == N_SHARDS - 2
    assert (tmp_path / "work" / "manifest.jsonl").read_bytes() == (local_scan / "manifest.jsonl").read_bytes()


@pytest.mark.slow
def test_ray_write_equals_local_and_a_killed_driver_resumes(cluster, tmp_path):
    inputs = build_inputs(tmp_path, packed_wds={"maxcount": 2})
    local = write.run(inputs.config)
    reference = _hashes(inputs.config.packed_wds_dir)
    on_ray = tmp_path / "on_ray"
    result = write.run(inputs.with_config(data={"packed_wds_dir": str(on_ray)}, process={"executor": "ray"}))
    assert result.counts == local.counts
    assert _hashes(on_ray) == reference

    killed = tmp_path / "killed"
    sections = {"data": {"packed_wds_dir": str(killed)}, "process": {"executor": "ray", "ray_address": cluster}}
    config_file = inputs.config_file(tmp_path / "killed.yaml", **sections)
    assert _driver(config_file, "write", "write:2") == -9  # dies with shards 0 and 1 written
    assert sorted(p.name for p in killed.glob("pretrain-*.tar")) == ["pretrain-000000.tar", "pretrain-000001.tar"]
    resumed = write.run(load_config(config_file))
    assert resumed.counts["shards_written"] == local.counts["shards"] - 2
    assert _hashes(killed) == reference


def test_executor_ray_without_ray_installed_is_one_config_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    config = config_from_dict({"data": {"wds_dir": str(tmp_path), "work_dir": str(tmp_path / "w")},
                               "process": {"executor": "ray"}})  # fmt: skip
    with pytest.raises(ConfigError, match=r"process.executor: ray .*needs the `ray` package, which is not installed: pip install 'vlmpack-offline\[ray\]'"):
        scan.run(config)


def test_ray_address_without_executor_ray_is_refused():
    with pytest.raises(ConfigError, match="process.ray_address is set but process.executor is 'local'"):
        config_from_dict({"process": {"ray_address": "auto"}})


def test_a_sample_past_its_budget_is_dropped_on_ray_too(cluster, tmp_path, qwen25_processor_dir):
    """``process.max_seconds_per_sample`` holds in Ray's task workers as in local ones (``test_time_budget``)."""
    from _slow_input import shard_with_one_slow_sample

    shard_with_one_slow_sample(tmp_path / "src" / "part-000.tar")
    config = load_config(_scan_config(tmp_path, tmp_path / "src", qwen25_processor_dir, "work", executor="ray",
                                      ray_address=cluster, max_seconds_per_sample=2.0))
    config = config_from_dict({**yaml.safe_load(Path(config.source).read_text()), "scan": {"max_drop_ratio": 1.0}})
    scan.run(config)  # ends at all only because the budget stopped the sample: alone it needs many minutes
    samples = {s.id.split("/")[-1]: s for s in _samples(config.work_dir)}
    assert {key: s.status for key, s in samples.items()} == {"before": "ok", "slow": "too_slow", "after": "ok"}
    assert "process.max_seconds_per_sample (2 s)" in samples["slow"].error
