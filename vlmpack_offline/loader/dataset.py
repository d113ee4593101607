"""Plain PyTorch entry point (no energon): ``PackDataset`` over ``pretrain-*.tar``.

Each (rank, DataLoader worker) reads its own share of the shards, so no pack is
seen twice in an epoch and none is skipped::

    slot = rank * num_workers + worker_id          slots = world_size * num_workers
    shards >= slots:  slot reads shards[slot::slots]           (whole shards, no wasted reads)
    shards <  slots:  slot reads every shard, keeps packs i with i % slots == slot

Shards are read with webdataset's tar iterator (key = member path up to the first
``.``), each pack is turned into a ``CookedPack`` by the energon cooker's own
function and then into a ``PackBatch``. Use ``DataLoader(ds, batch_size=None)``:
a pack is the batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import torch
from torch.utils.data import IterableDataset, get_worker_info
from webdataset.tariterators import tarfile_samples

from ..errors import ShardError
from .batch import PackBatch
from .cooker import CookedPack, cook_packed
from .encoder import PackEncoder

__all__ = ["PackDataset", "packed_shards", "iter_cooked_packs"]


def packed_shards(packed_wds_dir: str | Path) -> list[Path]:
    """The ``pretrain-*.tar`` shards of a packed dataset, in name order."""
    shards = sorted(Path(packed_wds_dir).glob("pretrain-*.tar"))
    if not shards:
        raise ShardError(f"{packed_wds_dir}: no pretrain-*.tar shards; run `vlmpack write` first")
    return shards


def iter_cooked_packs(shards: Sequence[str | Path], *, keep=None) -> Iterator[CookedPack]:
    """Every pack of ``shards`` in order (or those whose running index ``keep(i)`` accepts), cooked."""
    samples = tarfile_samples([{"url": str(path)} for path in shards])
    for index, sample in enumerate(samples):
        if keep is None or keep(index):
            url = sample.pop("__url__", "")
            sample.pop("__local_path__", None)
            # the Sample fields energon would set; the restore key names shard and key, as energon's does
            sample["__restore_key__"] = ("PackDataset", url, sample["__key__"])
            yield cook_packed(sample)


def _rank_and_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if rank is not None and world_size is not None:
        return rank, world_size
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class PackDataset(IterableDataset):
    """Iterates the packs of a packed dataset as ``PackBatch`` es; rank- and worker-aware (see module doc)."""

    def __init__(
        self,
        packed_wds_dir: str | Path,
        encoder: PackEncoder,
        *,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__()
        self.shards = packed_shards(packed_wds_dir)
        self.encoder = encoder
        self.rank, self.world_size = rank, world_size

    def _slot(self) -> tuple[int, int]:
        rank, world = _rank_and_world(self.rank, self.world_size)
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return rank * workers + worker, world * workers

    def iter_cooked(self) -> Iterator[CookedPack]:
        """This slot's packs before encoding (what ``__iter__`` encodes)."""
        slot, slots = self._slot()
        if len(self.shards) >= slots:
            yield from iter_cooked_packs(self.shards[slot::slots])
            return
        yield from iter_cooked_packs(self.shards, keep=lambda index: index % slots == slot)

    def __iter__(self) -> Iterator[PackBatch]:
        for cooked in self.iter_cooked():
            yield self.encoder.encode(cooked.pack, cooked.media)
