"""The balanced schedule: which pack each data-parallel rank reads at each step (``parallel:``, docs/balance.md).

The plan (``balance``) sorts the train packs by cost (``packing/cost.py``) and cuts them into
*slots* of ``D = parallel.data_parallel_size`` consecutive packs, one per rank: the packs of a slot
cost nearly the same, so no rank waits for another. The slots are shuffled (``packing.seed``) and
written rank-major: train pack ``r * n + j`` is the pack rank ``r`` reads in slot ``j``, where
``n = packs_per_rank``. ``M = micro_batches_per_step`` consecutive slots make one optimizer step.

Readers never shuffle packs, only whole steps:

* ``PackDataset`` / ``PackSequence`` (``rank_order``): in epoch ``e`` rank ``r`` reads the steps in
  the order ``numpy.random.default_rng((seed, e)).permutation(n // M)``, each step's ``M`` slots in turn;
* energon (``loader/energon.py``) deals the ``D * n`` scheduled packs to ``D`` ranks in contiguous
  blocks of ``n`` and each rank's ``num_workers`` workers in equal sub-blocks, walked in order, so at
  every step all ranks read the same slot ``j`` (the same function of the step on every rank) when
  ``num_workers`` divides ``n``; the plan makes ``n`` a multiple of ``parallel.loader_workers`` and of ``M``.

Every slot is balanced on its own, so any grouping of slots into steps (the step shuffle, energon's
worker order) keeps every step balanced. Train packs past ``D * n`` (fewer than ``D * lcm(M, loader_workers)``,
the cheapest ones) are in no slot: they are written at the end of the train split and no balanced reader reads
them; the plan's summary counts them.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

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

    @property
    def scheduled(self) -> int:
        return self.data_parallel_size * self.packs_per_rank

    @property
    def steps(self) -> int:
        return self.packs_per_rank // self.micro_batches_per_step

    def record(self) -> dict:
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict | None) -> Schedule | None:
        return None if not record else cls(**{k: int(record[k]) for k in (
            "data_parallel_size", "micro_batches_per_step", "packs_per_rank", "loader_workers", "unscheduled")})

    def rank_order(self, rank: int, epoch: int, seed: int) -> np.ndarray:
        """Train-split positions rank ``rank`` reads in ``epoch``: whole steps shuffled, slots in order."""
        m = self.micro_batches_per_step
        steps = np.random.default_rng((seed, epoch)).permutation(self.steps)
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


def balance(costs: np.ndarray, data_parallel_size: int, micro_batches_per_step: int, loader_workers: int,
            rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, Schedule]:
    """Pure: (scheduled, unscheduled, schedule) for packs of ``costs``; ``scheduled`` lists pack numbers
    (indexes into ``costs``) rank-major, ``unscheduled`` the cheapest packs left over (module doc)."""
    d, m, w = data_parallel_size, micro_batches_per_step, loader_workers
    unit = m * w // math.gcd(m, w)
    n = len(costs) // d // unit * unit
    if n == 0:
        raise PlanError(
            f"the train split has {len(costs)} packs, fewer than one balanced block of {d * unit} "
            f"(parallel.data_parallel_size {d} x lcm(micro_batches_per_step {m}, loader_workers {w})): "
            "lower parallel.loader_workers or micro_batches_per_step, pack more data, or set "
            "parallel.data_parallel_size: null"
        )
    by_cost = np.argsort(costs, kind="stable")
    rest = len(costs) - d * n
    unscheduled, kept = by_cost[:rest], by_cost[rest:]
    table = rng.permuted(kept.reshape(n, d), axis=1)[rng.permutation(n)]  # [slot, rank]; ranks of a slot shuffled
    schedule = Schedule(data_parallel_size=d, micro_batches_per_step=m, packs_per_rank=n, loader_workers=w,
                        unscheduled=rest)
    return np.ascontiguousarray(table.T).reshape(-1), np.sort(unscheduled), schedule


def slot_balance(costs: np.ndarray, schedule: Schedule) -> np.ndarray:
    """Per optimizer step of the schedule, the slowest rank's cost over the mean (``costs`` in written order)."""
    d, n, m = schedule.data_parallel_size, schedule.packs_per_rank, schedule.micro_batches_per_step
    per_rank = costs[: d * n].reshape(d, n // m, m).sum(axis=2)  # [rank, step]
    mean = per_rank.mean(axis=0)
    return np.divide(per_rank.max(axis=0), mean, out=np.ones_like(mean), where=mean > 0)


def step_ratios(costs: np.ndarray, schedule: Schedule, seed: int) -> dict[str, np.ndarray]:
    """Per step, slowest rank / mean: as planned, and for the same packs dealt in a seeded random order
    (what a loader without the schedule does), the comparison the plan's summary and stats show."""
    scheduled = costs[: schedule.scheduled]
    shuffled = np.random.default_rng(seed).permutation(scheduled)
    return {"balanced": slot_balance(scheduled, schedule), "random order": slot_balance(shuffled, schedule)}
