"""The loader with DataLoader workers and several ranks: batches pickle, splits are kept, work is equal, state resumes.

Packed data: the write stage's real output (``_packed_fixture.build_inputs`` + ``write.run``),
11 packs of 2 samples (text, image, multi-image, video), 10 train + 1 val, in several shards.
Token lengths in that fixture are made up, so the encoder runs with ``check_lengths=False``
(pixels, grids and positions are still the real processor's); the one encoder that checks
lengths is the failing one. Every DataLoader has a ``timeout`` and every energon loader a
watchdog that fails the run, so a regression to the old hang fails instead of waiting forever.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass

import pytest
import torch
from _packed_fixture import build_inputs
from megatron.energon import WorkerConfig, get_loader, get_savable_loader, get_train_dataset, get_val_dataset
from torch.utils.data import DataLoader

from vlmpack_offline.config import Config
from vlmpack_offline.errors import LengthMismatchError, ShardError
from vlmpack_offline.loader import (
    EncoderOptions,
    PackBatch,
    PackDataset,
    PackEncoder,
    PackTaskEncoder,
    VisionInputs,
)
from vlmpack_offline.loader.cooker import CookedPack
from vlmpack_offline.loader.dataset import PackIndex
from vlmpack_offline.stages import write

pytestmark = pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")

TINY_VIDEO = {"min_pixels": 4 * 28 * 28, "max_pixels": 16 * 28 * 28, "min_frames": 4, "fps": 2.0}
WORLD, WORKERS = 2, 2
N_TRAIN = 10  # 2 shards x (12 - 1 dropped) samples, 2 per pack -> 11 packs, the last one val
PER_RANK = N_TRAIN // (WORLD * WORKERS) * WORKERS  # 4: each of the 4 slots reads 2, 10 % 4 = 2 left out
TIMEOUT_S = 300  # a hang guard, not a speed bound: a DataLoader that waits longer for one pack is hanging, even on a busy machine


@dataclass(frozen=True, slots=True, kw_only=True)
class Packed:
    config: Config
    encoder: PackEncoder  # check_lengths=False (the fixture's lengths are made up)
    train: frozenset[int]  # pack ids of the train split
    val: frozenset[int]


@pytest.fixture(scope="module")
def packed(tmp_path_factory, qwen25_processor_dir) -> Packed:
    inputs = build_inputs(
        tmp_path_factory.mktemp("loader_workers"), n_shards=2, per_shard=12, pack_size=2, val_packs=1,
        model={"processor_kwargs": {"pretrained_model_name_or_path": str(qwen25_processor_dir)}},
        video=TINY_VIDEO, packed_wds={"maxcount": 3},
    )  # fmt: skip
    assert write.run(inputs.config).exit_code == 0
    train = frozenset(p.pack_id for p in inputs.packs if p.split == "train")
    val = frozenset(p.pack_id for p in inputs.packs if p.split == "val")
    assert len(train) == N_TRAIN and len(val) == 1
    encoder = PackEncoder(inputs.config, EncoderOptions(check_lengths=False))
    return Packed(config=inputs.config, encoder=encoder, train=train, val=val)


def _loader(dataset, **kwargs) -> DataLoader:
    return DataLoader(dataset, batch_size=None, num_workers=WORKERS, timeout=TIMEOUT_S, **kwargs)


def _check_shapes(batch: PackBatch) -> None:
    s = batch.seq_len
    assert batch.input_ids.shape == batch.labels.shape == (1, s)
    assert batch.position_ids.shape == (3, 1, s)
    assert batch.cu_seqlens.dtype == torch.int32 and int(batch.cu_seqlens[-1]) == s
    for kind in ("image", "video"):
        suffix = "" if kind == "image" else "_videos"
        if f"{kind}_grid_thw" in batch.vision:
            rows = int(batch.vision[f"{kind}_grid_thw"].prod(dim=1).sum())
            assert batch.vision[f"pixel_values{suffix}"].shape[0] == rows


@pytest.fixture(scope="module")
def plain_epoch(packed) -> dict[int, list[PackBatch]]:
    """Epoch 0 of each of 2 ranks through DataLoader(num_workers=2)."""
    return {
        rank: list(_loader(PackDataset(packed.config.packed_wds_dir, packed.encoder, rank=rank, world_size=WORLD)))
        for rank in range(WORLD)
    }


def test_batches_from_workers_are_real_and_pickle(plain_epoch, packed):
    batches = [b for rank in plain_epoch.values() for b in rank]
    for batch in batches:
        _check_shapes(batch)
    assert any("pixel_values" in b.vision for b in batches)
    assert any("pixel_values_videos" in b.vision for b in batches)
    batch = next(b for b in batches if len(b.vision))
    copy = pickle.loads(pickle.dumps(batch))
    assert isinstance(copy.vision, VisionInputs) and list(copy.vision) == list(batch.vision)
    assert all(torch.equal(copy.vision[k], batch.vision[k]) for k in batch.vision)
    assert torch.equal(copy.input_ids, batch.input_ids) and copy.position == batch.position
    with pytest.raises(TypeError):
        copy.vision.fields["pixel_values"] = None  # still read-only after the round trip
    cooked = PackIndex.from_dir(packed.config.packed_wds_dir, "train").read(0)
    cooked_copy = pickle.loads(pickle.dumps(cooked))
    assert isinstance(cooked_copy, CookedPack) and cooked_copy.pack == cooked.pack and cooked_copy.media == cooked.media


def test_ranks_and_workers_get_equal_shares_of_the_train_split(plain_epoch, packed):
    ids = {rank: [b.pack_id for b in batches] for rank, batches in plain_epoch.items()}
    assert [len(v) for v in ids.values()] == [PER_RANK] * WORLD  # equal per rank -> equal per worker (round robin)
    seen = ids[0] + ids[1]
    assert len(set(seen)) == len(seen)  # no pack twice in an epoch
    assert set(seen) <= packed.train  # never a val pack
    assert len(packed.train - set(seen)) == N_TRAIN % (WORLD * WORKERS)  # the documented remainder
    for batches in plain_epoch.values():  # batch k is position k of the rank's order
        assert [b.position.index for b in batches] == list(range(PER_RANK))


def test_val_split_and_epoch_reshuffle(packed):
    root = packed.config.packed_wds_dir
    assert {b.pack_id for b in PackDataset(root, packed.encoder, split="val")} == packed.val
    with pytest.raises(ShardError, match="fewer than the 2 slots"):  # 1 val pack cannot feed 2 workers equally
        next(iter(_loader(PackDataset(root, packed.encoder, split="val"))))
    dataset = PackDataset(root, packed.encoder, rank=0, world_size=1, seed=5)
    orders = [dataset.rank_order(epoch, num_workers=WORKERS).tolist() for epoch in range(4)]
    assert all(len(o) == N_TRAIN // WORKERS * WORKERS for o in orders)
    assert orders[0] != orders[1]  # reshuffled per epoch
    assert orders[0] == PackDataset(root, packed.encoder, rank=0, world_size=1, seed=5).rank_order(0, WORKERS).tolist()


def test_plain_state_saved_mid_epoch_resumes_in_a_fresh_loader(plain_epoch, packed):
    root = packed.config.packed_wds_dir
    dataset = PackDataset(root, packed.encoder, rank=1, world_size=WORLD)
    before = []
    for batch in _loader(dataset):
        before.append(batch)
        if len(before) == 3:  # an odd count: the next pack comes from worker 1
            break
    state = json.loads(json.dumps(dataset.state_dict(before[-1])))  # plain data, fit for a checkpoint
    fresh = PackDataset(root, packed.encoder, rank=1, world_size=WORLD)
    fresh.load_state_dict(state)
    after = list(_loader(fresh))
    assert [b.pack_id for b in before + after] == [b.pack_id for b in plain_epoch[1]]
    fresh.set_epoch(1)  # the next epoch starts from its beginning again
    assert fresh.state_dict()["next_index"] == 0


def test_a_pack_failing_in_a_worker_raises_in_the_main_process(packed):
    checking = PackEncoder(packed.config)  # checks lengths: the fixture's made-up lengths do not match
    with pytest.raises(LengthMismatchError, match="materialized"):
        next(iter(_loader(PackDataset(packed.config.packed_wds_dir, checking))))


# -- energon ------------------------------------------------------------------------------------
def _energon_train(packed: Packed, rank: int):
    return get_train_dataset(
        packed.config.packed_wds_dir, batch_size=1, shuffle_buffer_size=None, max_samples_per_sequence=None,
        worker_config=WorkerConfig(rank=rank, world_size=WORLD, num_workers=WORKERS),
        task_encoder=PackTaskEncoder(packed.encoder),
    )  # fmt: skip


def _take(loader, n: int) -> list[int]:
    out = []
    for batch in loader:
        _check_shapes(batch)
        out.append(batch.pack_id)
        if len(out) == n:
            break
    return out


@pytest.fixture(scope="module")
def energon_epoch(packed) -> dict[int, list[int]]:
    """One epoch (len(loader) batches) of each rank from energon's infinite train loader."""
    out = {}
    for rank in range(WORLD):
        loader = get_loader(_energon_train(packed, rank), watchdog_timeout_seconds=TIMEOUT_S, fail_on_timeout=True)
        out[rank] = _take(loader, len(loader))
    return out


def test_energon_ranks_see_each_train_pack_once_per_epoch(energon_epoch, packed):
    assert len(energon_epoch[0]) == len(energon_epoch[1])
    seen = energon_epoch[0] + energon_epoch[1]
    assert sorted(seen) == sorted(packed.train)
    val = get_val_dataset(packed.config.packed_wds_dir, batch_size=1, task_encoder=PackTaskEncoder(packed.encoder),
                          worker_config=WorkerConfig(rank=0, world_size=1, num_workers=0))  # fmt: skip
    assert {b.pack_id for b in get_loader(val)} == packed.val


def test_energon_state_saved_mid_epoch_resumes_in_a_fresh_loader(energon_epoch, packed):
    rank = 0
    loader = get_savable_loader(_energon_train(packed, rank), watchdog_timeout_seconds=TIMEOUT_S, fail_on_timeout=True)
    n = len(loader)
    before = _take(loader, 3)
    state = loader.save_state_rank()
    fresh = get_savable_loader(_energon_train(packed, rank), watchdog_timeout_seconds=TIMEOUT_S, fail_on_timeout=True)
    fresh.restore_state_rank(state)
    after = _take(fresh, n - len(before))
    assert before + after == energon_epoch[rank]


def test_plain_state_without_workers_needs_no_batch(plain_epoch, packed):
    root = packed.config.packed_wds_dir
    dataset = PackDataset(root, packed.encoder, rank=0, world_size=WORLD)
    before = []
    for batch in DataLoader(dataset, batch_size=None, num_workers=0):
        before.append(batch.pack_id)
        if len(before) == 2:
            break
    fresh = PackDataset(root, packed.encoder, rank=0, world_size=WORLD)
    fresh.load_state_dict(dataset.state_dict())  # the dataset counted what it yielded in this process
    after = [b.pack_id for b in _loader(fresh)]  # resumed with workers: the order does not depend on them
    assert before + after == [b.pack_id for b in plain_epoch[0]]
