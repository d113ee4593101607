"""``kill -9`` at named points of every stage, then a rerun: every artifact byte-identical to an uninterrupted run.

The stages run as the CLI in their own session (scan and write with 2 worker processes);
the hook ``VLMPACK_TEST_KILL_AT`` (``vlmpack_offline/kill_points.py``) SIGKILLs the whole
process group at the named point, so the kill lands where the test says, not where a
timer happens to fall. ``manifest.sqlite`` is compared by its rows (its file bytes depend
on commit order, see ``manifest.py``); every other file byte by byte.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.synthetic.shards import generate_dataset

pytestmark = pytest.mark.slow

STAGES = ("scan", "bucket", "plan", "write")


def _cli(root: Path, stage: str, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "VLMPACK_TEST_KILL_AT"}
    if kill_at:
        env["VLMPACK_TEST_KILL_AT"] = kill_at
    return subprocess.run(
        [sys.executable, "-m", "vlmpack_offline", stage, "--config", str(root / "config.yaml")],
        capture_output=True, text=True, timeout=300, env=env, start_new_session=True,
    )  # fmt: skip


def _state(root: Path) -> dict[str, str]:
    """Every file of work_dir and packed_wds_dir by content; the manifest by its rows."""
    out = {}
    for top in ("work", "packed"):
        for path in sorted((root / top).rglob("*")):
            if path.is_file() and not path.name.startswith("manifest.sqlite"):
                out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest()
    if manifest_path(root / "work").exists():
        with Manifest(manifest_path(root / "work")) as manifest:
            rows = [repr(r) for r in manifest.iter_samples()] + [repr(s) for s in manifest.shards()]
            meta = sorted(manifest.conn.execute("SELECT key, value FROM meta"))
        out["manifest rows"] = hashlib.sha256("\n".join(rows + [repr(meta)]).encode()).hexdigest()
    return out


def _restore(root: Path, snapshot: Path | None) -> None:
    for top in ("work", "packed"):
        shutil.rmtree(root / top, ignore_errors=True)
        if snapshot is not None and (snapshot / top).exists():
            shutil.copytree(snapshot / top, root / top)


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory, qwen25_processor_dir) -> dict:
    """The uninterrupted pipeline, with a copy of work_dir + packed_wds_dir after each stage."""
    root = tmp_path_factory.mktemp("kill")
    generate_dataset(root / "src", seed=11, n_shards=4, samples_per_shard=6, include_faults=True)
    config = {
        "data": {"wds_dir": str(root / "src"), "work_dir": str(root / "work"), "packed_wds_dir": str(root / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(qwen25_processor_dir)}},
        "sample": {"max_token_len": 4096},
        "process": {"workers": 2},
        "packed_wds": {"maxcount": 2},  # several output shards, so write can be killed between them
        "scan": {"max_drop_ratio": 1.0},
    }
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    snapshots, states = {}, {}
    for stage in STAGES:
        run = _cli(root, stage)
        assert run.returncode == 0, run.stderr[-2000:]
        snapshots[stage] = root / f"after-{stage}"
        for top in ("work", "packed"):
            if (root / top).exists():
                shutil.copytree(root / top, snapshots[stage] / top)
        states[stage] = _state(root)
    return {"root": root, "snapshots": snapshots, "states": states}


CASES = [
    ("scan", "scan:shard:1"),  # first shard committed (of four), by either worker
    ("scan", "wrote:manifest.jsonl"),  # report done, fingerprint not yet set
    ("bucket", "writing:meta.json"),
    ("plan", "wrote:pack_plan.meta.json"),  # plan complete, no stats yet
    ("plan", "writing:stats.png"),  # a stats.png.tmp left behind
    ("plan", "wrote:stats.png"),  # stats.png without its stats.json
    ("write", "write:scratch:1"),
    ("write", "write:shard:1"),
]


@pytest.mark.parametrize(("stage", "point"), CASES, ids=[f"{s}-{p}" for s, p in CASES])
def test_a_stage_killed_at_a_point_resumes_byte_identical(clean_run, stage, point):
    root = clean_run["root"]
    before = STAGES.index(stage)
    _restore(root, clean_run["snapshots"][STAGES[before - 1]] if before else None)

    killed = _cli(root, stage, kill_at=point)
    assert killed.returncode == -signal.SIGKILL, f"the hook never fired: {killed.stdout[-500:]} {killed.stderr[-1500:]}"
    assert _state(root) != clean_run["states"][stage]  # it really stopped part way

    rerun = _cli(root, stage)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _state(root) == clean_run["states"][stage]
    leftovers = [p for top in ("work", "packed") for p in (root / top).rglob("*.tmp")]
    assert leftovers == []
