"""A packed set written to a bucket trains as its local twin does: the loader reads its settings (``vlmpack.json``:
model, schedule, mixture, media counts) from the bucket, and energon's loader, through the Multi-Storage Client,
hands each data-parallel rank the packs the plan scheduled for it, in the same order as from a local folder."""

from __future__ import annotations

import hashlib

import pytest
from _object_store_server import s3_server
from megatron.energon import WorkerConfig, get_loader

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.loader import PackDataset, PackEncoder, PackTaskEncoder, train_dataset
from vlmpack_offline.packed_settings import written_counts, written_schedule
from vlmpack_offline.stages import bucket, plan, scan, write
from vlmpack_offline.synthetic.shards import generate_dataset

pytestmark = pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")

BUCKET = "vlmpack-loader"
RANKS = 2


@pytest.fixture
def server(monkeypatch):
    yield from s3_server(monkeypatch)


@pytest.fixture
def written(server, tmp_path, monkeypatch, qwen25_processor_dir):
    """One balanced plan (2 ranks) written twice: to a local folder and to the bucket; (local, msc:// URL)."""
    profile = f"vlmpack-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:8]}"
    monkeypatch.setenv("MSC_CONFIG", str(server.msc_config(tmp_path / "msc_config.yaml", profile, BUCKET)))
    server.make_bucket(BUCKET)
    generate_dataset(tmp_path / "src", seed=7, n_shards=2, samples_per_shard=16, video=False)
    raw = {"data": {"wds_dir": str(tmp_path / "src"), "work_dir": str(tmp_path / "work"),
                    "packed_wds_dir": str(tmp_path / "local")},
           "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(qwen25_processor_dir)}},
           "sample": {"max_token_len": 1024}, "scan": {"max_drop_ratio": 1.0},
           "parallel": {"data_parallel_size": RANKS, "loader_workers": 1}}  # fmt: skip
    config = config_from_dict(raw, source="test")
    for stage in (scan, bucket, plan, write):
        assert stage.run(config).exit_code == 0, stage.__name__
    raw["data"]["packed_wds_dir"] = f"s3://{BUCKET}/packed"
    assert write.run(config_from_dict(raw, source="test")).exit_code == 0
    return tmp_path / "local", f"msc://{profile}/packed"


def _pack_ids(root, rank: int, world_size: int) -> list[int]:
    encoder = PackEncoder.from_packed_dir(root)
    dataset = train_dataset(str(root), PackTaskEncoder(encoder),
                            WorkerConfig(rank=rank, world_size=world_size, num_workers=0), repeat=False)  # fmt: skip
    return [batch.pack_id for batch in get_loader(dataset)]


def test_the_settings_read_from_the_bucket_are_the_local_twins(written):
    local, url = written
    assert written_schedule(url) == written_schedule(local) is not None
    assert written_counts(url) == written_counts(local)
    assert PackEncoder.from_packed_dir(url).config.model == PackEncoder.from_packed_dir(local).config.model


def test_each_rank_reads_from_the_bucket_the_packs_the_plan_scheduled_for_it(written):
    local, url = written
    for rank in range(RANKS):
        from_bucket = _pack_ids(url, rank, RANKS)
        assert from_bucket and from_bucket == _pack_ids(local, rank, RANKS)
    with pytest.raises(ConfigError, match=f"planned for parallel.data_parallel_size {RANKS}, but 3"):
        _pack_ids(url, 0, 3)  # the balance is refused undone, as for a local folder


def test_the_plain_pytorch_dataset_says_it_reads_a_local_folder(written):
    _, url = written
    with pytest.raises(ConfigError, match="read a local folder; read a bucket through energon"):
        PackDataset(url, PackEncoder.from_packed_dir(url))
