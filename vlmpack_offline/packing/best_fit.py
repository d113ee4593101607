"""Best-fit decreasing on the length histogram: exact BFD, O(C log C + n log n) numpy-bound work.

Textbook BFD takes samples longest first and puts each into the open bin with
the least remaining room that still fits it, opening a new bin when none does.

Two observations make it fast for millions of samples:

* bins with equal remaining room are interchangeable: what happens next depends
  only on the multiset of remaining rooms, so we keep ``count[room]`` classes of
  bins instead of single bins (at most C classes);
* samples of equal length come in runs, and a run is placed in bulk. For a run
  of ``k`` samples of length ``L`` the best-fit class is the smallest room
  ``r >= L``. If ``r < 2L`` each bin there takes one sample and drops below
  ``L``, so ``min(count[r], k)`` bins take one each at once. If ``r >= 2L`` the
  bin stays the best fit after each placement and takes ``q = r // L`` samples
  before dropping below ``L``; so ``k // q`` bins take ``q`` each, and one bin
  takes the rest. New bins take ``C // L`` each the same way.

Tie-break (documented, not textbook-lowest-index): inside a class the bins that
entered it last are used first. Any tie-break among bins of equal room leads to
the same multiset of rooms after every step, hence the same number of packs
and the same fill as any other BFD; only which concrete bin gets a sample
differs. Worked example, C = 10, lengths [6, 5, 4, 3, 2]::

    6 -> new bin A (room 4)      5 -> new bin B (room 5)
    4 -> room 4 fits best: A (0)  3 -> room 5: B (2)   2 -> room 2: B (0)
    packs: A = [6, 4], B = [5, 3, 2]
"""

from __future__ import annotations

from bisect import bisect_left, insort

import numpy as np

from ._runs import assemble, sorted_runs
from .records import Bins

__all__ = ["best_fit_decreasing"]


class _RoomClasses:
    """Open bins grouped by remaining room; each class is a stack of bin-id chunks."""

    def __init__(self) -> None:
        self.rooms: list[int] = []  # sorted rooms that hold at least one bin
        self.count: dict[int, int] = {}
        self.chunks: dict[int, list[np.ndarray]] = {}

    def smallest_at_least(self, length: int) -> int | None:
        i = bisect_left(self.rooms, length)
        return self.rooms[i] if i < len(self.rooms) else None

    def add(self, room: int, ids: np.ndarray) -> None:
        if room <= 0 or ids.size == 0:
            return  # a full bin can take nothing more: forget it
        if self.count.get(room, 0) == 0:
            insort(self.rooms, room)
            self.count[room] = 0
            self.chunks[room] = []
        self.count[room] += int(ids.size)
        self.chunks[room].append(ids)

    def take(self, room: int, m: int) -> np.ndarray:
        chunks, got, need = self.chunks[room], [], m
        while need:
            last = chunks[-1]
            if last.size <= need:
                got.append(chunks.pop())
                need -= last.size
            else:
                got.append(last[last.size - need :])
                chunks[-1] = last[: last.size - need]
                need = 0
        self.count[room] -= m
        if self.count[room] == 0:
            del self.count[room], self.chunks[room]
            self.rooms.pop(bisect_left(self.rooms, room))
        return got[0] if len(got) == 1 else np.concatenate(got)


def best_fit_decreasing(lengths: np.ndarray, capacity: int) -> Bins:
    """Exact BFD (see module docstring) for lengths in ``1..capacity``."""
    order, runs = sorted_runs(lengths)
    bin_of_sorted = np.empty(order.size, dtype=np.int32)
    classes = _RoomClasses()
    n_bins = 0
    for length, start, k in runs:
        pos = start
        while k:
            room = classes.smallest_at_least(length)
            if room is None:  # nothing fits: open bins, each takes C // L
                q = capacity // length
                full, rest = divmod(k, q)
                ids = np.arange(n_bins, n_bins + full + (1 if rest else 0), dtype=np.int32)
                bin_of_sorted[pos : pos + k] = np.repeat(ids, [q] * full + ([rest] if rest else []))
                classes.add(capacity - q * length, ids[:full])
                if rest:
                    classes.add(capacity - rest * length, ids[full:])
                n_bins += ids.size
                break
            q = room // length
            m = min(classes.count[room], k // q)
            if m:  # m bins take q samples each
                ids = classes.take(room, m)
                bin_of_sorted[pos : pos + m * q] = np.repeat(ids, q)
                classes.add(room - q * length, ids)
                pos, k = pos + m * q, k - m * q
            elif k:  # k < q: the best-fit bin takes them all and still has room >= L
                ids = classes.take(room, 1)
                bin_of_sorted[pos : pos + k] = ids[0]
                classes.add(room - k * length, ids)
                pos, k = pos + k, 0
    return assemble(order, bin_of_sorted, n_bins)
