"""Which packs go into which ``pretrain-%06d.tar``: decided up front, from the plan alone.

Computing the assignment before any tar is written makes the output independent
of how many workers write it and lets a resumed run find exactly the shards that
are missing. Each split gets its own shards (energon's split.yaml lists whole
files), splits in order of first appearance in the plan, packs in plan order::

    plan: p0(train) p1(train) p2(val) p3(train)   maxcount=2
    ->    pretrain-000000.tar [p0 p1]  pretrain-000001.tar [p3]  pretrain-000002.tar [p2]

A shard is closed before a pack that would push it past ``maxcount`` packs or
``maxsize`` bytes (final tar size, end-of-archive blocks and record padding
included); a single pack larger than ``maxsize`` still gets a shard of its own.
"""

from __future__ import annotations

import tarfile
from collections.abc import Sequence
from dataclasses import dataclass

from ..plan_file import Pack

__all__ = ["SHARD_NAME", "ShardJob", "assign_shards", "tar_file_size"]

SHARD_NAME = "pretrain-{:06d}.tar"
_END = 2 * tarfile.BLOCKSIZE  # end-of-archive marker
_RECORD = tarfile.RECORDSIZE  # tarfile pads the archive to a multiple of this


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardJob:
    index: int  # shard number in the file name
    split: str  # "train" or "val"
    packs: tuple[Pack, ...]  # packs in the order they are written

    @property
    def name(self) -> str:
        return SHARD_NAME.format(self.index)


def tar_file_size(member_bytes: int) -> int:
    """Size of a tar holding ``member_bytes`` of headers + padded data, as tarfile closes it."""
    return -(-(member_bytes + _END) // _RECORD) * _RECORD


def assign_shards(packs: Sequence[Pack], pack_bytes: Sequence[int], *, maxcount: int, maxsize: int) -> list[ShardJob]:
    """Cut the plan into shards; ``pack_bytes[i]`` is the bytes pack ``i`` takes inside a tar."""
    by_split: dict[str, list[tuple[Pack, int]]] = {}
    for pack, size in zip(packs, pack_bytes, strict=True):
        by_split.setdefault(pack.split, []).append((pack, size))
    jobs: list[ShardJob] = []
    for split, entries in by_split.items():
        current: list[Pack] = []
        used = 0
        for pack, size in entries:
            if current and (len(current) >= maxcount or tar_file_size(used + size) > maxsize):
                jobs.append(ShardJob(index=len(jobs), split=split, packs=tuple(current)))
                current, used = [], 0
            current.append(pack)
            used += size
        if current:
            jobs.append(ShardJob(index=len(jobs), split=split, packs=tuple(current)))
    return jobs
