"""A balanced plan reaches training: every loader hands rank r at each step the pack of its slot.

The packed data is the demo's, planned by the real stages with ``parallel.data_parallel_size: 2``
(``schedule.py``): train pack ``r * n + j`` is rank r's pack in slot j, and the packs of one slot
cost nearly the same. What each rank reads is taken from the loaders themselves (PackDataset with
and without DataLoader workers, energon's own savable loader, accelerate's and torch's samplers
over PackSequence), never from the schedule's arithmetic.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset
from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

from vlmpack_offline.errors import ConfigError
from vlmpack_offline.loader import (
    PackDataset,
    PackEncoder,
    PackSequence,
    PackSequenceSampler,
    PackTaskEncoder,
)
from vlmpack_offline.loader.task_encoder import train_dataset
from vlmpack_offline.packed_settings import written_schedule
from vlmpack_offline.plan_file import read_plan_arrays
from vlmpack_offline.schedule import Schedule
from vlmpack_offline.synthetic.demo import packed_demo

pytestmark = pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")

WORLD = 2
TIMEOUT_S = 300  # a hang guard, not a speed bound (a busy machine is slow, a hang never ends)


@dataclass(frozen=True, slots=True, kw_only=True)
class Balanced:
    root: Path  # the packed folder
    schedule: Schedule
    encoder: PackEncoder
    cost: np.ndarray  # the plan's cost of each pack, by pack id


def _build(root: Path, **parallel) -> Balanced:
    packed = packed_demo(root, max_token_len=512, parallel={"data_parallel_size": WORLD, **parallel})
    return Balanced(root=packed, schedule=written_schedule(packed), encoder=PackEncoder.from_packed_dir(packed),
                    cost=read_plan_arrays(root / "work").cost)


@pytest.fixture(scope="module")
def balanced(tmp_path_factory) -> Balanced:
    return _build(tmp_path_factory.mktemp("balanced"), loader_workers=2)


@pytest.fixture(scope="module")
def two_micro(tmp_path_factory) -> Balanced:
    return _build(tmp_path_factory.mktemp("two_micro"), loader_workers=1, micro_batches_per_step=2)


def _slots(ids_per_rank: dict[int, list[int]], schedule: Schedule) -> dict[int, list[int]]:
    """The slot each read pack fills in its rank's block (pack id r * n + j is slot j of rank r)."""
    n = schedule.packs_per_rank
    for rank, ids in ids_per_rank.items():
        assert all(rank * n <= i < (rank + 1) * n for i in ids), f"rank {rank} read another rank's pack: {ids}"
    return {rank: [i - rank * n for i in ids] for rank, ids in ids_per_rank.items()}


def _plain(balanced: Balanced, rank: int, workers: int, epoch: int = 0) -> list[int]:
    dataset = PackDataset(balanced.root, balanced.encoder, rank=rank, world_size=WORLD)
    dataset.set_epoch(epoch)
    return [b.pack_id for b in DataLoader(dataset, batch_size=None, num_workers=workers, timeout=TIMEOUT_S * workers)]


def _energon(balanced: Balanced, rank: int, workers: int):
    config = WorkerConfig(rank=rank, world_size=WORLD, num_workers=workers)
    return get_savable_loader(train_dataset(balanced.root, PackTaskEncoder(balanced.encoder), config),
                              watchdog_timeout_seconds=TIMEOUT_S, fail_on_timeout=True)


def _take(loader, n: int) -> list[int]:
    out = []
    for batch in loader:
        out.append(batch.pack_id)
        if len(out) == n:
            break
    return out


def test_the_plan_balances_each_slot_better_than_a_random_deal(balanced):
    schedule, cost = balanced.schedule, balanced.cost
    table = cost[: schedule.scheduled].reshape(WORLD, schedule.packs_per_rank)
    balanced_ratio = (table.max(axis=0) / table.mean(axis=0)).max()
    dealt = np.random.default_rng(1).permutation(cost[: schedule.scheduled]).reshape(WORLD, -1)
    assert balanced_ratio <= (dealt.max(axis=0) / dealt.mean(axis=0)).max()


@pytest.mark.parametrize("workers", [0, 2])
def test_pack_dataset_ranks_read_the_same_slot_at_every_step(balanced, workers):
    schedule = balanced.schedule
    slots = _slots({rank: _plain(balanced, rank, workers) for rank in range(WORLD)}, schedule)
    assert slots[0] == slots[1]
    assert sorted(slots[0]) == list(range(schedule.packs_per_rank))  # every scheduled pack once an epoch


def test_pack_dataset_shuffles_whole_steps_per_epoch(balanced):
    first, second = (_slots({0: _plain(balanced, 0, 0, epoch)}, balanced.schedule)[0] for epoch in (0, 1))
    assert sorted(first) == sorted(second) and first != second


def test_micro_batches_of_one_step_stay_together_when_steps_are_shuffled(two_micro):
    slots = _slots({rank: _plain(two_micro, rank, 2, epoch=3) for rank in range(WORLD)}, two_micro.schedule)
    assert slots[0] == slots[1]
    steps = [tuple(slots[0][k : k + 2]) for k in range(0, len(slots[0]), 2)]
    assert all(b == a + 1 and a % 2 == 0 for a, b in steps)  # slots 2s and 2s + 1 form step s


def test_pack_dataset_resumes_mid_epoch_on_its_slots(balanced):
    dataset = PackDataset(balanced.root, balanced.encoder, rank=1, world_size=WORLD)
    loader = DataLoader(dataset, batch_size=None, num_workers=2, timeout=TIMEOUT_S)
    before = []
    for batch in loader:
        before.append(batch)
        if len(before) == 3:
            break
    state = dataset.state_dict(before[-1])
    fresh = PackDataset(balanced.root, balanced.encoder, rank=1, world_size=WORLD)
    fresh.load_state_dict(state)
    after = [b.pack_id for b in DataLoader(fresh, batch_size=None, num_workers=2, timeout=TIMEOUT_S)]
    assert [b.pack_id for b in before] + after == _plain(balanced, 1, 0)


@pytest.mark.parametrize("workers", [0, 2])
def test_energon_ranks_read_the_same_slot_at_every_step(balanced, workers):
    schedule = balanced.schedule
    read = {rank: _take(_energon(balanced, rank, workers), 2 * schedule.packs_per_rank) for rank in range(WORLD)}
    slots = _slots(read, schedule)
    assert slots[0] == slots[1]
    assert sorted(slots[0][: schedule.packs_per_rank]) == list(range(schedule.packs_per_rank))
    assert slots[0][: schedule.packs_per_rank] == slots[0][schedule.packs_per_rank :]  # each epoch alike


def test_energon_resumes_mid_epoch_on_its_slots(balanced):
    n = balanced.schedule.packs_per_rank
    whole = _take(_energon(balanced, 1, 2), n)
    loader = _energon(balanced, 1, 2)
    before = _take(loader, 3)
    state = loader.save_state_rank()
    fresh = _energon(balanced, 1, 2)
    fresh.restore_state_rank(state)
    assert before + _take(fresh, n - 3) == whole


def test_energon_worker_counts_that_would_cross_slots_are_refused(balanced):
    n = balanced.schedule.packs_per_rank
    bad = next(w for w in range(2, 9) if n % w)
    with pytest.raises(ConfigError, match=f"num_workers {bad} does not divide the {n} packs"):
        train_dataset(balanced.root, PackTaskEncoder(balanced.encoder), WorkerConfig(rank=0, world_size=WORLD,
                                                                                     num_workers=bad))
    with pytest.raises(ConfigError, match="shuffle_buffer_size would reorder"):
        train_dataset(balanced.root, PackTaskEncoder(balanced.encoder), WorkerConfig(rank=0, world_size=WORLD,
                      num_workers=0), shuffle_buffer_size=10)  # fmt: skip


def test_a_plain_energon_train_dataset_says_loudly_that_it_undoes_the_balance(balanced, caplog):
    with caplog.at_level(logging.WARNING):
        get_train_dataset(balanced.root, batch_size=1, shuffle_buffer_size=None, max_samples_per_sequence=None,
                          worker_config=WorkerConfig(rank=0, world_size=WORLD, num_workers=0),
                          task_encoder=PackTaskEncoder(balanced.encoder))
    assert "every step waits for its slowest rank again" in caplog.text


@pytest.mark.parametrize("reader", ["PackDataset", "PackSequence", "energon"])
def test_a_dataset_planned_for_2_ranks_is_refused_on_3(balanced, reader):
    with pytest.raises(ConfigError, match="planned for parallel.data_parallel_size 2, but 3 data-parallel ranks"):
        if reader == "PackDataset":
            PackDataset(balanced.root, balanced.encoder, rank=0, world_size=3)
        elif reader == "PackSequence":
            PackSequence(balanced.root, balanced.encoder, world_size=3)
        else:
            train_dataset(balanced.root, PackTaskEncoder(balanced.encoder), WorkerConfig(rank=0, world_size=3,
                                                                                         num_workers=0))


def test_follow_plan_false_reads_a_balanced_folder_the_unbalanced_way(balanced):
    dataset = PackDataset(balanced.root, balanced.encoder, rank=0, world_size=3, follow_plan=False)
    assert len(dataset.rank_order(0)) == dataset.packs_per_rank(0) > 0


def test_pack_sequence_under_accelerate_and_torch_samplers_hands_each_rank_its_slots(balanced):
    from accelerate.data_loader import BatchSamplerShard

    sequence = PackSequence(balanced.root, balanced.encoder, world_size=WORLD)
    assert len(sequence) == balanced.schedule.scheduled
    accelerate_items = {rank: [i for (i,) in BatchSamplerShard(BatchSampler(SequentialSampler(sequence), 1, False),
                                                               num_processes=WORLD, process_index=rank)]
                        for rank in range(WORLD)}  # fmt: skip
    torch_items = {rank: list(PackSequenceSampler(sequence, num_replicas=WORLD, rank=rank)) for rank in range(WORLD)}
    assert accelerate_items == torch_items
    read = {rank: [sequence.pack_index(i) for i in items] for rank, items in torch_items.items()}
    slots = _slots(read, balanced.schedule)
    assert slots[0] == slots[1] == _slots({0: _plain(balanced, 0, 0)}, balanced.schedule)[0]
    assert sequence[0].pack_id == read[0][0]


def test_pack_sequence_refuses_other_gradient_accumulation_than_planned(two_micro):
    with pytest.raises(ConfigError, match="planned for parallel.micro_batches_per_step 2"):
        PackSequence(two_micro.root, two_micro.encoder, world_size=WORLD, micro_batches_per_step=1)
    assert len(PackSequence(two_micro.root, two_micro.encoder, world_size=WORLD, micro_batches_per_step=2)) > 0


def test_inspect_names_the_schedule_and_the_worker_rule(balanced):
    from vlmpack_offline.inspect_pack import summarize

    n = balanced.schedule.packs_per_rank
    assert f"train balanced for {WORLD} data-parallel ranks x 1 micro-batches" in summarize(balanced.root)
    assert f"energon num_workers must divide {n}" in summarize(balanced.root)


def test_the_scan_records_each_samples_vision_encoder_work_for_the_cost_model(balanced):
    import sqlite3

    work = balanced.root.parent / "work"
    with sqlite3.connect(work / "manifest.sqlite") as db:
        rows = db.execute("SELECT media_type, media_tokens, encoder_patches, encoder_attention FROM samples "
                          "WHERE status = 'ok'").fetchall()
    assert {kind for kind, *_ in rows} >= {"text", "image", "video"}
    for kind, media, patches, blocks in rows:
        assert patches == 4 * media  # Qwen2.5-VL: 2 x 2 patches merge into one visual token
        assert (blocks == 0) if kind == "text" else (0 < blocks <= patches**2)


def test_trainer_packs_of_a_balanced_folder_need_its_ranks_and_gradient_accumulation(two_micro, tmp_path):
    from transformers import TrainingArguments

    from vlmpack_offline.loader.adapters.hf_trainer import TrainerPacks

    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=1, gradient_accumulation_steps=2,
                             use_cpu=True, report_to=[])
    assert args.world_size == 1
    with pytest.raises(ConfigError, match="planned for parallel.data_parallel_size 2, but 1 data-parallel ranks"):
        TrainerPacks.for_packed_dir(two_micro.root, args)
    packs = TrainerPacks.for_packed_dir(two_micro.root, args, follow_plan=False)  # a one-process check run
    assert len(packs.dataset) > 0 and packs.dataset.schedule is None
