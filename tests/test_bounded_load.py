"""Bucket's read of the manifest past ``packing.partition_samples``: its columns go to memory-mapped files.

The contract (issue 37, item 1): with more ok samples than the setting, ``load_ok_samples`` writes each
column as it streams into a ``.npy`` in ``work_dir/bucket-scratch`` and hands back those files mapped, so
the load holds a chunk of rows, not the data set; the values (dtype, order, media and source names, drop
counts) are the ones the in-memory load gives, in both manifest layouts; bins/ and pack_plan.npz are the
same bytes either way; the scratch folder is gone once bucket finishes, and what a killed run left there is
rewritten, not read. At or below the setting nothing changes: in memory, no scratch.

Manifests are written through the scan's own writers (``Manifest.write_shard``; in the parts layout
``write_shard_part`` + ``commit_part`` with ``manifest_parts.sums_of``).
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from test_bucket_plan_stages import CAPACITY

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.manifest import Manifest, SampleRecord, ShardRecord, manifest_path, write_shard_part
from vlmpack_offline.manifest_parts import sums_of
from vlmpack_offline.plan_file import plan_path
from vlmpack_offline.stages import bucket, plan
from vlmpack_offline.stages._ok_samples import SCRATCH_DIR, load_ok_samples

PART = 1000  # the smallest packing.partition_samples the config takes
N_PER_SHARD = 800  # 4 shards: 3200 rows, ~2900 ok -> mapped past PART
COLUMNS = ("token_len", "media_tokens", "media_code", "encoder_patches", "encoder_attention", "audio_frames",
           "audio_attention", "source_code")


def _records(shard: str, rng: np.random.Generator) -> list[SampleRecord]:
    """Tiny samples of every media kind (one outside MEDIA_TYPES too) with a few drops among them."""
    out = []
    for seq in range(N_PER_SHARD):
        kind = str(rng.choice(["text", "image", "video", "audio", "document"], p=[0.4, 0.3, 0.1, 0.1, 0.1]))
        length = int(rng.integers(1, CAPACITY + 10))  # a few overlong
        media = 0 if kind == "text" else length // 2
        status = "bad_json" if rng.random() < 0.02 else "ok"
        out.append(SampleRecord(
            id=f"{shard}/k{seq}", shard=shard, seq=seq, key=f"k{seq}", media_type=kind, token_len=length,
            media_tokens=media, n_images=int(kind == "image"), n_videos=int(kind == "video"),
            members=(("json", 0, 10),), status=status, error="x" if status != "ok" else "",
            encoder_patches=2 * media if kind in ("image", "video") else 0,
            encoder_attention=(2 * media) ** 2 if kind in ("image", "video") else 0,
            audio_frames=media if kind == "audio" else 0, audio_attention=media**2 if kind == "audio" else 0,
        ))
    return out


def _write_manifest(work_dir, layout: str = "single") -> None:
    """Four shards from two sources through the scan's writers of ``layout``."""
    rng = np.random.default_rng(7)
    with Manifest(manifest_path(work_dir)) as manifest:
        if layout == "parts":
            manifest.set_meta({"manifest_layout": "parts"})
        for no in range(4):
            shard = f"{'web' if no % 2 else 'books'}/part-{no:03d}.tar"
            records = _records(shard, rng)
            record = ShardRecord(shard=shard, path=shard, size=1, mtime_ns=1, n_samples=len(records),
                                 source="web" if no % 2 else "books")
            if layout == "parts":
                write_shard_part(work_dir, shard, records)
                manifest.commit_part(record, sums_of(shard, records))
            else:
                manifest.write_shard(record, records)
        manifest.set_meta({"fingerprint": f"bounded-{layout}"})


def _config(work_dir, partition: int = PART):
    """The two sources mixed (books once, web's samples twice: copies past the setting too)."""
    sources = [{"name": name, "wds_dir": str(work_dir.parent / name), "weight": weight}
               for name, weight in (("books", 1.0), ("web", 2.0))]
    return config_from_dict({"data": {"work_dir": str(work_dir), "sources": sources},
                             "sample": {"max_token_len": CAPACITY}, "packing": {"partition_samples": partition}},
                            source="test")


def _digest(work_dir) -> dict[str, str]:
    files = sorted((work_dir / "bins").glob("*.npy")) + [plan_path(work_dir)]
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


@pytest.mark.parametrize("layout", ["single", "parts"])
def test_past_the_setting_the_columns_are_mapped_files_holding_the_in_memory_values(tmp_path, layout):
    work = tmp_path / "work"
    _write_manifest(work, layout)
    in_memory = load_ok_samples(work, with_ids=True)
    mapped = load_ok_samples(work, with_ids=True, in_memory_up_to=PART)
    assert mapped.n == in_memory.n > PART
    for name in COLUMNS:
        column, expected = getattr(mapped, name), getattr(in_memory, name)
        assert isinstance(column, np.memmap) and not column.flags.writeable, name
        assert column.filename == (work / SCRATCH_DIR / f"{name}.npy").resolve(), name
        assert column.dtype == expected.dtype and np.array_equal(column, expected), name
    assert (mapped.media_names, mapped.source_names, mapped.drops) == \
        (in_memory.media_names, in_memory.source_names, in_memory.drops)
    assert "document" in mapped.media_names and mapped.source_names == ("books", "web")  # both second passes ran
    assert set(np.unique(np.asarray(mapped.source_code)).tolist()) == {0, 1}
    every = np.arange(mapped.n)
    assert mapped.ids_of(every) == in_memory.ids_of(every)  # ids stay in memory either way


def test_at_or_below_the_setting_nothing_is_mapped(tmp_path):
    work = tmp_path / "work"
    _write_manifest(work)
    n_ok = load_ok_samples(work).n
    samples = load_ok_samples(work, in_memory_up_to=n_ok)
    assert not any(isinstance(getattr(samples, name), np.memmap) for name in COLUMNS)
    assert not (work / SCRATCH_DIR).exists()


@pytest.mark.parametrize("layout", ["single", "parts"])
def test_bucket_and_plan_from_the_mapped_load_are_the_in_memory_loads_bytes(tmp_path, monkeypatch, layout):
    mapped_config = _config(tmp_path / "mapped")
    _write_manifest(mapped_config.work_dir, layout)
    assert bucket.run(mapped_config).exit_code == 0
    assert not (mapped_config.work_dir / SCRATCH_DIR).exists()  # removed once bins/ holds the columns
    assert plan.run(mapped_config).exit_code == 0

    in_memory_config = _config(tmp_path / "in_memory")
    _write_manifest(in_memory_config.work_dir, layout)
    loads = []

    def in_memory(work_dir, **kwargs):  # the same setting (the same partitions), the load forced into memory
        loads.append(kwargs)
        return load_ok_samples(work_dir, with_ids=kwargs.get("with_ids", False))
    monkeypatch.setattr(bucket, "load_ok_samples", in_memory)
    bucket.run(in_memory_config)
    plan.run(in_memory_config)
    assert loads == [{"in_memory_up_to": PART}]  # bucket asks by the setting
    assert _digest(mapped_config.work_dir) == _digest(in_memory_config.work_dir)
    assert len(_digest(mapped_config.work_dir)) > 10  # bins' columns, groups and the plan


def test_what_a_killed_load_left_is_rewritten_and_removed(tmp_path):
    clean = _config(tmp_path / "clean")
    _write_manifest(clean.work_dir)
    bucket.run(clean)
    plan.run(clean)

    killed = _config(tmp_path / "killed")
    _write_manifest(killed.work_dir)
    scratch = killed.work_dir / SCRATCH_DIR
    scratch.mkdir(parents=True)
    for name in ("token_len.npy", "media_code.npy", "source_code.npy"):  # a kill -9 mid-load: partial columns
        (scratch / name).write_bytes(b"\x93NUMPY" + b"\xff" * 200)
    (scratch / "stray.npy").write_bytes(b"\0" * 64)
    bucket.run(killed)
    plan.run(killed)
    assert not scratch.exists()
    assert _digest(killed.work_dir) == _digest(clean.work_dir)


def test_an_up_to_date_bucket_removes_a_scratch_left_after_its_meta(tmp_path):
    config = _config(tmp_path / "work")
    _write_manifest(config.work_dir)
    bucket.run(config)
    (config.work_dir / SCRATCH_DIR).mkdir()  # killed between bins/meta.json and the cleanup
    (config.work_dir / SCRATCH_DIR / "token_len.npy").write_bytes(b"\0" * 64)
    assert bucket.run(config).skipped
    assert not (config.work_dir / SCRATCH_DIR).exists()
