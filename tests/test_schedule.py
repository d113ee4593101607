"""The balanced schedule's slots (schedule.balance): every pack once, near-equal cost within a slot,
and the packs left out drawn so that no kind of pack is left out every epoch."""

from __future__ import annotations

import numpy as np
import pytest

from vlmpack_offline.errors import PlanError
from vlmpack_offline.schedule import balance

RANKS = 8


def _clusters(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Text packs just under image packs in cost, neither a multiple of the rank count; one partial pack."""
    rng = np.random.default_rng(seed)
    text, image = rng.uniform(0.842, 0.850, 601), rng.uniform(0.90, 1.156, 1934)
    costs = np.concatenate([text, image, [0.711]])
    return costs, np.arange(len(costs)) < len(text)


@pytest.mark.parametrize("seed", range(6))
def test_no_slot_mixes_both_sides_of_a_jump_in_cost(seed):
    costs, _ = _clusters(seed)
    scheduled, left, schedule = balance(costs, RANKS, 1, 8, np.random.default_rng(seed))
    assert sorted([*scheduled, *left]) == list(range(len(costs)))  # every pack once: in a slot or left out
    assert len(left) == schedule.unscheduled < RANKS * 8
    table = costs[scheduled].reshape(RANKS, schedule.packs_per_rank)  # rank-major
    assert (table.max(axis=0) / table.mean(axis=0)).max() < 1.005  # a straddling slot would be ~1.05


def test_the_packs_left_out_are_not_only_the_cheapest():
    costs, is_text = _clusters(0)
    left = np.concatenate([balance(costs, RANKS, 1, 8, np.random.default_rng(seed))[1] for seed in range(20)])
    text_share = is_text[left].mean()
    assert 0.1 < text_share < 0.5  # text is 24% of the packs; leaving out the cheapest would make it ~100%


def test_micro_batches_and_workers_set_the_block_the_slots_come_in():
    costs = np.random.default_rng(0).uniform(1, 2, 1000)
    _, left, schedule = balance(costs, RANKS, 3, 4, np.random.default_rng(0))
    assert schedule.packs_per_rank % 12 == 0 and schedule.packs_per_rank == 1000 // RANKS // 12 * 12
    assert schedule.scheduled + len(left) == 1000
    with pytest.raises(PlanError, match="fewer than one balanced block of 96"):
        balance(costs[:95], RANKS, 3, 4, np.random.default_rng(0))
