"""The three algorithms under extra per-pack limits (samples per pack, media tokens per pack).

With limits, bins of equal room are no longer interchangeable (they differ in
slots and media room left), so these paths place one sample at a time, in the
same decreasing order and with the same choice rule as the unlimited paths:

* best fit: among bins where the sample fits every limit, the one with the least
  token room; ties go to the bin that reached that room first;
* first fit: the lowest-numbered such bin (segment tree walk, skipping bins
  that fail a limit);
* hashbucket: the pack takes the longest remaining sample that fits every
  limit, bucket by bucket, in index order within a bucket.

A sample whose own media tokens exceed ``max_media_tokens`` cannot share a pack
under that limit; it gets a pack of its own rather than being lost (the limit
bounds what is *combined*). Cost is Python-per-sample: fine for a few hundred
thousand samples; the limit-free default path is the one built for 10M+.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import deque

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
        bin_of_sorted, n_bins = _hashbucket(runs, sorted_media, limits.capacity, slots, media_cap)
    else:
        place = _best_fit if algorithm == "best_fit_decreasing" else _first_fit
        bin_of_sorted, n_bins = place(sorted_len, sorted_media, limits.capacity, slots, media_cap)
    return assemble(order, np.asarray(bin_of_sorted, dtype=np.int32), n_bins)


def _best_fit(lens: list[int], media: list[int], capacity: int, slots: int, media_cap: int):
    rooms: list[int] = []  # sorted rooms with at least one open bin
    members: dict[int, list[int]] = {}  # room -> open bins, in order of arrival
    slots_left: list[int] = []
    media_left: list[int] = []
    out = []
    for length, m in zip(lens, media, strict=True):
        chosen = -1
        for room in rooms[bisect_left(rooms, length) :]:
            for b in members[room]:
                if media_left[b] >= m:
                    chosen, old = b, room
                    break
            if chosen >= 0:
                break
        if chosen < 0:
            chosen, old = len(slots_left), capacity
            slots_left.append(slots)
            media_left.append(media_cap if m <= media_cap else m)  # a lone over-limit sample
        else:
            members[old].remove(chosen)
            if not members[old]:
                del members[old]
                rooms.pop(bisect_left(rooms, old))
        slots_left[chosen] -= 1
        media_left[chosen] -= m
        out.append(chosen)
        new_room = old - length
        if new_room > 0 and slots_left[chosen] > 0 and m <= media_cap:
            if new_room not in members:
                members[new_room] = []
                insort(rooms, new_room)
            members[new_room].append(chosen)
    return out, len(slots_left)


def _first_fit(lens: list[int], media: list[int], capacity: int, slots: int, media_cap: int):
    tree = RoomTree(len(lens) + 1, capacity)
    slots_left: list[int] = []
    media_left: list[int] = []
    out = []
    for length, m in zip(lens, media, strict=True):
        b = tree.first_at_least(length)
        while b < len(slots_left) and media_left[b] < m:
            b = tree.first_at_least(length, b + 1)
        if b >= len(slots_left):  # the first unopened bin
            b = len(slots_left)
            slots_left.append(slots)
            media_left.append(media_cap if m <= media_cap else m)
        slots_left[b] -= 1
        media_left[b] -= m
        out.append(b)
        closed = slots_left[b] == 0 or m > media_cap
        tree.set(b, 0 if closed else tree.room(b) - length)
    return out, len(slots_left)


def _hashbucket(runs, media: list[int], capacity: int, slots: int, media_cap: int):
    buckets = {length: deque(range(start, start + count)) for length, start, count in runs}
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
            bucket = buckets[length]
            pick = next((p for p in bucket if media[p] <= media_room), None) if bucket else None
            if pick is None:
                hi -= 1
                continue
            bucket.remove(pick)
            out[pick] = n_bins
            room -= length
            slots_left -= 1
            media_room -= media[pick]
            if not bucket:
                emptied.append(length)
            hi = min(hi, bisect_right(nonempty, room))
        for length in emptied:
            if length in buckets and not buckets[length]:
                del buckets[length]
                nonempty.pop(bisect_left(nonempty, length))
        n_bins += 1
    return out, n_bins
