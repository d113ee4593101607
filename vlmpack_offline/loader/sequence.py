"""``PackSequence``: the packs of a split as a map-style dataset, item ``i`` in the order the ranks read them.

Frameworks that shard a map-style dataset themselves (accelerate's ``BatchSamplerShard`` under
``transformers.Trainer``, ``DistributedSampler(shuffle=False)`` under NeMo Automodel) give
data-parallel rank r of W the items r, r + W, r + 2W, ... So item ``i`` of an epoch is the pack
rank ``i % W`` reads at its step ``i // W``::

    perm (epoch e)   = numpy.random.default_rng((seed, e)).permutation(N)     as PackDataset
    item i           = pack perm[i]
    rank r, k-th     = perm[k * W + r]  = PackDataset(rank=r, world_size=W).rank_order(e)[k]

The length is cut to a multiple of ``W * micro_batches_per_step``, so every rank runs the same
number of full optimizer steps (the packs left over differ each epoch, as in ``PackDataset``).
DataLoader workers read by index: a rank never reads another rank's packs, and resuming at a
sampler position reads nothing it skips. ``set_epoch`` picks the epoch's permutation (frameworks
call it before each epoch); a worker keeps the epoch it was started with, so persistent workers
need a new DataLoader iterator per epoch.

A balanced split (``schedule.py``: planned with ``parallel.data_parallel_size``) is read as planned:
item ``k * W + r`` is ``Schedule.rank_order(r, e, seed)[k]``, the pack of rank r's k-th slot, so each
micro-batch of all ranks is one balanced slot. ``world_size`` must be the planned D and
``micro_batches_per_step`` the planned M (``ConfigError`` otherwise; ``follow_plan=False`` reads it
unbalanced).

A sampler that shuffles the items would undo the order each rank was given:
the first item asked for out of order in one process raises, naming the sampler setting.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset, DistributedSampler

from ..errors import ConfigError
from .batch import PackBatch, PackPosition
from .encoder import PackEncoder

__all__ = ["PackSequence", "PackSequenceSampler"]


class PackSequence(Dataset):
    """The split's packs in the ranks' reading order for ``world_size`` data-parallel ranks (module doc).

    ``transform``: applied to each ``PackBatch`` in ``__getitem__`` (in the DataLoader workers), e.g.
    ``AutomodelAdapter.pack`` for a framework whose collate function takes its own per-pack dicts.
    """

    def __init__(self, packed_wds_dir: str | Path, encoder: PackEncoder, *, world_size: int = 1,
                 micro_batches_per_step: int = 1, seed: int = 0, split: str = "train",
                 transform: Callable[[PackBatch], Any] | None = None, follow_plan: bool = True) -> None:
        from .dataset import PackDataset

        for name, value in (("world_size", world_size), ("micro_batches_per_step", micro_batches_per_step)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{type(self).__name__}: {name} must be a positive integer, got {value!r}")
        # reads, encodes and orders the packs (every rank's order); a balanced split's checks are its own
        self.packs = PackDataset(packed_wds_dir, encoder, split=split, rank=0, world_size=world_size, seed=seed,
                                 follow_plan=follow_plan)
        self.schedule = self.packs.schedule
        if self.schedule is not None and micro_batches_per_step != self.schedule.micro_batches_per_step:
            raise ConfigError(
                f"{type(self).__name__}: {micro_batches_per_step} micro-batches per step (gradient accumulation), "
                f"but {packed_wds_dir} was planned for parallel.micro_batches_per_step "
                f"{self.schedule.micro_batches_per_step}: set gradient accumulation to that, or rerun "
                f"`vlmpack plan` + `write` with parallel.micro_batches_per_step: {micro_batches_per_step}")
        self.world_size = world_size
        self.micro_batches_per_step = micro_batches_per_step
        self.transform = transform
        self.epoch = 0
        self._last: int | None = None  # the last item this process read in this epoch (order check)
        self._order: tuple[int, Any] | None = None  # (epoch, its permutation): computed once per epoch
        per_step = world_size * micro_batches_per_step
        planned = self.schedule.scheduled if self.schedule is not None else len(self.packs.packs)
        self.length = planned // per_step * per_step
        if self.length == 0:
            raise ConfigError(
                f"split {split!r} of {packed_wds_dir} has {len(self.packs.packs)} packs, fewer than one optimizer "
                f"step takes ({world_size} ranks x {micro_batches_per_step} micro-batches)"
            )

    def __len__(self) -> int:
        return self.length

    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch``'s permutation from the next item on."""
        self.epoch = epoch
        self._last = None

    def pack_index(self, i: int, epoch: int | None = None) -> int:
        """Which pack of the split item ``i`` of ``epoch`` is (data-parallel rank ``i % world_size`` reads it)."""
        epoch = self.epoch if epoch is None else epoch
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, self._epoch_order(epoch))
        return int(self._order[1][i])

    def _epoch_order(self, epoch: int) -> np.ndarray:
        ranks = [self.packs.rank_order(epoch, rank=r) for r in range(self.world_size)]
        return np.stack(ranks, axis=1).reshape(-1)  # item k * W + r = rank r's k-th pack

    def __getitem__(self, i: int) -> Any:
        if not 0 <= i < self.length:
            raise IndexError(i)
        if self._last is not None and i < self._last:
            raise ConfigError(
                f"item {i} was asked for after item {self._last} of epoch {self.epoch}: the sampler shuffles the "
                "packs, which undoes the order each rank was given; use a sequential sampler (transformers: "
                "PackedTrainer or train_sampling_strategy='sequential'; DistributedSampler: shuffle=False)"
            )
        self._last = i
        position = PackPosition(epoch=self.epoch, index=i, epoch_len=self.length)
        batch = self.packs.encode_cooked(self.packs.packs.read(self.pack_index(i)), position)
        return batch if self.transform is None else self.transform(batch)


class PackSequenceSampler(DistributedSampler):
    """``DistributedSampler(shuffle=False)`` over a ``PackSequence`` that also hands the epoch to it.

    Frameworks call the sampler's ``set_epoch`` (NeMo Automodel's step scheduler does), never the
    dataset's; without this, every epoch would read epoch 0's order.
    """

    def __init__(self, dataset: PackSequence, *, num_replicas: int | None = None, rank: int | None = None,
                 **kwargs: Any) -> None:
        if kwargs.get("shuffle"):
            raise ConfigError("PackSequenceSampler: shuffle=True would undo the order the ranks were given; "
                              "the packs' order changes per epoch already (set_epoch)")
        kwargs["shuffle"] = False
        if num_replicas is not None and num_replicas != dataset.world_size:
            raise ConfigError(f"PackSequenceSampler: {num_replicas} ranks, but the PackSequence was cut for "
                              f"world_size={dataset.world_size}; build it with world_size={num_replicas}")
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, **kwargs)

    def set_epoch(self, epoch: int) -> None:
        super().set_epoch(epoch)
        self.dataset.set_epoch(epoch)
