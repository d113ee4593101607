"""The balanced schedule: which pack each data-parallel rank reads at each step (``parallel:``, docs/balance.md).

The plan (``balance``) sorts the train packs by cost (``packing/cost.py``) and cuts them into
*slots* of ``D = parallel.data_parallel_size`` consecutive packs, one per rank: the packs of a slot
cost nearly the same, so no rank waits for another. The slots are shuffled (``packing.seed``) and
written rank-major: train pack ``r * n + j`` is the pack rank ``r`` reads in slot ``j``, where
``n = packs_per_rank``. ``M = micro_batches_per_step`` consecutive slots make one optimizer step.

Readers never shuffle packs, only whole steps:

* ``PackDataset`` / ``PackSequence`` (``rank_order``): in epoch ``e`` rank ``r`` reads the steps in
  the order ``numpy.random.default_rng((seed, e)).permutation(n // M)``, each step's ``M`` slots in turn
  (a mixture's plan, ``step_order: rotate``: the written order rotated by a seeded offset instead, which
  keeps every window's mix of sources, ``packing/interleave.py``);
* energon (``loader/task_encoder.py`` ``train_dataset``) deals the ``D * n`` scheduled packs to ``D`` ranks in contiguous
  blocks of ``n`` and each rank's ``num_workers`` workers in equal sub-blocks, walked in order, so at
  every step all ranks read the same slot ``j`` (the same function of the step on every rank) when
  ``num_workers`` divides ``n``; the plan makes ``n`` a multiple of ``parallel.loader_workers`` and of ``M``.

Every slot is balanced on its own, so any grouping of slots into steps (the step shuffle, energon's
worker order) keeps every step balanced. Train packs past ``D * n`` (fewer than ``D * lcm(M, loader_workers)``:
a seeded random sample, plus the few that realign slots at gaps between cost clusters, ``_slots``) are in
no slot: they are written at the end of the train split and no balanced reader reads them; the plan's
summary counts them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

import numpy as np

from .errors import ConfigError, PlanError

__all__ = ["Schedule", "balance", "slot_balance", "step_ratios"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """The layout of a balanced train split (module doc); stored in the plan's meta and ``vlmpack.json``."""

    data_parallel_size: int  # D
    micro_batches_per_step: int  # M
    packs_per_rank: int  # n: slots, a multiple of M and of loader_workers
    loader_workers: int  # energon workers per rank that divide n: any divisor of this
    unscheduled: int  # train packs after the D * n scheduled ones, in no slot
    # how readers vary the step order per epoch: shuffle whole steps, or (a mixture, whose written order spreads
    # every source evenly: packing/interleave.py) rotate them, which keeps every window's mix
    step_order: str = "shuffle"

    @property
    def scheduled(self) -> int:
        return self.data_parallel_size * self.packs_per_rank

    @property
    def steps(self) -> int:
        return self.packs_per_rank // self.micro_batches_per_step

    @property
    def block(self) -> int:
        """Slots come in multiples of this per rank: lcm(micro_batches_per_step, loader_workers)."""
        return math.lcm(self.micro_batches_per_step, self.loader_workers)

    def record(self) -> dict:
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict | None) -> Schedule | None:
        if not record:
            return None
        values = {f.name: int(record[f.name]) for f in fields(cls) if f.name != "step_order"}
        return cls(**values, step_order=str(record.get("step_order", "shuffle")))

    def rank_order(self, rank: int, epoch: int, seed: int) -> np.ndarray:
        """Train-split positions rank ``rank`` reads in ``epoch``: whole steps shuffled, slots in order."""
        m = self.micro_batches_per_step
        rng = np.random.default_rng((seed, epoch))
        if self.step_order == "rotate":
            steps = np.roll(np.arange(self.steps), -int(rng.integers(self.steps)))
        else:
            steps = rng.permutation(self.steps)
        slots = (steps[:, None] * m + np.arange(m)).reshape(-1)
        return rank * self.packs_per_rank + slots

    def require_world(self, world_size: int, who: str) -> None:
        """``ConfigError`` unless the job has the data-parallel size the schedule was planned for."""
        if world_size != self.data_parallel_size:
            raise ConfigError(
                f"{who}: this dataset was planned for parallel.data_parallel_size {self.data_parallel_size}, but "
                f"{world_size} data-parallel ranks read it: each step would no longer be balanced (and packs would "
                f"be read twice or not at all). Rerun `vlmpack plan` and `vlmpack write` with "
                f"parallel.data_parallel_size: {world_size}, or read it unbalanced with follow_plan=False"
            )

    def require_workers(self, num_workers: int, who: str) -> None:
        """``ConfigError`` unless energon's ``num_workers`` divides every rank's pack count (module doc)."""
        workers = max(1, num_workers)
        if self.packs_per_rank % workers:
            fits = [w for w in range(1, 65) if self.packs_per_rank % w == 0][:8]
            raise ConfigError(
                f"{who}: num_workers {num_workers} does not divide the {self.packs_per_rank} packs each rank reads, so "
                f"energon's worker slices would cross ranks' steps and unbalance them; use num_workers in "
                f"{fits}, or rerun `vlmpack plan` + `write` with parallel.loader_workers: {workers} (or a multiple)"
            )


_TOLERANCE = 0.002  # a slot whose costliest pack is more than this over its mean may give up its cheapest pack


def balance(costs: np.ndarray, data_parallel_size: int, micro_batches_per_step: int, loader_workers: int,
            rng: np.random.Generator, slot_order: Callable[[np.ndarray], np.ndarray] | None = None,
            pack_class: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, Schedule]:
    """Pure: (scheduled, unscheduled, schedule) for packs of ``costs``; ``scheduled`` lists pack numbers
    (indexes into ``costs``) rank-major, ``unscheduled`` the packs left over (module doc, ``_slots``).

    ``slot_order``: given the slots ([n, d] pack numbers), their order (a mixture's interleave); else shuffled.
    ``pack_class``: per pack, its source class (a mixture): slots are mixed across classes (``_mix_slots``)."""
    d, m, w = data_parallel_size, micro_batches_per_step, loader_workers
    unit = math.lcm(m, w)
    n = len(costs) // d // unit * unit
    if n == 0:
        raise PlanError(
            f"the train split has {len(costs)} packs, fewer than one balanced block of {d * unit} "
            f"(parallel.data_parallel_size {d} x lcm(micro_batches_per_step {m}, loader_workers {w})): "
            "lower parallel.loader_workers or micro_batches_per_step, pack more data, or set "
            "parallel.data_parallel_size: null"
        )
    slots, unscheduled = _slots(np.asarray(costs, np.float64), d, n, rng)
    if pack_class is not None:
        slots = _mix_slots(slots, np.asarray(costs, np.float64), pack_class)
    order = rng.permutation(n) if slot_order is None else slot_order(slots)
    table = rng.permuted(slots, axis=1)[order]  # [slot, rank]; ranks of a slot shuffled
    schedule = Schedule(data_parallel_size=d, micro_batches_per_step=m, packs_per_rank=n, loader_workers=w,
                        unscheduled=len(unscheduled), step_order="shuffle" if slot_order is None else "rotate")
    return np.ascontiguousarray(table.T).reshape(-1), np.sort(unscheduled), schedule


def _slots(costs: np.ndarray, d: int, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` slots of ``d`` packs ([n, d] pack numbers) and the packs in none.

    The packs left over are mostly a seeded random sample, so no kind of pack (the cheapest hold the
    most short samples) is left out of training every epoch. A few (up to ``4 * (d - 1)``) are kept in
    reserve: walking the packs sorted by cost, a slot of ``d`` consecutive packs that straddles a gap
    between cost clusters (text packs below image packs, say) gives up its cheapest pack while that
    lowers its spread, so the slots realign at the gap instead of mixing both sides of it. The reserve
    the walk did not need joins the random sample and the walk runs again, so the costliest packs (the
    end of the walk) are not the ones left out.
    """
    rest = len(costs) - d * n
    reserve = min(rest, 4 * (d - 1))
    keep = np.ones(len(costs), bool)
    keep[rng.choice(len(costs), rest - reserve, replace=False)] = False
    order = np.argsort(costs, kind="stable")
    slots, skipped, tail = _walk(costs, order[keep[order]], d, n, reserve)
    if len(tail):  # the reserve the walk did not use: random packs instead of the costliest, unless worse
        again = keep.copy()
        kept = np.flatnonzero(keep)
        again[rng.choice(kept[~np.isin(kept, skipped)], len(tail), replace=False)] = False
        second = _walk(costs, order[again[order]], d, n, reserve - len(tail))
        if _worst(costs, second[0]) <= _worst(costs, slots) + _TOLERANCE:
            keep, (slots, skipped, tail) = again, second
    return slots, np.concatenate([np.flatnonzero(~keep), skipped, tail]).astype(np.int64)


_WINDOW = 1 << 16  # entries of the walk's spread held as Python floats at a time

_MIX_BLOCK = 8  # slots of near-equal cost whose packs are dealt across classes (_mix_slots)


def _mix_slots(slots: np.ndarray, costs: np.ndarray, pack_class: np.ndarray) -> np.ndarray:
    """``slots`` with the packs of every run of ``_MIX_BLOCK`` consecutive slots (the walk's order: near-equal
    cost) dealt across their classes, so each slot holds a cross-section of sources instead of one source's
    packs: a mixture's windows then hold each source more evenly. A run whose costs spread more than
    ``_TOLERANCE`` keeps its slots, so no slot's balance gets worse than the walk allows."""
    out = slots.copy()
    k, d = _MIX_BLOCK, slots.shape[1]
    for start in range(0, len(slots) - k + 1, k):
        packs = slots[start : start + k].reshape(-1)
        block = costs[packs]
        if block.max() > block.min() * (1 + _TOLERANCE):
            continue
        dealt = packs[np.lexsort((block, pack_class[packs]))]  # by class: pack i goes to slot i % k
        out[start : start + k] = dealt.reshape(d, k).T
    return out


def _worst(costs: np.ndarray, slots: np.ndarray) -> float:
    return float(np.max(_max_over_mean(costs[slots], axis=1)))


def _max_over_mean(table: np.ndarray, axis: int) -> np.ndarray:
    """Along ``axis``, the largest cost over the mean (1 where the mean is 0): how long the others wait."""
    mean = table.mean(axis=axis)
    return np.divide(table.max(axis=axis), mean, out=np.ones_like(mean), where=mean > 0)


def _walk(costs: np.ndarray, order: np.ndarray, d: int, n: int,
          budget: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The walk of ``_slots`` over ``order`` (cheapest first): the slots, the packs it skipped, those left at its end."""
    sorted_costs = costs[order]
    sums = np.zeros(len(order) + 1)
    np.cumsum(sorted_costs, out=sums[1:])
    windows = len(order) - d + 1
    spread = np.ones(max(windows, 0))
    for first in range(0, windows, _WINDOW):  # each window's mean and spread, a block at a time: no whole temporaries
        last = min(first + _WINDOW, windows)
        means = (sums[d + first : d + last] - sums[first:last]) / d
        np.divide(sorted_costs[d - 1 + first : d - 1 + last], means, out=spread[first:last], where=means > 0)
    del sorted_costs, sums
    starts = np.empty(n, np.int64)
    skipped, i, made = [], 0, 0
    near, base = [], 0  # spread[base : base + len(near)] as a list: scalar reads ~10x faster than from an array,
    while made < n:  # and a window of it, not a Python float per pack
        if not budget:  # nothing left to realign with: the rest are consecutive slots
            starts[made:] = np.arange(i, i + d * (n - made), d)
            i += d * (n - made)
            break
        if i + 1 >= base + len(near):
            base, near = i, spread[i : i + _WINDOW + 1].tolist()
        if near[i - base] > 1 + _TOLERANCE and near[i + 1 - base] < near[i - base]:
            skipped.append(i)
            budget -= 1
            i += 1
            continue
        starts[made] = i
        made += 1
        i += d
    slots = order[starts[:, None] + np.arange(d)]
    return slots, order[np.asarray(skipped, np.int64)], order[i:]


def slot_balance(costs: np.ndarray, schedule: Schedule) -> np.ndarray:
    """Per optimizer step of the schedule, the slowest rank's cost over the mean (``costs`` in written order)."""
    d, n, m = schedule.data_parallel_size, schedule.packs_per_rank, schedule.micro_batches_per_step
    per_rank = costs[: d * n].reshape(d, n // m, m).sum(axis=2)  # [rank, step]
    return _max_over_mean(per_rank, axis=0)


def step_ratios(costs: np.ndarray, schedule: Schedule, seed: int) -> dict[str, np.ndarray]:
    """Per step, slowest rank / mean: as planned, and for the same packs dealt in a seeded random order
    (what a loader without the schedule does), the comparison the plan's summary and stats show."""
    scheduled = costs[: schedule.scheduled]
    shuffled = np.random.default_rng(seed).permutation(scheduled)
    return {"balanced": slot_balance(scheduled, schedule), "random order": slot_balance(shuffled, schedule)}
