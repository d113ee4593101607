"""The three algorithms under extra per-pack limits (samples per pack, media tokens per pack).

With limits, bins of equal room are no longer interchangeable (they differ in
slots and media room left), so these paths place one sample at a time, in the
same decreasing order and with the same choice rule as the unlimited paths:

* best fit: among bins where the sample fits every limit, the one with the least
  token room; ties go to the bin with the most media room left, then to the one
  that reached that room first (a segment tree over rooms holds each room class's
  best media room, so the choice is one O(log C) walk);
* first fit: the lowest-numbered such bin (a segment tree over bins holding the
  max token room and max media room of each subtree, searched depth-first);
* hashbucket: the pack takes the longest remaining sample that fits every
  limit; inside a length bucket, fewest media tokens first when
  ``max_media_tokens`` is set, else index order.

A sample whose own media tokens exceed ``max_media_tokens`` cannot share a pack
under that limit; it gets a pack of its own rather than being lost (the limit
bounds what is *combined*). Cost is Python per sample (a few seconds per 100k
samples); the limit-free default path is the one built for 10M+.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from heapq import heappop, heappush

import numpy as np

from ._runs import assemble, sorted_runs
from .first_fit import RoomTree
from .records import Bins, PackLimits

__all__ = ["pack_with_limits"]

_BIG = 1 << 62


def pack_with_limits(lengths: np.ndarray, media: np.ndarray, limits: PackLimits, algorithm: str) -> Bins:
    order, runs = sorted_runs(lengths)
    sorted_len = lengths[order].tolist()
    sorted_media = media[order].tolist()
    slots = limits.max_samples or _BIG
    media_cap = limits.max_media_tokens if limits.max_media_tokens is not None else _BIG
    if algorithm == "hashbucket":
        by_media = limits.max_media_tokens is not None
        bin_of_sorted, n_bins = _hashbucket(runs, sorted_media, limits.capacity, slots, media_cap, by_media)
    else:
        place = _best_fit if algorithm == "best_fit_decreasing" else _first_fit
        bin_of_sorted, n_bins = place(sorted_len, sorted_media, limits.capacity, slots, media_cap)
    return assemble(order, np.asarray(bin_of_sorted, dtype=np.int32), n_bins)


def _best_fit(lens: list[int], media: list[int], capacity: int, slots: int, media_cap: int):
    # classes[room] = heap of (-media_left, arrival, bin); the tree holds each class's best media_left,
    # so "least room >= L whose best bin has media_left >= m" is one O(log C) walk.
    tree = RoomTree(capacity + 1, -1)
    classes: dict[int, list[tuple[int, int, int]]] = {}
    slots_left: list[int] = []
    arrivals = 0
    out = []
    for length, m in zip(lens, media, strict=True):
        room = tree.first_at_least(m, length) if m <= media_cap else -1
        if room < 0:  # no open bin can take it: a new one
            b, room, media_left = len(slots_left), capacity, media_cap
            slots_left.append(slots)
        else:
            heap = classes[room]
            neg_media, _, b = heappop(heap)
            media_left = -neg_media
            tree.set(room, -heap[0][0] if heap else -1)
        slots_left[b] -= 1
        out.append(b)
        new_room, media_left = room - length, media_left - m
        if new_room > 0 and slots_left[b] > 0 and m <= media_cap:
            heap = classes.setdefault(new_room, [])
            heappush(heap, (-media_left, arrivals, b))
            arrivals += 1
            tree.set(new_room, -heap[0][0])
    return out, len(slots_left)


class _RoomMediaTree:
    """Per bin, max token room and max media room over each subtree; unopened bins have both full."""

    def __init__(self, n_bins: int, capacity: int, media_cap: int) -> None:
        size = 1
        while size < n_bins:
            size *= 2
        self.size, self.room, self.media = size, [capacity] * (2 * size), [media_cap] * (2 * size)

    def set(self, b: int, room: int, media: int) -> None:
        i = self.size + b
        self.room[i], self.media[i] = room, media
        i >>= 1
        while i:
            self.room[i] = max(self.room[2 * i], self.room[2 * i + 1])
            self.media[i] = max(self.media[2 * i], self.media[2 * i + 1])
            i >>= 1

    def first_feasible(self, length: int, m: int) -> int:
        """Lowest bin with room >= length and media room >= m (depth-first, pruned by both maxima)."""
        room, media, size, stack = self.room, self.media, self.size, [1]
        while stack:
            i = stack.pop()
            if room[i] < length or media[i] < m:
                continue
            if i >= size:
                return i - size
            stack.append(2 * i + 1)
            stack.append(2 * i)
        return -1


def _first_fit(lens: list[int], media: list[int], capacity: int, slots: int, media_cap: int):
    tree = _RoomMediaTree(len(lens) + 1, capacity, media_cap)
    slots_left: list[int] = []
    out = []
    for length, m in zip(lens, media, strict=True):
        b = tree.first_feasible(length, m) if m <= media_cap else len(slots_left)
        if b >= len(slots_left):  # the first unopened bin
            b = len(slots_left)
            slots_left.append(slots)
        slots_left[b] -= 1
        out.append(b)
        leaf = tree.size + b
        if slots_left[b] == 0 or m > media_cap:
            tree.set(b, 0, -1)  # closed
        else:
            tree.set(b, tree.room[leaf] - length, tree.media[leaf] - m)
    return out, len(slots_left)


def _hashbucket(runs, media: list[int], capacity: int, slots: int, media_cap: int, by_media: bool):
    def bucket(start: int, count: int) -> deque:
        members = range(start, start + count)
        return deque(sorted(members, key=lambda p: media[p]) if by_media else members)  # stable: ties by index

    buckets = {length: bucket(start, count) for length, start, count in runs}
    nonempty = sorted(buckets)
    out = [0] * sum(count for _, _, count in runs)
    n_bins = 0
    while nonempty:
        room, slots_left, media_room = capacity, slots, media_cap
        first = buckets[nonempty[-1]].popleft()  # the longest sample left opens the pack
        out[first] = n_bins
        room -= nonempty[-1]
        slots_left -= 1
        media_room = media_cap - media[first] if media[first] <= media_cap else -1
        emptied = [nonempty[-1]] if not buckets[nonempty[-1]] else []
        hi = bisect_right(nonempty, room)
        while slots_left and media_room >= 0 and hi:
            length = nonempty[hi - 1]
            members = buckets[length]
            if not members or media[members[0]] > media_room:  # fewest media tokens first
                hi -= 1
                continue
            pick = members.popleft()
            out[pick] = n_bins
            room -= length
            slots_left -= 1
            media_room -= media[pick]
            if not members:
                emptied.append(length)
            hi = min(hi, bisect_right(nonempty, room))
        for length in emptied:
            if length in buckets and not buckets[length]:
                del buckets[length]
                nonempty.pop(bisect_left(nonempty, length))
        n_bins += 1
    return out, n_bins
