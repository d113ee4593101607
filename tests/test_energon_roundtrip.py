"""Our packed output through the real megatron-energon: metadata, loaders, and our cooker."""

from __future__ import annotations

import hashlib
import shutil

import pytest
from _packed_fixture import build_inputs
from megatron.energon import TaskEncoder, WorkerConfig, get_loader, get_train_dataset, get_val_dataset
from megatron.energon.flavors.webdataset.prepare import WebdatasetPreparator

from vlmpack_offline.loader.cooker import CookedPack, cooker
from vlmpack_offline.stages import write

pytestmark = pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")

SAMPLE_TYPE = "vlmpack_packed"


class PackTaskEncoder(TaskEncoder):
    """The smallest TaskEncoder a user writes: raw bytes in, our cooker, no batching."""

    decoder = None
    cookers = [cooker(SAMPLE_TYPE)]


def _worker_config() -> WorkerConfig:
    return WorkerConfig(rank=0, world_size=1, num_workers=0)


def _media_hashes(pack: CookedPack) -> dict[str, list[str]]:
    out = {}
    for sub in pack.pack.samples:
        names = [item[item["type"]] for m in sub.messages for item in m["content"] if item["type"] in ("image", "video")]
        out[sub.id] = [hashlib.sha256(pack.media[n]).hexdigest() for n in names]
    return out


@pytest.fixture
def written(tmp_path):
    inputs = build_inputs(tmp_path, n_shards=2, per_shard=10, pack_size=3, val_packs=2,
                          sample={"sample_type": SAMPLE_TYPE}, packed_wds={"maxcount": 2})
    write.run(inputs.config)
    return inputs


def test_train_and_val_splits_yield_every_pack_once_and_split_back_into_the_plan(written):
    root = written.config.packed_wds_dir
    train = get_train_dataset(
        root, worker_config=_worker_config(), batch_size=None, shuffle_buffer_size=None,
        max_samples_per_sequence=None, task_encoder=PackTaskEncoder(), repeat=False,
    )
    val = get_val_dataset(root, worker_config=_worker_config(), batch_size=None, task_encoder=PackTaskEncoder())
    expected_media = {i: [hashlib.sha256(b).hexdigest() for b in m] for i, m in written.media_in_order.items()}
    for split, dataset in (("train", train), ("val", val)):
        cooked = list(get_loader(dataset))
        planned = {p.pack_id: p for p in written.packs if p.split == split}
        assert all(isinstance(c, CookedPack) for c in cooked)
        assert sorted(c.pack.pack_id for c in cooked) == sorted(planned)  # every pack once
        for c in cooked:
            plan = planned[c.pack.pack_id]
            assert c.pack.split == split
            assert tuple(s.id for s in c.pack.samples) == plan.sample_ids
            assert tuple(s.token_len for s in c.pack.samples) == plan.sample_token_lens
            assert c.ids is None
            for sample_id, hashes in _media_hashes(c).items():
                assert hashes == expected_media[sample_id]


def test_our_idx_files_equal_the_ones_energon_prepare_writes(written, tmp_path):
    ours = written.config.packed_wds_dir
    theirs = tmp_path / "energon_prepared"
    theirs.mkdir()
    names = sorted(p.name for p in ours.glob("pretrain-*.tar"))
    for name in names:
        shutil.copyfile(ours / name, theirs / name)
    WebdatasetPreparator.prepare_dataset(
        theirs, names, split_parts_ratio=[("train", 1.0)], workers=1, tar_index_only=True
    )
    assert len(names) >= 3
    for name in names:
        assert (theirs / f"{name}.idx").read_bytes() == (ours / f"{name}.idx").read_bytes()


def test_energon_prepare_option_adds_the_sqlite_index_and_keeps_our_metadata(written, tmp_path):
    prepared_dir = tmp_path / "prepared"
    config = written.with_config(data={"packed_wds_dir": str(prepared_dir)}, write={"energon_prepare": True})
    write.run(config)
    ours = written.config.packed_wds_dir
    assert (prepared_dir / ".nv-meta/index.sqlite").is_file()
    for name in ("split.yaml", ".info.json", "dataset.yaml"):
        assert (prepared_dir / ".nv-meta" / name).read_bytes() == (ours / ".nv-meta" / name).read_bytes()
    train = get_train_dataset(
        prepared_dir, worker_config=_worker_config(), batch_size=None, shuffle_buffer_size=None,
        max_samples_per_sequence=None, task_encoder=PackTaskEncoder(), repeat=False,
    )
    assert sorted(c.pack.pack_id for c in get_loader(train)) == sorted(p.pack_id for p in written.packs if p.split == "train")
