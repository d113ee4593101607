"""Disk full and read-only folders end a stage with one line (what, where, what to do) and exit 1;
after the fix, rerunning the same command finishes with the bytes of an undisturbed run.

The faults are real: a small tmpfs (disk full) and a read-only tmpfs, mounted for the
test (root only; skipped with the reason where mounting is not allowed). The stages run
as a user runs them, ``python -m vlmpack_offline STAGE --config C``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vlmpack_offline.synthetic.shards import generate_dataset

pytestmark = pytest.mark.slow


def _mount(target: Path, *options: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", ",".join(options), "tmpfs", str(target)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.decode().strip()}): needs root in a sandbox that allows it")


@pytest.fixture
def mounts():
    mounted: list[Path] = []

    def mount(target: Path, *options: str) -> None:
        _mount(target, *options)
        mounted.append(target)

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", str(target)], check=False)


def _config(tmp_path: Path, name: str, src: Path, processor: Path, work: Path, packed: Path) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "data": {"wds_dir": str(src), "work_dir": str(work), "packed_wds_dir": str(packed)},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor)}},
        "video": {"min_pixels": 3136, "max_pixels": 12544},
    }))  # fmt: skip
    return path


def _run(stage: str, config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vlmpack_offline", stage, "--config", str(config)],
                          capture_output=True, text=True, timeout=300)  # fmt: skip


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip


def _one_line_error(done: subprocess.CompletedProcess, *words: str) -> None:
    assert done.returncode == 1, (done.returncode, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, qwen25_processor_dir):
    root = tmp_path_factory.mktemp("faults")
    generate_dataset(root / "src", seed=1, n_shards=2, samples_per_shard=10, include_faults=False)
    reference = _config(root, "reference", root / "src", qwen25_processor_dir, root / "ref_work", root / "ref_packed")
    for stage in ("scan", "bucket", "plan", "write"):
        assert _run(stage, reference).returncode == 0
    return root, qwen25_processor_dir


def test_disk_full_in_write_is_one_line_and_the_rerun_is_byte_identical(inputs, tmp_path, mounts):
    root, processor = inputs
    packed = tmp_path / "packed"
    mounts(packed, "size=64k")
    config = _config(tmp_path, "c", root / "src", processor, tmp_path / "work", packed)
    for stage in ("scan", "bucket", "plan"):
        assert _run(stage, config).returncode == 0
    _one_line_error(_run("write", config), "no space left", str(packed), "rerun the same command")
    subprocess.run(["mount", "-o", "remount,size=64m", str(packed)], check=True)
    assert _run("write", config).returncode == 0
    assert _digests(packed) == _digests(root / "ref_packed")


def test_disk_full_in_scan_is_one_line_and_the_rerun_is_byte_identical(inputs, tmp_path, mounts):
    root, processor = inputs
    work = tmp_path / "work"
    mounts(work, "size=48k")
    config = _config(tmp_path, "c", root / "src", processor, work, tmp_path / "packed")
    _one_line_error(_run("scan", config), "no space left", "rerun the same command")
    subprocess.run(["mount", "-o", "remount,size=64m", str(work)], check=True)
    assert _run("scan", config).returncode == 0
    assert (work / "manifest.jsonl").read_bytes() == (root / "ref_work" / "manifest.jsonl").read_bytes()


def test_read_only_output_is_one_line(inputs, tmp_path, mounts):
    root, processor = inputs
    packed = tmp_path / "packed"
    mounts(packed, "size=64m", "ro")
    config = _config(tmp_path, "c", root / "src", processor, tmp_path / "work", packed)
    for stage in ("scan", "bucket", "plan"):
        assert _run(stage, config).returncode == 0
    _one_line_error(_run("write", config), "read-only", str(packed))
    if os.path.ismount(packed):
        subprocess.run(["mount", "-o", "remount,rw", str(packed)], check=True)
    assert _run("write", config).returncode == 0
    assert _digests(packed) == _digests(root / "ref_packed")
