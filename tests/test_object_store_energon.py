"""Packed output in a bucket, read back by megatron-energon with its own readers: ``get_train_dataset`` /
``get_val_dataset`` on an ``msc://`` path, the Multi-Storage Client profile pointing at the S3-compatible
server on 127.0.0.1 (the configuration docs/format.md shows). Written both through s3fs (``s3://``)
and through MSC's own fsspec filesystem (``msc://``)."""

from __future__ import annotations

import hashlib

import pytest
from _object_store_server import s3_server
from _packed_fixture import build_inputs
from megatron.energon import TaskEncoder, WorkerConfig, get_loader, get_train_dataset, get_val_dataset

from vlmpack_offline.loader.cooker import CookedPack, cooker
from vlmpack_offline.stages import write

pytestmark = pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")

BUCKET = "vlmpack-energon"


class PackTaskEncoder(TaskEncoder):
    """The smallest TaskEncoder a user writes: raw bytes in, our cooker, no batching."""

    decoder = None
    cookers = [cooker("vlmpack_packed")]


@pytest.fixture
def server(monkeypatch):
    yield from s3_server(monkeypatch)


@pytest.fixture
def msc_profile(server, tmp_path, monkeypatch):
    """An MSC profile named after this test (MSC keeps one client per profile name) for the server's bucket."""
    profile = f"vlmpack-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:8]}"
    monkeypatch.setenv("MSC_CONFIG", str(server.msc_config(tmp_path / "msc_config.yaml", profile, BUCKET)))
    return profile


def _packs_read_by_energon(root: str) -> dict[str, list[CookedPack]]:
    worker = WorkerConfig(rank=0, world_size=1, num_workers=0)
    train = get_train_dataset(root, worker_config=worker, batch_size=None, shuffle_buffer_size=None,
                              max_samples_per_sequence=None, task_encoder=PackTaskEncoder(), repeat=False)  # fmt: skip
    val = get_val_dataset(root, worker_config=worker, batch_size=None, task_encoder=PackTaskEncoder())
    return {"train": list(get_loader(train)), "val": list(get_loader(val))}


@pytest.mark.parametrize("scheme", ["s3", "msc"])
def test_energon_reads_every_pack_once_from_the_bucket_with_the_bytes_of_a_local_write(
    tmp_path, server, msc_profile, scheme
):
    inputs = build_inputs(tmp_path, n_shards=2, per_shard=10, pack_size=3, val_packs=2, packed_wds={"maxcount": 2})
    local = tmp_path / "local"
    write.run(inputs.with_config(data={"packed_wds_dir": str(local)}))
    server.make_bucket(BUCKET)
    url = f"s3://{BUCKET}/packed" if scheme == "s3" else f"msc://{msc_profile}/packed"

    write.run(inputs.with_config(data={"packed_wds_dir": url}))

    from_bucket = _packs_read_by_energon(f"msc://{msc_profile}/packed")
    from_disk = _packs_read_by_energon(str(local))
    for split in ("train", "val"):
        planned = sorted(p.pack_id for p in inputs.packs if p.split == split)
        assert sorted(c.pack.pack_id for c in from_bucket[split]) == planned  # every pack once
        by_id = {c.pack.pack_id: c for c in from_disk[split]}
        for cooked in from_bucket[split]:
            twin = by_id[cooked.pack.pack_id]
            assert cooked.pack == twin.pack
            assert cooked.media == twin.media  # the media bytes, member by member
    uploaded = server.objects(BUCKET, "packed/")
    assert uploaded == {f"packed/{p.relative_to(local)}": p.read_bytes() for p in local.rglob("*") if p.is_file()}
