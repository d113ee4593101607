"""`vlmpack write` never executes what it finds in its output folder, deletes only what it wrote,
and refuses folder layouts where a stage would read (or delete) its own inputs."""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import pytest
from _packed_fixture import build_inputs

from vlmpack_offline.errors import ConfigError
from vlmpack_offline.stages import write

SCRATCH = Path(".nv-meta") / "vlmpack-build"


def _hashes(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


class _CreatesFile:
    """Unpickling this opens (so creates) ``path``: stands for any code a planted pickle would run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def test_planted_scratch_files_are_never_loaded_and_the_output_is_a_clean_runs(tmp_path):
    inputs = build_inputs(tmp_path)
    clean = tmp_path / "clean"
    write.run(inputs.with_config(data={"packed_wds_dir": str(clean)}))

    out = inputs.config.packed_wds_dir
    (out / SCRATCH).mkdir(parents=True)
    ran = tmp_path / "pickle-payload-ran"
    (out / SCRATCH / "packs-000000.pkl").write_bytes(pickle.dumps(_CreatesFile(ran)))  # the old scratch path
    # the new format, well formed, but from another run (other fingerprint) and with other content
    pack_ids = [p.pack_id for p in inputs.packs]
    header = {"format": "vlmpack.write_scratch", "version": 1, "fingerprint": "0" * 16, "chunk": 0,
              "pack_ids": pack_ids, "packs": [{"json": 2, "ids": None, "media": []} for _ in pack_ids]}
    (out / SCRATCH / "packs-000000.bin").write_bytes(json.dumps(header).encode() + b"\n" + b"{}" * len(pack_ids))

    write.run(inputs.config)
    assert not ran.exists()
    assert _hashes(out) == _hashes(clean)  # scratch files gone too, the planted ones included


def test_a_rebuild_deletes_only_the_shards_the_marker_lists(tmp_path):
    inputs = build_inputs(tmp_path)
    out = inputs.config.packed_wds_dir
    out.mkdir(parents=True)
    user_files = {"pretrain-000000.tar.orig": b"the user's backup", "pretrain-notes.txt": b"mine"}
    for name, data in user_files.items():
        (out / name).write_bytes(data)

    many = write.run(inputs.with_config(packed_wds={"maxcount": 1}))
    marker = json.loads((out / ".nv-meta" / write.MARKER_NAME).read_text())
    assert marker["shards"] == many.counts["shards"]  # pretrain-000000.tar .. pretrain-{n-1}
    few = write.run(inputs.with_config(packed_wds={"maxcount": 100}))  # other fingerprint: rebuilt
    assert few.counts["shards"] < many.counts["shards"]
    names = {p.name for p in out.iterdir() if p.is_file()}
    shards = {f"pretrain-{i:06d}.tar" for i in range(few.counts["shards"])}
    assert names == set(user_files) | shards | {f"{s}.idx" for s in shards}
    assert all((out / name).read_bytes() == data for name, data in user_files.items())


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        ({"packed_wds_dir": "src"}, "data.packed_wds_dir .* is the same folder as data.wds_dir"),
        ({"packed_wds_dir": "src/packed"}, "data.packed_wds_dir .* is inside data.wds_dir"),
        ({"packed_wds_dir": "."}, "data.packed_wds_dir .* contains data.wds_dir"),
        ({"packed_wds_dir": "work"}, "data.packed_wds_dir .* is the same folder as data.work_dir"),
        ({"packed_wds_dir": "work/packed"}, "data.packed_wds_dir .* is inside data.work_dir"),
        ({"wds_dir": ["src/part-000.tar", "src/part-001.tar"], "packed_wds_dir": "src"}, "contains data.wds_dir"),
        ({"wds_dir": "src/*.tar", "packed_wds_dir": "src/out"}, "is inside data.wds_dir entry .*src/\\*.tar"),
        ({"work_dir": "src/work"}, "data.work_dir .* is inside data.wds_dir"),
    ],
)
def test_overlapping_folders_are_refused_before_anything_is_written(tmp_path, layout, message):
    inputs = build_inputs(tmp_path)
    data = {key: [str(tmp_path / v) for v in value] if isinstance(value, list) else str(tmp_path / value)
            for key, value in layout.items()}
    before = _hashes(tmp_path)
    with pytest.raises(ConfigError, match=message):
        write.run(inputs.with_config(data=data))
    assert _hashes(tmp_path) == before


def test_a_file_url_input_is_checked_like_its_local_folder(tmp_path):
    inputs = build_inputs(tmp_path)
    data = {"wds_dir": f"file://{tmp_path / 'src'}", "packed_wds_dir": str(tmp_path / "src" / "out")}
    with pytest.raises(ConfigError, match="data.packed_wds_dir .* is inside data.wds_dir entry 'file://"):
        write.run(inputs.with_config(data=data))


@pytest.mark.parametrize("url", ["s3://vlmpack-bar/work", "gs://bucket/work", "msc://profile/work"])
def test_a_work_dir_url_is_refused_not_written_to_a_local_folder_named_after_its_scheme(tmp_path, monkeypatch, url):
    """work_dir holds sqlite and renamed files: a path only (packed_wds_dir may be a URL: test_object_store_write.py)."""
    inputs = build_inputs(tmp_path)
    monkeypatch.chdir(tmp_path)
    before = _hashes(tmp_path)
    with pytest.raises(ConfigError, match=f"data.work_dir = '{url}' is a URL"):
        write.run(inputs.with_config(data={"work_dir": url}))
    assert _hashes(tmp_path) == before
    assert not any(p.name.endswith(":") for p in tmp_path.rglob("*"))  # no "s3:" folder


def test_a_file_url_output_is_refused_naming_the_path_to_write_instead(tmp_path):
    inputs = build_inputs(tmp_path)
    before = _hashes(tmp_path)
    with pytest.raises(ConfigError, match=f"write a local folder as a path \\('{tmp_path}/out'\\)"):
        write.run(inputs.with_config(data={"packed_wds_dir": f"file://{tmp_path}/out"}))
    assert _hashes(tmp_path) == before


def test_a_marker_from_before_the_shard_count_clears_only_files_named_as_our_shards(tmp_path):
    inputs = build_inputs(tmp_path)
    out = inputs.config.packed_wds_dir
    reference = tmp_path / "reference"
    write.run(inputs.with_config(data={"packed_wds_dir": str(reference)}))
    write.run(inputs.with_config(packed_wds={"maxcount": 1}))
    marker = out / ".nv-meta" / write.MARKER_NAME
    marker.write_text(json.dumps({"fingerprint": "old", "complete": True}))  # an older vlmpack's marker
    (out / "pretrain-000001.tar.orig").write_bytes(b"keep")
    write.run(inputs.config)
    assert (out / "pretrain-000001.tar.orig").read_bytes() == b"keep"
    (out / "pretrain-000001.tar.orig").unlink()
    assert _hashes(out) == _hashes(reference)


def _edit_in_place_keeping_size_and_mtime(tar_path: Path) -> None:
    """Change one byte of the last member's data; size and mtime stay as scanned (a silent edit)."""
    import os
    import tarfile

    stat = tar_path.stat()
    with tarfile.open(tar_path) as tar:
        last = [m for m in tar.getmembers() if m.isreg()][-1]
    with open(tar_path, "r+b") as handle:
        handle.seek(last.offset_data)
        byte = handle.read(1)
        handle.seek(last.offset_data)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(tar_path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert tar_path.stat().st_size == stat.st_size and tar_path.stat().st_mtime_ns == stat.st_mtime_ns


@pytest.mark.slow
def test_check_sources_sha256_catches_a_source_edited_in_place_with_size_and_mtime_restored(tmp_path, make_config):
    import subprocess
    import sys

    import yaml

    from vlmpack_offline.synthetic.shards import generate_dataset

    (shard,) = generate_dataset(tmp_path / "src", seed=3, n_shards=1, samples_per_shard=8, include_faults=False)
    # seed 3 generates one sample over the default capacity: an overlong drop, not this test's point
    config = make_config(wds_dir=tmp_path / "src", write={"check_sources": "sha256"}, scan={"max_drop_ratio": 1.0})
    raw = {"data": {"wds_dir": str(tmp_path / "src"), "work_dir": str(config.work_dir),
                    "packed_wds_dir": str(config.packed_wds_dir)},
           "model": {"processor_kwargs": dict(config.model.processor_kwargs)},
           "write": {"check_sources": "sha256"}, "scan": {"max_drop_ratio": 1.0}}  # fmt: skip
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(raw))

    def cli(stage: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "vlmpack_offline", stage, "--config", str(tmp_path / "c.yaml")],
                              capture_output=True, text=True, timeout=300)  # fmt: skip

    from vlmpack_offline.stages import bucket, plan, scan

    for stage in (scan, bucket, plan):
        stage.run(config)
    _edit_in_place_keeping_size_and_mtime(shard)
    refused = cli("write")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no longer hash as scanned" in lines[0] and str(shard) in lines[0]
    assert not list(config.packed_wds_dir.glob("pretrain-*.tar"))
