"""Several Ray nodes on one machine (``ray.cluster_utils.Cluster``), one of them lost in the middle of a
stage: scan and write end with the artifacts of a one-process run, byte for byte.

The cluster: a head node that runs no task (0 CPUs: it holds the GCS and this test's driver, as a
cluster's head does) and four worker nodes of one CPU each. ``bucket`` and ``plan`` run on the driver
whatever the executor (docs/ray.md), so only scan and write are run on the cluster here.

When the node goes is not left to a race with the stage: ``VLMPACK_TEST_RAY_HOLD`` (ray_executor.py)
makes the first attempt of one task do its work, write its node's id to a marker and wait; a watcher
thread waits for that marker *and* for other shards to be committed by the driver, then removes that
node (``Cluster.remove_node(..., allow_graceful=False)``: its raylet and workers SIGKILLed, as a machine
lost). The held task's result never reaches the driver; Ray retries it on a live node
(``ray_executor.MAX_RETRIES``), and the stage ends with every shard committed exactly once.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.executor import WorkerDiedError
from vlmpack_offline.manifest import manifest_path
from vlmpack_offline.stages import bucket, plan, scan, write
from vlmpack_offline.synthetic.shards import generate_dataset

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.slow

WORKER_NODES = 4
N_SHARDS = 8  # source shards: one scan task each, two per worker node
_STORE = 80 * 1024**2  # each node's object store (Ray's floor is 75 MiB); the results here are kilobytes
_WATCH_S = 240.0  # the watcher's limit: past it the test fails, it never hangs
# A lost node is declared dead after health_check_failure_threshold missed checks (Ray's defaults: 5 x 3 s);
# shortened so a test waits about a second for it, as a cluster's operator may also set it.
_HEALTH = {"health_check_initial_delay_ms": 1000, "health_check_period_ms": 300, "health_check_failure_threshold": 3}


@pytest.fixture(scope="module")
def cluster():
    """Head (no CPU) + four one-CPU worker nodes on this machine; this process is the driver, on the head."""
    sim = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "object_store_memory": _STORE, "include_dashboard": False,
                        "_system_config": _HEALTH},
    )  # fmt: skip
    for _ in range(WORKER_NODES):
        sim.add_node(num_cpus=1, object_store_memory=_STORE)
    sim.wait_for_nodes()
    ray.init(address=sim.address, log_to_driver=False)
    yield sim
    ray.shutdown()
    sim.shutdown()


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, qwen25_processor_dir) -> Path:
    """The reference: scan, bucket, plan and write in one process (``executor: local``, ``workers: 1``)."""
    root = tmp_path_factory.mktemp("cluster")
    generate_dataset(root / "wds", seed=5, n_shards=N_SHARDS, samples_per_shard=4, include_faults=True, video=False)
    config = _config(root, qwen25_processor_dir, root / "work", root / "packed", executor="local")
    for stage in (scan, bucket, plan, write):
        stage.run(config)
    return root


def _config(root: Path, processor_dir: Path, work_dir: Path, packed_dir: Path, **process):
    """The inputs under ``root``; the artifacts in ``work_dir`` and ``packed_dir``."""
    return config_from_dict(
        {
            "data": {"wds_dir": str(root / "wds"), "work_dir": str(work_dir), "packed_wds_dir": str(packed_dir)},
            "sample": {"max_token_len": 1024},  # about a dozen packs
            "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
            "packed_wds": {"maxcount": 1},  # one pack per output shard: one write task per pack
            "scan": {"max_drop_ratio": 1.0},  # the fault samples are drops, on both sides
            "process": {"workers": 1, **process},
        },
        source="test",
    )


@dataclass
class _Removal:
    """What the watcher did: the node it removed and how far the stage was at that moment."""

    node_id: str = ""
    committed_before: int = -1  # shards committed when the node went
    over_before: bool = True  # whether the stage had already ended then (it must not have)
    error: str = ""
    done: threading.Event = field(default_factory=threading.Event)


def _remove_held_node(sim, marker: Path, committed, over, *, at_least: int, every_node: bool = False) -> _Removal:
    """Start a thread that, once the held task has written ``marker`` and ``committed()`` reaches
    ``at_least``, removes the node that task runs on (SIGKILL, no graceful shutdown), and with
    ``every_node`` every other worker node after it; ``over()`` says whether the stage had ended by then."""
    removal = _Removal()

    def watch() -> None:
        deadline = time.monotonic() + _WATCH_S
        try:
            while not (marker.exists() and committed() >= at_least):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"held task marker {marker.exists()}, committed {committed()} < {at_least}")
                time.sleep(0.05)
            removal.committed_before, removal.over_before = committed(), over()
            removal.node_id = marker.read_text()
            node = next(n for n in sim.worker_nodes if n.node_id == removal.node_id)
            sim.remove_node(node, allow_graceful=False)
            for other in list(sim.worker_nodes) if every_node else ():
                sim.remove_node(other, allow_graceful=False)
        except Exception as exc:  # reported by the test, which fails on it
            removal.error = f"{type(exc).__name__}: {exc}"
        finally:
            removal.done.set()

    threading.Thread(target=watch, daemon=True).start()
    return removal


def _check_removed(sim, removal: _Removal, *, at_least: int) -> None:
    """The node went after ``at_least`` shards were committed, before the stage ended, and the cluster
    knows it is dead; then a fresh node takes its place for the next test."""
    assert removal.done.wait(_WATCH_S) and not removal.error, removal.error
    assert removal.committed_before >= at_least and not removal.over_before, removal
    assert _declared_dead(removal.node_id), f"the cluster still lists node {removal.node_id} alive after {_WATCH_S} s"
    sim.add_node(num_cpus=1, object_store_memory=_STORE)
    sim.wait_for_nodes()


def _declared_dead(node_id: str) -> bool:
    """Whether the GCS lists the node dead, waited for: a task's retry elsewhere may end the stage before the
    GCS has missed enough health checks (on a busy machine its checks run late), which says nothing wrong."""
    deadline = time.monotonic() + _WATCH_S
    while {n["NodeID"]: n["Alive"] for n in ray.nodes()}[node_id]:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _committed_shards(work_dir: Path):
    def count() -> int:
        try:  # read-only, beside the driver's WAL writer; absent or busy reads count as nothing yet
            with sqlite3.connect(f"file:{manifest_path(work_dir)}?mode=ro", uri=True) as conn:
                return conn.execute("SELECT count(*) FROM shards").fetchone()[0]
        except sqlite3.OperationalError:
            return 0

    return count


def _tables(work_dir: Path) -> dict[str, list[tuple]]:
    """Every table of manifest.sqlite, rows sorted: the file's pages depend on commit order, its content not."""
    with sqlite3.connect(f"file:{manifest_path(work_dir)}?mode=ro", uri=True) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {name: sorted(conn.execute(f"SELECT * FROM {name}").fetchall(), key=repr) for name in names}


def _hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}  # fmt: skip


def test_scan_on_four_nodes_with_one_lost_mid_scan_equals_the_one_process_scan(
    cluster, local_run, qwen25_processor_dir, tmp_path, monkeypatch
):
    marker = tmp_path / "held"
    monkeypatch.setenv("VLMPACK_TEST_RAY_HOLD", f"scan:5:{marker}")
    config = _config(local_run, qwen25_processor_dir, tmp_path / "work", tmp_path / "packed", executor="ray",
                     ray_address=cluster.address)  # fmt: skip
    committed = _committed_shards(config.work_dir)  # the held shard cannot be among them
    removal = _remove_held_node(cluster, marker, committed, lambda: committed() == N_SHARDS, at_least=3)

    result = scan.run(config)

    _check_removed(cluster, removal, at_least=3)
    assert result.counts["shards_scanned"] == N_SHARDS
    ours, reference = config.work_dir, local_run / "work"
    assert (ours / "manifest.jsonl").read_bytes() == (reference / "manifest.jsonl").read_bytes()
    assert _tables(ours) == _tables(reference)


def test_write_on_four_nodes_with_one_lost_mid_write_equals_the_one_process_write(
    cluster, local_run, qwen25_processor_dir, tmp_path, monkeypatch
):
    """The plan of the one-process run, written on the cluster into another folder.

    Write tasks rename their own tars into place, so the other tasks may all be done when the node
    goes; the driver is not: it waits for the held shard's result before it fsyncs the shards and
    writes ``.nv-meta/`` (``dataset.yaml`` first), and the node goes before that.
    """
    packed = tmp_path / "packed"
    reference = _hashes(local_run / "packed")
    n_shards = sum(1 for name in reference if name.endswith(".tar"))
    assert n_shards >= 6, "too few output shards for a write task to be lost mid-write"
    marker = tmp_path / "held"
    monkeypatch.setenv("VLMPACK_TEST_RAY_HOLD", f"write:3:{marker}")
    config = _config(local_run, qwen25_processor_dir, local_run / "work", packed, executor="ray",
                     ray_address=cluster.address)  # fmt: skip

    def tars() -> int:  # the held shard's tar is in place too: its task wrote it before holding
        return sum(1 for _ in packed.glob("pretrain-*.tar"))

    removal = _remove_held_node(cluster, marker, tars, (packed / ".nv-meta" / "dataset.yaml").exists, at_least=3)

    write.run(config)

    _check_removed(cluster, removal, at_least=3)
    assert not list(packed.rglob("*.tmp"))
    assert _hashes(packed) == reference


def test_a_cluster_left_without_a_cpu_stops_the_scan_with_one_line_and_a_rerun_resumes(
    cluster, local_run, qwen25_processor_dir, tmp_path, monkeypatch
):
    """Every worker node lost mid-scan: the tasks left are pending, not failed, so Ray's retries never end the
    wait. After ``process.ray_wait_for_cpu_s`` with no CPU in the cluster the scan stops with one line; the shards
    committed before stay, and once nodes are back the same command resumes to the one-process manifest."""
    marker = tmp_path / "held"
    monkeypatch.setenv("VLMPACK_TEST_RAY_HOLD", f"scan:5:{marker}")
    config = _config(local_run, qwen25_processor_dir, tmp_path / "work", tmp_path / "packed", executor="ray",
                     ray_address=cluster.address, ray_wait_for_cpu_s=2.0)  # fmt: skip
    committed = _committed_shards(config.work_dir)
    removal = _remove_held_node(cluster, marker, committed, lambda: committed() == N_SHARDS, at_least=3,
                                every_node=True)  # fmt: skip

    with pytest.raises(WorkerDiedError, match=r"no CPU for 2 s while scan tasks wait") as raised:
        scan.run(config)

    assert removal.done.wait(_WATCH_S) and not removal.error, removal.error
    assert not cluster.worker_nodes and "\n" not in str(raised.value)
    before = committed()
    assert 3 <= before < N_SHARDS  # the held shard was never committed
    for _ in range(WORKER_NODES):
        cluster.add_node(num_cpus=1, object_store_memory=_STORE)
    cluster.wait_for_nodes()
    monkeypatch.delenv("VLMPACK_TEST_RAY_HOLD")
    assert scan.run(config).counts["shards_scanned"] == N_SHARDS - before
    assert (config.work_dir / "manifest.jsonl").read_bytes() == (local_run / "work" / "manifest.jsonl").read_bytes()
    assert _tables(config.work_dir) == _tables(local_run / "work")
