"""First-fit decreasing: longest first, each sample into the lowest-numbered bin with room.

Which bin is "first" depends on bin identity, not just on remaining room, so the
histogram trick of best-fit does not apply. A max-segment-tree over bins answers
"lowest bin with room >= L" in O(log n); runs of equal length are still placed in
bulk (a bin takes ``room // L`` samples of the run at once, and untouched bins
are opened ``C // L`` samples at a time). Unopened bins sit in the tree with room C,
so "no open bin fits" needs no special case. Cost: one tree walk per bin touched
per run, in Python; about 1 s per 100k samples (the default, best-fit, is far faster).
"""

from __future__ import annotations

import numpy as np

from ._runs import assemble, sorted_runs
from .records import Bins

__all__ = ["first_fit_decreasing", "RoomTree"]


class RoomTree:
    """Max segment tree over bin rooms; unopened bins have room ``capacity``."""

    def __init__(self, n_bins: int, capacity: int) -> None:
        size = 1
        while size < max(n_bins, 1):
            size *= 2
        self.size = size
        self.tree = [capacity] * (2 * size)

    def room(self, b: int) -> int:
        return self.tree[self.size + b]

    def set(self, b: int, room: int) -> None:
        tree, i = self.tree, self.size + b
        tree[i] = room
        i >>= 1
        while i:
            best = max(tree[2 * i], tree[2 * i + 1])
            if tree[i] == best:
                break
            tree[i] = best
            i >>= 1

    def first_at_least(self, need: int, start: int = 0) -> int:
        """Lowest bin ``>= start`` with room ``>= need``; -1 when there is none."""
        tree, size = self.tree, self.size
        i = start + size
        if start >= size:
            return -1
        if tree[i] >= need:
            return start
        while True:
            while i & 1:
                i >>= 1
                if i <= 1:
                    return -1
            i += 1
            if tree[i] >= need:
                while i < size:
                    i = 2 * i if tree[2 * i] >= need else 2 * i + 1
                return i - size


def first_fit_decreasing(lengths: np.ndarray, capacity: int) -> Bins:
    """Exact FFD for lengths in ``1..capacity``."""
    order, runs = sorted_runs(lengths)
    total = int(lengths.astype(np.int64).sum())
    # Any-fit packings leave at most one bin half empty: bins <= 2 * ceil(sum / C) + 1.
    tree = RoomTree(min(order.size, 2 * (-(-total // capacity)) + 1), capacity)
    bin_of_sorted = np.empty(order.size, dtype=np.int32)
    n_bins = 0
    for length, start, k in runs:
        pos = start
        while k:
            b = tree.first_at_least(length)
            if b >= n_bins:  # no open bin fits: open bins, C // L samples each
                q = capacity // length
                full, rest = divmod(k, q)
                n_new = full + (1 if rest else 0)
                ids = np.arange(n_bins, n_bins + n_new, dtype=np.int32)
                bin_of_sorted[pos : pos + k] = np.repeat(ids, [q] * full + ([rest] if rest else []))
                for j in range(full):
                    tree.set(n_bins + j, capacity - q * length)
                if rest:
                    tree.set(n_bins + full, capacity - rest * length)
                n_bins += n_new
                break
            room = tree.room(b)
            t = min(k, room // length)
            bin_of_sorted[pos : pos + t] = b
            tree.set(b, room - t * length)
            pos, k = pos + t, k - t
    return assemble(order, bin_of_sorted, n_bins)
