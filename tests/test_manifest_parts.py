"""``data.manifest_layout: parts``: each scan task writes its shard's rows to ``manifest.parts/<shard>.sqlite``
and the driver commits only the shard's record and sums; every later stage reads the parts.

The spec: the same data scanned in either layout gives the same rows in the same order, the same drop
accounting, and byte-identical bins, plan, stats and packed shards; a scan killed with ``kill -9`` (between
a part's rename and its commit, or after a commit) resumes to byte-identical parts and outputs; a rerun
is a no-op; the Ray executor writes the same parts as the local one. Two sources of shards with every
fault kind (``generate_dataset(include_faults=True)``), one shard in a sub-folder: part names keep folders.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vlmpack_offline.config import config_from_dict, load_config
from vlmpack_offline.errors import ConfigError, StaleArtifactError
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.stages import bucket, plan, scan, stats, verify, write
from vlmpack_offline.stages._ok_samples import load_layout_unfit, load_ok_samples, source_counts
from vlmpack_offline.synthetic.shards import generate_dataset

pytestmark = pytest.mark.slow

STAGES = (bucket, plan, write, verify, stats)
SOURCES = ("alpha", "beta")
VARYING = {"seconds"}  # scan counts that depend on the clock


def _raw(root: Path, work: str, layout: str, **data) -> dict:
    return {
        "data": {"sources": [{"name": name, "wds_dir": str(root / "src" / name)} for name in SOURCES],
                 "work_dir": str(root / work), "packed_wds_dir": str(root / f"{work}-packed"),
                 "manifest_layout": layout, **data},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(root / "processor")}},
        "sample": {"max_token_len": 4096},
        "process": {"workers": 2},
        "packed_wds": {"maxcount": 2},
        "scan": {"max_drop_ratio": 1.0},
    }


def _config_file(root: Path, work: str, layout: str, **data) -> Path:
    path = root / f"{work}.yaml"
    path.write_text(yaml.safe_dump(_raw(root, work, layout, **data)))
    return path


def _files(top: Path, *, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Every file under ``top`` by content (sha256), names relative to it (but those starting with ``skip``)."""
    return {str(p.relative_to(top)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(top.rglob("*"))
            if p.is_file() and not str(p.relative_to(top)).startswith(skip)}


def _outputs(root: Path, work: str) -> dict[str, str]:
    """What bucket, plan, write and stats leave: work_dir without the manifest itself, and the packed output."""
    out = {f"work/{k}": v for k, v in _files(root / work, skip=("manifest",)).items()}
    out.update({f"packed/{k}": v for k, v in _files(root / f"{work}-packed").items()})
    return out


def _run_all(config_path: Path) -> dict[str, object]:
    config = load_config(config_path)
    results = {"scan": scan.run(config)}
    for stage in STAGES:
        results[stage.__name__.rsplit(".", 1)[1]] = stage.run(config)
    return results


@pytest.fixture(scope="module")
def runs(tmp_path_factory, qwen25_processor_dir) -> dict:
    """The whole pipeline once per layout on the same shards."""
    root = tmp_path_factory.mktemp("parts")
    for i, name in enumerate(SOURCES):
        generate_dataset(root / "src" / name, seed=20 + i, n_shards=2, samples_per_shard=6, include_faults=True)
    (root / "processor").symlink_to(qwen25_processor_dir)
    results = {layout: _run_all(_config_file(root, layout, layout)) for layout in ("single", "parts")}
    return {"root": root, "results": results}


def _rows(work: Path) -> list:
    with Manifest(manifest_path(work)) as manifest:
        return list(manifest.iter_samples())


def test_parts_hold_the_rows_one_file_per_shard_readable_by_plain_sqlite(runs):
    root = runs["root"]
    work = root / "parts"
    with Manifest(manifest_path(work)) as manifest:
        (in_main,) = manifest.conn.execute("SELECT COUNT(*) FROM samples").fetchone()
        shards = manifest.shards()
    assert in_main == 0  # no sample row passed through the driver
    parts = sorted(p.relative_to(work / "manifest.parts").as_posix() for p in (work / "manifest.parts").rglob("*")
                   if p.is_file())
    assert parts == sorted(f"{s.shard}.sqlite" for s in shards)
    assert any("/sub/" in part for part in parts)  # a shard's folders are kept in its part's name
    for shard in shards:
        conn = sqlite3.connect(work / "manifest.parts" / f"{shard.shard}.sqlite")
        rows = conn.execute("SELECT shard, seq FROM samples ORDER BY seq").fetchall()
        conn.close()
        assert rows == [(shard.shard, seq) for seq in range(shard.n_samples)]
    assert not (work / "manifest.jsonl").exists()  # not asked for in the parts layout
    assert (root / "single" / "manifest.jsonl").exists()  # the single layout keeps writing it


def test_both_layouts_give_the_same_samples_in_the_same_order(runs):
    root = runs["root"]
    single, parts = _rows(root / "single"), _rows(root / "parts")
    assert {s.status for s in single} > {"ok"}  # drops of several reasons are among them
    assert parts == single
    a, b = load_ok_samples(root / "single", with_ids=True), load_ok_samples(root / "parts", with_ids=True)
    for column in ("token_len", "media_tokens", "media_code", "encoder_patches", "encoder_attention",
                   "audio_frames", "audio_attention", "source_code", "id_offsets"):
        assert getattr(a, column).tolist() == getattr(b, column).tolist(), column
    assert (a.id_chunks, a.media_names, a.source_names, a.drops) == (b.id_chunks, b.media_names, b.source_names,
                                                                      b.drops)
    assert set(a.source_names) == set(SOURCES)
    assert load_layout_unfit(root / "single", "packed_captioning").ids  # some sample that layout cannot hold
    for sample_type in ("packed_captioning", "packed_vqa"):
        one, other = load_layout_unfit(root / "single", sample_type), load_layout_unfit(root / "parts", sample_type)
        assert (other.index.tolist(), other.ids, other.token_len, other.why) == \
            (one.index.tolist(), one.ids, one.token_len, one.why)
    some = [s.id for s in single[::5]]
    with Manifest(manifest_path(root / "single")) as one, Manifest(manifest_path(root / "parts")) as other:
        assert other.get_samples(some) == one.get_samples(some)
        assert [s.id for s in other.iter_samples("ok")] == [s.id for s in one.iter_samples("ok")]


def test_drop_accounting_is_the_same_in_both_layouts(runs):
    root = runs["root"]
    single, parts = runs["results"]["single"], runs["results"]["parts"]
    for stage in ("scan", "bucket", "plan", "write", "verify", "stats"):
        assert parts[stage].exit_code == single[stage].exit_code == 0, (stage, parts[stage].summary)
        assert {k: v for k, v in parts[stage].counts.items() if k not in VARYING} == \
            {k: v for k, v in single[stage].counts.items() if k not in VARYING}, stage
    assert single["scan"].counts["dropped"] > 0 and single["scan"].counts["ok"] > 0
    assert [line for line in parts["scan"].summary if not line.startswith("time:")] == \
        [line for line in single["scan"].summary if not line.startswith("time:")]
    assert source_counts(root / "parts") == source_counts(root / "single")
    with Manifest(manifest_path(root / "single")) as one, Manifest(manifest_path(root / "parts")) as other:
        assert other.status_counts() == one.status_counts()
        assert other.drop_counts() == one.drop_counts()


def test_bins_plan_stats_and_packed_shards_are_byte_identical(runs):
    root = runs["root"]
    single, parts = _outputs(root, "single"), _outputs(root, "parts")
    assert "work/pack_plan.npz" in single and any(name.startswith("packed/") and name.endswith(".tar")
                                                  for name in single)
    assert parts == single


def test_a_rerun_is_a_no_op_that_leaves_every_part_as_it_was(runs):
    root = runs["root"]
    before = _files(root / "parts" / "manifest.parts")
    times = {p: p.stat().st_mtime_ns for p in (root / "parts" / "manifest.parts").rglob("*.sqlite")}
    result = scan.run(load_config(root / "parts.yaml"))
    assert result.skipped
    assert _files(root / "parts" / "manifest.parts") == before
    assert {p: p.stat().st_mtime_ns for p in times} == times


def test_a_part_deleted_by_hand_is_scanned_again(runs, tmp_path):
    root = runs["root"]
    shutil.copytree(root / "parts", tmp_path / "copy")
    raw = _raw(root, "copy", "parts")
    raw["data"]["work_dir"] = str(tmp_path / "copy")
    (part,) = (tmp_path / "copy" / "manifest.parts" / "beta" / "sub").glob("*.sqlite")
    part.unlink()
    result = scan.run(config_from_dict(raw, source="test"))
    assert result.counts["shards_scanned"] == 1
    assert _files(tmp_path / "copy" / "manifest.parts") == _files(root / "parts" / "manifest.parts")


def _cut(part: Path) -> None:
    part.write_bytes(part.read_bytes()[:4000])


def _garbage(part: Path) -> None:
    part.write_bytes(bytes(range(256)) * 80)


def _emptied(part: Path) -> None:
    part.write_bytes(b"")


def _rows_deleted(part: Path) -> None:
    with sqlite3.connect(part) as conn:
        conn.execute("DELETE FROM samples WHERE rowid IN (SELECT rowid FROM samples WHERE status = 'ok' LIMIT 2)")


@pytest.mark.parametrize("damage", [_cut, _garbage, _emptied, _rows_deleted])
def test_a_part_damaged_after_its_commit_is_refused_by_name_and_a_scan_redoes_it_once_deleted(runs, tmp_path, damage):
    """Never read short (rows missing from the packs) nor a sqlite traceback: the part and the way out, named."""
    root = runs["root"]
    work = tmp_path / "copy"
    shutil.copytree(root / "parts", work)
    (part,) = (work / "manifest.parts" / "beta" / "sub").glob("*.sqlite")
    damage(part)
    with pytest.raises(StaleArtifactError, match=f"^{part}.*delete it and rerun `vlmpack scan`"):
        load_ok_samples(work)
    with Manifest(manifest_path(work)) as manifest, pytest.raises(StaleArtifactError, match=f"^{part}"):
        manifest.get_samples(r.id for r in _rows(root / "single"))
    part.unlink()
    raw = _raw(root, "copy", "parts")
    raw["data"]["work_dir"] = str(work)
    assert scan.run(config_from_dict(raw, source="test")).counts["shards_scanned"] == 1
    assert _files(work / "manifest.parts") == _files(root / "parts" / "manifest.parts")


def test_manifest_jsonl_is_written_when_asked_and_only_then(runs, tmp_path):
    root = runs["root"]
    work = tmp_path / "asked"
    raw = _raw(root, "asked", "parts", manifest_jsonl=True)
    raw["data"]["work_dir"] = str(work)
    scan.run(config_from_dict(raw, source="test"))
    assert (work / "manifest.jsonl").read_bytes() == (root / "single" / "manifest.jsonl").read_bytes()
    raw = _raw(root, "unasked", "single", manifest_jsonl=False)
    raw["data"]["work_dir"] = str(tmp_path / "unasked")
    assert not scan.run(config_from_dict(raw, source="test")).skipped
    assert not (tmp_path / "unasked" / "manifest.jsonl").exists()
    assert scan.run(config_from_dict(raw, source="test")).skipped  # no report asked: none needed to be up to date


def test_a_manifest_of_the_other_layout_is_refused_until_a_rescan(runs, tmp_path):
    root = runs["root"]
    config = load_config(root / "single.yaml")
    switched = dataclasses.replace(config, data=dataclasses.replace(config.data, manifest_layout="parts"))
    with pytest.raises(StaleArtifactError, match=r"scanned with data.manifest_layout: single, the config says parts"
                                                 r".*vlmpack scan --rescan"):
        scan.run(switched)


def test_a_wrong_layout_is_a_config_error_naming_the_choices():
    with pytest.raises(ConfigError, match=r"`data.manifest_layout` = 'sharded' is not a valid choice of "
                                          r"'single' \| 'parts'"):
        config_from_dict({"data": {"manifest_layout": "sharded"}}, source="test")


def _scan_cli(config: Path, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "VLMPACK_TEST_KILL_AT"}
    if kill_at:
        env["VLMPACK_TEST_KILL_AT"] = kill_at
    return subprocess.run([sys.executable, "-m", "vlmpack_offline", "scan", "--config", str(config)],
                          capture_output=True, text=True, timeout=300, env=env, start_new_session=True)


@pytest.mark.parametrize("point", ["scan:part:1", "scan:shard:2"])
def test_a_killed_parts_scan_resumes_to_the_same_parts_and_outputs(runs, point):
    """``scan:part``: a task renamed its part, the driver has not committed it (the part is redone);
    ``scan:shard``: two shards committed, other tasks' parts maybe written. A stale part (garbage where an
    uncommitted shard's part goes) and a killed task's temporary file are replaced / removed by the resume."""
    root = runs["root"]
    work = f"killed-{point.replace(':', '-')}"
    config = _config_file(root, work, "parts")
    killed = _scan_cli(config, kill_at=point)
    assert killed.returncode == -signal.SIGKILL, f"the hook never fired: {killed.stderr[-1500:]}"
    parts = root / work / "manifest.parts"
    with Manifest(manifest_path(root / work)) as manifest:
        committed = manifest.done_shards()
        assert manifest.get_meta("fingerprint") is None
    assert len(committed) < 4
    on_disk = {p.relative_to(parts).as_posix().removesuffix(".sqlite") for p in parts.rglob("*.sqlite")}
    if point.startswith("scan:part"):
        assert on_disk - committed  # a part the driver never committed: the resume must redo it
    uncommitted = sorted(f"{name}/{p.relative_to(root / 'src' / name).as_posix()}" for name in SOURCES
                         for p in (root / "src" / name).rglob("*.tar"))
    uncommitted = [shard for shard in uncommitted if shard not in committed]
    stale = parts / f"{uncommitted[0]}.sqlite"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_bytes(b"not the rows of this shard")
    leftover = parts / f"{uncommitted[-1]}.sqlite.tmp-4242"
    leftover.parent.mkdir(parents=True, exist_ok=True)
    leftover.write_bytes(b"a task killed while writing")

    resumed = _scan_cli(config)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert _files(parts) == _files(root / "parts" / "manifest.parts")
    assert _rows(root / work) == _rows(root / "parts")
    config = load_config(config)
    for stage in STAGES:
        assert stage.run(config).exit_code == 0
    assert _outputs(root, work) == _outputs(root, "parts")


def test_the_ray_executor_writes_the_same_parts_as_local(runs, tmp_path):
    ray = pytest.importorskip("ray")
    root = runs["root"]
    raw = _raw(root, "ray", "parts")
    raw["data"]["work_dir"] = str(tmp_path / "ray")
    raw["process"]["executor"] = "ray"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        result = scan.run(config_from_dict(raw, source="test"))
    finally:
        ray.shutdown()
    assert result.counts["shards_scanned"] == 4
    assert _files(tmp_path / "ray" / "manifest.parts") == _files(root / "parts" / "manifest.parts")
    assert _rows(tmp_path / "ray") == _rows(root / "parts")
