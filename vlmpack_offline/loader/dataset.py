"""Plain PyTorch entry point (no energon): ``PackDataset`` over one split of a packed dataset.

The packs of a split
    ``.nv-meta/split.yaml`` names the tars of each split (energon's format,
    ``split_parts: {train: [...], val: [...]}``); each tar's ``.tar.idx`` holds the
    byte offset of every pack (and the end), so pack ``i`` of a tar is the byte range
    ``idx[i]:idx[i+1]``, read with one seek. ``split="train"`` (the default) never
    reads a val tar, and every pack's JSON ``split`` is checked against it.

Equal work per (rank, DataLoader worker) slot
    ``slots = world_size * num_workers``. Each epoch the N packs of the split are
    permuted with ``numpy.random.default_rng((seed, epoch))``; rank r's order is
    ``perm[r::world_size]`` cut to ``n = (N // slots) * num_workers`` packs, and worker
    w of rank r reads entries ``w, w + num_workers, ...`` of that order. So every slot
    yields ``N // slots`` packs and every rank ``n``: a distributed job ends its epoch
    on every rank at the same step. The ``N % slots`` packs left over are **dropped
    for that epoch** (different ones each epoch, since the permutation changes; the
    count is logged by rank 0's first worker). Call ``set_epoch(epoch)`` before each
    epoch, as with ``DistributedSampler``; without it every epoch repeats epoch 0's order.

    Worked example, N = 11, world_size = 2, num_workers = 2 (4 slots, 2 packs each,
    3 dropped), supposing ``perm = [7 2 9 0 4 10 1 5 3 8 6]``::

        rank 0 order = perm[0::2][:4] = [7 9 4 1]     worker 0 reads 7 4, worker 1 reads 9 1
        rank 1 order = perm[1::2][:4] = [2 0 10 5]    worker 0 reads 2 10, worker 1 reads 0 5
        dropped this epoch: 3 8 6

    A DataLoader takes one batch from each worker in turn (worker 0, 1, 0, 1, ...), so
    rank 0's k-th batch is exactly ``order[k]``: 7 9 4 1.

Mid-epoch state
    With workers, iteration runs in other processes, so the state is computed from
    the batches: each ``PackBatch.position`` holds ``(epoch, index k in the rank's
    order)``. ``state_dict(last_batch)`` records ``epoch`` and ``next_index = k + 1``;
    after ``load_state_dict`` the next iteration's worker w reads
    ``order[next_index + w], order[next_index + w + num_workers], ...``, so the
    DataLoader's round robin continues the same order, no pack repeated or lost.
    Above, after rank 0 consumed 7 9 (last ``position.index`` = 1) the state says
    ``next_index = 2``; a fresh DataLoader then yields 4 (worker 0) and 1 (worker 1).
    The order does not depend on ``num_workers`` (only its cut does), so a restore
    may even change the worker count. With ``num_workers=0`` the dataset counts
    what it yielded itself and ``state_dict()`` needs no batch.

Use ``DataLoader(ds, batch_size=None)``: a pack is the batch.
"""

from __future__ import annotations

import io
import logging
import tarfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import yaml
from torch.utils.data import IterableDataset, get_worker_info

from ..errors import ConfigError, LayoutError, ShardError
from ..output.energon_meta import (
    META_DIR,
    energon_idx_offsets,
    energon_members,
    read_dataset_yaml,
    read_idx,
    written_layout,
)
from ..packed_settings import written_mixture, written_schedule
from ..tario import is_url
from .batch import PackBatch, PackPosition, ensure_picklable
from .cooker import CookedPack, cook_packed
from .encoder import PackEncoder

__all__ = ["PackDataset", "PackIndex", "packed_shards", "iter_cooked_packs"]

log = logging.getLogger(__name__)

STATE_FORMAT = "vlmpack.pack_dataset_state/1"


def packed_shards(packed_wds_dir: str | Path) -> list[Path]:
    """The ``pretrain-*.tar`` shards of a packed dataset, in name order (every split)."""
    shards = sorted(Path(packed_wds_dir).glob("pretrain-*.tar"))
    if not shards:
        raise ShardError(f"{packed_wds_dir}: no pretrain-*.tar shards; run `vlmpack write` first")
    return shards


def _shard_offsets(tar: Path) -> list[int]:
    idx = tar.with_name(tar.name + ".idx")
    return read_idx(idx) if idx.is_file() else energon_idx_offsets(tar)


@dataclass(frozen=True, slots=True, kw_only=True)
class PackIndex:
    """Every pack of one split as a byte range: pack ``i`` is ``shards[shard[i]]`` bytes ``start[i]:end[i]``."""

    split: str  # the split these packs belong to
    shards: tuple[Path, ...]  # the split's tars, in split.yaml order
    shard: np.ndarray  # int32 [N], index into shards
    start: np.ndarray  # int64 [N], offset of the pack's first tar header
    end: np.ndarray  # int64 [N], offset after its last member

    def __len__(self) -> int:
        return len(self.shard)

    @classmethod
    def from_dir(cls, packed_wds_dir: str | Path, split: str) -> PackIndex:
        """Read ``.nv-meta/split.yaml`` and the ``.tar.idx`` of the split's tars."""
        if is_url(str(packed_wds_dir)):
            raise ConfigError(
                f"{packed_wds_dir}: PackDataset / PackSequence read a local folder; read a bucket through energon, "
                "loader.train_dataset(url, PackTaskEncoder(PackEncoder.from_packed_dir(url)), worker_config) "
                "(docs/format.md, Writing to object storage), or copy the folder here"
            )
        root = Path(packed_wds_dir)
        split_yaml = root / META_DIR / "split.yaml"
        if split_yaml.is_file():
            body = yaml.safe_load(split_yaml.read_text()) or {}
            parts = body.get("split_parts") or {}
            if split not in parts:
                raise ConfigError(f"{split_yaml}: no split {split!r} (it has {sorted(parts)}); pass one of those")
            excluded = set(body.get("exclude") or [])
            if any("/" in name for name in excluded):
                raise ShardError(f"{split_yaml}: excludes single samples, which PackDataset does not support; "
                                 "load this dataset with energon or rewrite it without the excluded samples")  # fmt: skip
            shards = tuple(root / name for name in parts[split] if name not in excluded)
        elif split == "train":  # a hand-made folder: every shard is train
            log.warning("%s: no %s/split.yaml; reading every pretrain-*.tar as train", root, META_DIR)
            shards = tuple(packed_shards(root))
        else:
            raise ShardError(f"{split_yaml} is missing, so split {split!r} is unknown; run `vlmpack write`")
        which, starts, ends = [], [], []
        for number, tar in enumerate(shards):
            if not tar.is_file():
                raise ShardError(f"{tar}: listed in {META_DIR}/split.yaml but missing; rerun `vlmpack write`")
            offsets = _shard_offsets(tar)
            which += [number] * (len(offsets) - 1)
            starts += offsets[:-1]
            ends += offsets[1:]
        return cls(
            split=split,
            shards=shards,
            shard=np.asarray(which, dtype=np.int32),
            start=np.asarray(starts, dtype=np.int64),
            end=np.asarray(ends, dtype=np.int64),
        )

    def read(self, i: int) -> CookedPack:
        """Read pack ``i`` by seeking to its byte range and cook it."""
        tar = self.shards[int(self.shard[i])]
        start, end = int(self.start[i]), int(self.end[i])
        with open(tar, "rb") as f:
            f.seek(start)
            data = f.read(end - start)
        position = f"{tar.name} bytes {start}:{end}"
        return _cook(data, shard=tar.name, index=i, where=position)


def _cook(data: bytes, *, shard: str, index: int, where: str) -> CookedPack:
    sample: dict = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member, key, part in energon_members(tar):
            if sample.setdefault("__key__", key) != key:
                raise ShardError(f"{where}: holds members of {sample['__key__']!r} and {key!r}; "
                                 "the .tar.idx does not match the tar: rerun `vlmpack write`")  # fmt: skip
            sample[part] = tar.extractfile(member).read()
    if "__key__" not in sample:
        raise ShardError(f"{where}: no pack there; the .tar.idx does not match the tar: rerun `vlmpack write`")
    sample["__restore_key__"] = ("PackDataset", shard, index)  # like energon's: names where the pack came from
    return cook_packed(sample)


def iter_cooked_packs(shards: Sequence[str | Path], *, keep=None) -> Iterator[CookedPack]:
    """Every pack of ``shards`` in order (or those whose running index ``keep(i)`` accepts), cooked."""
    index = 0
    for tar in map(Path, shards):
        offsets = _shard_offsets(tar)
        with open(tar, "rb") as f:
            for start, end in zip(offsets[:-1], offsets[1:], strict=True):
                if keep is None or keep(index):
                    f.seek(start)
                    yield _cook(f.read(end - start), shard=tar.name, index=index, where=f"{tar.name} bytes {start}:{end}")
                index += 1


def _check_layout(packed_wds_dir: str | Path, configured: str) -> None:
    """Refuse a folder written in another layout than the encoder's config names (``sample.sample_type``)."""
    written = written_layout(read_dataset_yaml(Path(packed_wds_dir)))  # None: no metadata recorded (hand-built)
    if written is not None and written != configured:
        raise LayoutError(
            f"{packed_wds_dir} was written as sample_type {written!r} but the encoder's config reads "
            f"{configured!r}: build the encoder with PackEncoder.from_packed_dir({str(packed_wds_dir)!r}), "
            f"or set sample.sample_type: {written}"
        )


def _rank_and_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if rank is not None and world_size is not None:
        return rank, world_size
    if (rank is None) != (world_size is None):
        raise ConfigError(f"PackDataset: pass both rank and world_size or neither (got {rank=}, {world_size=})")
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _worker() -> tuple[int, int]:
    info = get_worker_info()
    return (info.id, info.num_workers) if info is not None else (0, 1)


def _check_mixture(packed_wds_dir: str | Path, mixture: dict, packs: PackIndex) -> None:
    """The train split holds the packs the mixture's plan wrote (per-source counts: ``vlmpack verify``)."""
    planned = mixture.get("train_packs")
    if planned is not None and planned != len(packs):
        raise ShardError(f"{packed_wds_dir}: the train split holds {len(packs)} packs but the mixture's plan wrote "
                         f"{planned} (.nv-meta/vlmpack.json): the folder is incomplete or mixed; rerun `vlmpack write`")


class PackDataset(IterableDataset):
    """The packs of one split as ``PackBatch`` es, the same number for every rank and worker (see module doc).

    ``rank`` / ``world_size`` default to ``torch.distributed``'s when it is initialized
    when the dataset is built, else 0 / 1.
    """

    def __init__(
        self,
        packed_wds_dir: str | Path,
        encoder: PackEncoder,
        *,
        split: str = "train",
        rank: int | None = None,
        world_size: int | None = None,
        seed: int = 0,
        follow_plan: bool = True,
    ) -> None:
        super().__init__()
        self.packs = PackIndex.from_dir(packed_wds_dir, split)
        _check_layout(packed_wds_dir, encoder.config.sample.sample_type)
        self.encoder = encoder
        self.split = split
        self.rank, self.world_size = _rank_and_world(rank, world_size)
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(f"PackDataset: rank {self.rank} is not in [0, world_size={self.world_size})")
        self.seed = seed
        self.schedule = written_schedule(packed_wds_dir) if follow_plan and split == "train" else None
        # a mixture's train split is written interleaved by source: each epoch rotates it instead of shuffling
        self.mixture = written_mixture(packed_wds_dir) if follow_plan and split == "train" else None
        if self.mixture is not None:
            _check_mixture(packed_wds_dir, self.mixture, self.packs)
        if self.schedule is not None:
            self.schedule.require_world(self.world_size, "PackDataset")
            planned = self.schedule.scheduled + self.schedule.unscheduled
            if planned != len(self.packs):
                raise ShardError(f"{packed_wds_dir}: the train split holds {len(self.packs)} packs but its schedule "
                                 f"says {planned}: the folder is incomplete or mixed; rerun `vlmpack write`")
        self.epoch = 0
        self._resume: tuple[int, int] | None = None  # (epoch, next_index) from load_state_dict
        self._progress: tuple[int, int] | None = None  # (epoch, next_index) of in-process iteration
        self._logged_drop = False

    # -- order ----------------------------------------------------------------------------------
    def set_epoch(self, epoch: int) -> None:
        """Use ``epoch``'s permutation from the next iteration on (call before each epoch)."""
        self.epoch = epoch
        if self._resume is not None and self._resume[0] != epoch:
            self._resume = None

    def packs_per_rank(self, num_workers: int = 0) -> int:
        """Packs every rank yields per epoch with this many DataLoader workers: ``(N // slots) * workers``
        (the plan's ``packs_per_rank`` for a balanced split, whatever the workers)."""
        if self.schedule is not None:
            return self.schedule.packs_per_rank
        workers = max(1, num_workers)
        return len(self.packs) // (self.world_size * workers) * workers

    def rank_order(self, epoch: int, num_workers: int = 0, rank: int | None = None) -> np.ndarray:
        """Indices (into ``self.packs``) this rank (or ``rank``) yields in ``epoch``, in batch order."""
        rank = self.rank if rank is None else rank
        if self.schedule is not None:
            return self.schedule.rank_order(rank, epoch, self.seed)
        rng = np.random.default_rng((self.seed, epoch))
        n = len(self.packs)
        perm = np.roll(np.arange(n), -int(rng.integers(n))) if self.mixture is not None else rng.permutation(n)
        return perm[rank :: self.world_size][: self.packs_per_rank(num_workers)]

    # -- iteration ------------------------------------------------------------------------------
    def iter_cooked(self) -> Iterator[tuple[int, int, CookedPack]]:
        """``(index in the rank's order, epoch length, cooked pack)`` for this worker, before encoding."""
        worker, workers = _worker()
        epoch = self.epoch
        order = self.rank_order(epoch, workers)
        slots = self.world_size * workers
        if len(order) == 0:
            raise ShardError(
                f"split {self.split!r} has {len(self.packs)} packs, fewer than the {slots} slots "
                f"(world_size {self.world_size} x num_workers {workers}): every slot would get none; "
                "use fewer DataLoader workers"
            )
        dropped = len(self.packs) - len(order) * self.world_size
        if dropped and self.rank == 0 and worker == 0 and not self._logged_drop:
            if self.schedule is not None:
                log.info("PackDataset %s: %d packs the plan left out of every step are not read (balanced schedule)",
                         self.split, dropped)
            else:  # a warning: on a small dataset the few packs left out can be all of one media type this epoch
                log.warning("PackDataset %s epoch %d: %d of %d packs left out so every one of %d slots reads %d "
                            "(other packs each epoch)", self.split, epoch, dropped, len(self.packs), slots,
                            len(order) // workers)  # fmt: skip
            self._logged_drop = True
        start = self._resume[1] if self._resume is not None and self._resume[0] == epoch else 0
        for k in range(start + worker, len(order), workers):
            yield k, len(order), self.packs.read(int(order[k]))

    def __iter__(self) -> Iterator[PackBatch]:
        in_worker = get_worker_info() is not None
        epoch = self.epoch
        for k, epoch_len, cooked in self.iter_cooked():
            batch = self.encode_cooked(cooked, PackPosition(epoch=epoch, index=k, epoch_len=epoch_len))
            if not in_worker:
                self._progress = (epoch, k + 1)
            yield batch

    def encode_cooked(self, cooked: CookedPack, position: PackPosition) -> PackBatch:
        """One read pack as the batch at ``position``: its split checked, picklable when built in a worker."""
        if cooked.pack.split != self.split:
            raise ShardError(
                f"pack {cooked.pack.pack_id} ({cooked.__restore_key__[1]}) says split {cooked.pack.split!r} "
                f"but {META_DIR}/split.yaml lists its tar under {self.split!r}; rerun `vlmpack write`"
            )
        shard = cooked.__restore_key__[1]  # a media part that does not decode is named with its tar (encoder.py)
        batch = replace(self.encoder.encode(cooked.pack, cooked.media, shard=shard), position=position)
        if get_worker_info() is not None:  # fail here, with the pack named, not in the queue's feeder thread (a hang)
            ensure_picklable(batch, f"pack {batch.pack_id}'s PackBatch")
        return batch

    # -- state ----------------------------------------------------------------------------------
    def state_dict(self, last_batch: PackBatch | None = None) -> dict:
        """Where the next iteration should start: after ``last_batch``, the last batch the loop consumed.

        Pass ``last_batch`` when the DataLoader has workers (they iterate in other processes). Without
        it: the position this process iterated to (``num_workers=0``), else the restored or epoch start.
        """
        if last_batch is not None:
            if last_batch.position is None:
                raise ValueError("last_batch has no position: it did not come from a PackDataset")
            epoch, next_index = last_batch.position.epoch, last_batch.position.index + 1
        elif self._progress is not None and self._progress[0] == self.epoch:
            epoch, next_index = self._progress
        elif self._resume is not None:
            epoch, next_index = self._resume
        else:
            epoch, next_index = self.epoch, 0
        return {
            "format": STATE_FORMAT,
            "split": self.split,
            "seed": self.seed,
            "rank": self.rank,
            "world_size": self.world_size,
            "n_packs": len(self.packs),
            "epoch": epoch,
            "next_index": next_index,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state``: the next iteration yields the rest of its epoch (then ``set_epoch(epoch + 1)``)."""
        if state.get("format") != STATE_FORMAT:
            raise ConfigError(f"not a PackDataset state (format {state.get('format')!r}, expected {STATE_FORMAT!r})")
        ours = self.state_dict()
        for name in ("split", "seed", "rank", "world_size", "n_packs"):
            if state[name] != ours[name]:
                raise ConfigError(
                    f"PackDataset state has {name}={state[name]!r} but this dataset has {ours[name]!r}; "
                    "restore with the dataset and ranks the state was saved with"
                )
        self.epoch = int(state["epoch"])
        self._resume = (self.epoch, int(state["next_index"]))
        self._progress = None
