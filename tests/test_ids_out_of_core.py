"""Write's sample ids past ``packing.partition_samples``: read from an id store on disk, not held in memory.

The contract (issue 37): with more ok samples than the setting, ``vlmpack write`` resolves each pack's ids
from ``work_dir/ok-ids`` (``ids.bytes`` + ``ids.offsets.npy``, ok-sample order, memory-mapped), written once
per manifest fingerprint by the driver before any task starts, in a temporary folder renamed into place;
no other manifest column is loaded for it. The packed shards are the bytes the in-memory ids give, in both
manifest layouts; a store written for another manifest, or one left half-written by a kill -9, is never read
(it is written again, to the same bytes). At or below the setting nothing changes: ids in memory, no store
(write deletes one left by a larger data set).

The manifests come from the real scan (the Qwen2.5-VL tokenizer) over real tars of tiny text samples.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from vlmpack_offline.config import Config, config_from_dict
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.plan_file import read_plan
from vlmpack_offline.stages import _ok_samples, bucket, plan, scan, write
from vlmpack_offline.stages._ok_samples import (
    IDS_DIR,
    load_ok_samples,
    manifest_fingerprint,
    ok_id_store,
    open_id_store,
)
from vlmpack_offline.synthetic.shards import SyntheticSample, write_shard

PART = 1000  # the smallest packing.partition_samples the config takes
SHARDS, PER_SHARD = 3, 420  # 1260 ok samples: past PART


def _sources(src: Path) -> None:
    """Tiny text samples of varied lengths; keys in sub-folders and a non-ASCII one (ids are utf-8 bytes)."""
    for no in range(SHARDS):
        samples = [SyntheticSample(key=f"d{i % 3}/s{no}_{i:04d}" + ("é" if i == 7 else ""),
                                   json={"messages": [{"role": "user", "content": "word " * (1 + (i * 37) % 90)},
                                                      {"role": "assistant", "content": f"answer {no}.{i}"}]})
                   for i in range(PER_SHARD)]
        write_shard(src / f"part-{no:03d}.tar", samples)


def _config(root: Path, processor_dir: Path, layout: str, **data) -> Config:
    return config_from_dict({
        "data": {"wds_dir": str(root / "src"), "work_dir": str(root / "work"), "packed_wds_dir": str(root / "packed"),
                 "manifest_layout": layout, **data},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
        "sample": {"max_token_len": 1024}, "packing": {"partition_samples": PART}, "packed_wds": {"maxcount": 8},
    }, source="test")


@dataclass(frozen=True, slots=True)
class Planned:
    root: Path
    processor_dir: Path
    layout: str

    @property
    def work_dir(self) -> Path:
        return self.root / "work"

    def config(self, packed: Path | None = None) -> Config:
        """The planned config; ``packed``: written to another output folder (nothing upstream changes)."""
        return _config(self.root, self.processor_dir, self.layout, **({"packed_wds_dir": str(packed)} if packed else {}))


@pytest.fixture(scope="module", params=["single", "parts"])
def planned(request, tmp_path_factory, qwen25_processor_dir) -> Planned:
    """scan -> bucket -> plan, once per manifest layout."""
    done = Planned(tmp_path_factory.mktemp(f"ids_{request.param}"), qwen25_processor_dir, request.param)
    _sources(done.root / "src")
    for stage in (scan, bucket, plan):
        assert stage.run(done.config()).exit_code == 0, stage.__name__
    return done


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _in_memory_ids(work_dir: Path) -> list[str]:
    samples = load_ok_samples(work_dir, with_ids=True)
    return samples.ids_of(np.arange(samples.n))


def test_past_the_setting_write_reads_ids_from_the_store_and_writes_the_in_memory_bytes(planned, tmp_path,
                                                                                          monkeypatch):
    work = planned.work_dir
    assert load_ok_samples(work).n > PART
    in_memory_dir = tmp_path / "packed_in_memory"
    with monkeypatch.context() as patched:  # the same plan with the ids loaded into memory, as below the setting
        patched.setattr(write, "_ids_on_disk", lambda config: False)
        assert write.run(planned.config(in_memory_dir)).exit_code == 0
    assert not (work / IDS_DIR).exists()

    def no_column_load(*args, **kwargs):
        raise AssertionError("write loaded the manifest's columns past the setting")
    monkeypatch.setattr(_ok_samples, "load_ok_samples", no_column_load)
    on_disk_dir = tmp_path / "packed_on_disk"
    assert write.run(planned.config(on_disk_dir)).exit_code == 0

    assert _hashes(on_disk_dir) == _hashes(in_memory_dir)
    assert sum(name.endswith(".tar") for name in _hashes(on_disk_dir)) >= 3
    store = json.loads((work / IDS_DIR / "meta.json").read_text())
    assert store["manifest_fingerprint"] == manifest_fingerprint(work)
    assert not (work / f"{IDS_DIR}.tmp").exists()


def test_read_plan_gives_the_same_packs_from_the_store(planned):
    from_store = list(read_plan(planned.work_dir, ids_on_disk=True))
    in_memory = list(read_plan(planned.work_dir))
    assert from_store == in_memory
    assert sum(len(p.sample_ids) for p in in_memory) > PART
    assert any("é" in i for p in from_store for i in p.sample_ids)


def test_the_store_holds_every_ok_id_in_manifest_order(planned, monkeypatch):
    store = ok_id_store(planned.work_dir)
    every, expected = np.arange(store.n), _in_memory_ids(planned.work_dir)
    assert store.ids_of(every) == expected
    monkeypatch.setattr(_ok_samples, "_ID_WINDOW", 97)  # read in many windows, pages released between them
    assert store.ids_of(every[::-7]) == [expected[i] for i in every[::-7]]
    assert store.ids_of(every[:0]) == []


def test_a_store_written_for_another_manifest_is_not_read_but_rewritten(planned, tmp_path):
    work = planned.work_dir
    ok_id_store(work)
    meta_path = work / IDS_DIR / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "manifest_fingerprint": "another-manifest"}))
    assert open_id_store(work, manifest_fingerprint(work)) is None
    bytes_path = work / IDS_DIR / "ids.bytes"
    bytes_path.write_bytes(b"x" * bytes_path.stat().st_size)  # another manifest's ids, same sizes
    assert ok_id_store(work).ids_of(np.arange(3)) == _in_memory_ids(work)[:3]
    assert json.loads(meta_path.read_text())["manifest_fingerprint"] == manifest_fingerprint(work)


def test_a_changed_manifest_gets_its_own_ids(tmp_path, qwen25_processor_dir):
    root = tmp_path / "changed"
    _sources(root / "src")
    config = _config(root, qwen25_processor_dir, "single")
    assert scan.run(config).exit_code == 0
    before = ok_id_store(config.work_dir).n
    write_shard(root / "src" / "part-009.tar", [SyntheticSample(key=f"new{i}", json={"messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}) for i in range(5)])
    assert scan.run(config).exit_code == 0  # a new shard: a new manifest fingerprint
    store = ok_id_store(config.work_dir)
    assert store.n == before + 5
    assert store.ids_of(np.arange(store.n)) == _in_memory_ids(config.work_dir)


@pytest.mark.parametrize("left", ["temp folder", "folder without meta", "cut bytes", "cut offsets"])
def test_a_half_written_store_is_never_read(planned, left):
    work = planned.work_dir
    expected = _in_memory_ids(work)
    ok_id_store(work)
    folder, tmp = work / IDS_DIR, work / f"{IDS_DIR}.tmp"
    if left == "temp folder":  # kill -9 mid-write: only the temporary folder exists, partly written
        (folder / "meta.json").unlink()
        folder.rename(tmp)
        (tmp / "ids.bytes").write_bytes((tmp / "ids.bytes").read_bytes()[:100])
    elif left == "folder without meta":
        (folder / "meta.json").unlink()
    elif left == "cut bytes":
        (folder / "ids.bytes").write_bytes((folder / "ids.bytes").read_bytes()[:-10])
    else:
        (folder / "ids.offsets.npy").write_bytes((folder / "ids.offsets.npy").read_bytes()[:-16])
    assert open_id_store(work, manifest_fingerprint(work)) is None
    assert ok_id_store(work).ids_of(np.arange(len(expected))) == expected
    assert not tmp.exists()


def test_at_or_below_the_setting_write_keeps_ids_in_memory_and_writes_no_store(tmp_path, qwen25_processor_dir):
    root = tmp_path / "small"
    _sources(root / "src")
    config = config_from_dict({
        "data": {"wds_dir": str(root / "src"), "work_dir": str(root / "work"), "packed_wds_dir": str(root / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(qwen25_processor_dir)}},
        "sample": {"max_token_len": 1024}, "packing": {"partition_samples": SHARDS * PER_SHARD},
    }, source="test")
    for stage in (scan, bucket, plan):
        assert stage.run(config).exit_code == 0, stage.__name__
    ok_id_store(config.work_dir)  # left by an earlier, larger data set's write
    (config.work_dir / f"{IDS_DIR}.tmp").mkdir()
    assert write.run(config).exit_code == 0
    assert not (config.work_dir / IDS_DIR).exists() and not (config.work_dir / f"{IDS_DIR}.tmp").exists()
    with Manifest(manifest_path(config.work_dir)) as manifest:
        assert manifest.status_counts()["ok"] == SHARDS * PER_SHARD


_KILLED_MID_WRITE = """
import os, signal, sys
from vlmpack_offline.stages import _ok_samples
_ok_samples._CHUNK = 100  # many chunks, so the kill lands among them
calls = []
def release_then_die(*arrays):
    calls.append(1)
    if len(calls) == 4:  # a few chunks written, the rest not
        os.kill(os.getpid(), signal.SIGKILL)
_ok_samples.release = release_then_die
_ok_samples.ok_id_store(sys.argv[1])
"""


def test_a_write_killed_mid_store_leaves_nothing_read_and_the_rerun_writes_the_same_bytes(planned):
    work = planned.work_dir
    ok_id_store(work)
    clean = _hashes(work / IDS_DIR)
    (work / IDS_DIR / "meta.json").unlink()  # make the next call write the store again
    root = str(Path(_ok_samples.__file__).parents[2])  # the child imports the package this test imported
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    killed = subprocess.run([sys.executable, "-c", _KILLED_MID_WRITE, str(work)], capture_output=True, env=env)
    assert killed.returncode == -signal.SIGKILL
    assert (work / f"{IDS_DIR}.tmp" / "ids.bytes").is_file() and not (work / f"{IDS_DIR}.tmp" / "meta.json").exists()
    assert open_id_store(work, manifest_fingerprint(work)) is None
    store = ok_id_store(work)
    assert _hashes(work / IDS_DIR) == clean
    assert store.ids_of(np.arange(store.n)) == _in_memory_ids(work)
    assert not (work / f"{IDS_DIR}.tmp").exists()
