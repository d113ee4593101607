"""Which packs go into which ``pretrain-%06d.tar``: a pure function of the plan and the pack sizes.

The assignment never depends on how many workers write or in which order they
finish, so a resumed run finds exactly the shards that are missing. Each split
gets its own shards (energon's split.yaml lists whole files). Packs are taken in
plan order; each split has one open shard, closed before a pack that would push
it past ``maxcount`` packs or ``maxsize`` bytes (final tar size: end-of-archive
blocks and record padding included; a single pack larger than ``maxsize`` still
gets a shard of its own). Shards are numbered in the order they close; the shards
still open at the end close in the order they were opened::

    plan: p0(train) p1(train) p2(val) p3(train) p4(train)   maxcount=2
    ->    pretrain-000000.tar [p0 p1]  pretrain-000001.tar [p2]  pretrain-000002.tar [p3 p4]

Because it streams (``ShardAssigner.add`` returns a shard as soon as it closes),
writing a shard can start while later packs are still being described.
"""

from __future__ import annotations

import tarfile
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["SHARD_NAME", "ShardJob", "ShardAssigner", "assign_shards", "tar_file_size"]

SHARD_NAME = "pretrain-{:06d}.tar"
_END = 2 * tarfile.BLOCKSIZE  # end-of-archive marker
_RECORD = tarfile.RECORDSIZE  # tarfile pads the archive to a multiple of this


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardJob:
    index: int  # shard number in the file name
    split: str  # "train" or "val"
    positions: tuple[int, ...]  # the plan positions (= pack ids) of its packs, in the order they are written
    tar_bytes: int  # exact size of the finished tar (lets a resumed run spot a cut-short file)

    @property
    def name(self) -> str:
        return SHARD_NAME.format(self.index)

    @property
    def n_packs(self) -> int:
        return len(self.positions)


def tar_file_size(member_bytes: int) -> int:
    """Size of a tar holding ``member_bytes`` of headers + padded data, as tarfile closes it."""
    return -(-(member_bytes + _END) // _RECORD) * _RECORD


class _Open:
    __slots__ = ("positions", "used")

    def __init__(self) -> None:
        self.positions: list[int] = []
        self.used = 0


class ShardAssigner:
    """Feed packs in plan order (split, position, tar bytes); get shards back as they close.

    Only splits and positions are kept, not the packs: the write stage never holds the plan's sample
    ids in Python objects beyond the chunk it describes."""

    def __init__(self, *, maxcount: int, maxsize: int) -> None:
        self.maxcount = maxcount
        self.maxsize = maxsize
        self._open: dict[str, _Open] = {}  # the open shard of each split, in the order they were opened
        self._next = 0

    def _close(self, split: str) -> ShardJob:
        shard = self._open.pop(split)
        job = ShardJob(
            index=self._next,
            split=split,
            positions=tuple(shard.positions),
            tar_bytes=tar_file_size(shard.used),
        )
        self._next += 1
        return job

    def add(self, split: str, position: int, size: int) -> list[ShardJob]:
        closed = []
        shard = self._open.get(split)
        if shard is not None and shard.positions and (
            len(shard.positions) >= self.maxcount or tar_file_size(shard.used + size) > self.maxsize
        ):
            closed.append(self._close(split))
            shard = None
        if shard is None:
            shard = self._open.setdefault(split, _Open())
        shard.positions.append(position)
        shard.used += size
        return closed

    def finish(self) -> list[ShardJob]:
        return [self._close(split) for split in list(self._open)]


def assign_shards(splits: Sequence[str], pack_bytes: Sequence[int], *, maxcount: int, maxsize: int) -> list[ShardJob]:
    """The whole assignment at once; pack ``i`` is of ``splits[i]`` and takes ``pack_bytes[i]`` inside a tar."""
    assigner = ShardAssigner(maxcount=maxcount, maxsize=maxsize)
    jobs = [job for i, (split, size) in enumerate(zip(splits, pack_bytes, strict=True)) for job in assigner.add(split, i, size)]
    return jobs + assigner.finish()
