"""Hash-bucket packing: the published tool's exact-length buckets, made deterministic and lossless.

Samples go into buckets keyed by their exact token length. A pack is filled
greedily: it opens with the longest sample left, then keeps taking the longest
sample left that still fits (a bucket lookup per step, via a sorted list of
non-empty lengths), until no sample fits. Then the next pack opens. Nothing is
dropped: the last packs simply hold the leftovers. Within a bucket, samples are
taken in index (manifest) order, so the result is a pure function of the input.

Bulk step: a pack's recipe ``[(length, taken), ...]`` repeats unchanged for the
next packs while every bucket in it still holds ``taken`` samples, so ``k``
identical packs are emitted at once.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

from ._runs import assemble, sorted_runs
from .records import Bins

__all__ = ["hashbucket"]


def hashbucket(lengths: np.ndarray, capacity: int) -> Bins:
    order, runs = sorted_runs(lengths)
    left = {length: count for length, _, count in runs}  # bucket sizes
    next_pos = {length: start for length, start, _ in runs}  # next sorted position per bucket
    nonempty = sorted(left)  # ascending lengths with samples left
    bin_of_sorted = np.empty(order.size, dtype=np.int32)
    n_bins = 0
    while nonempty:
        recipe, room, hi = [], capacity, len(nonempty)
        while True:
            i = bisect_right(nonempty, room, 0, hi) - 1
            if i < 0:
                break
            length = nonempty[i]
            taken = min(left[length], room // length)
            recipe.append((length, taken))
            room -= taken * length
            hi = i  # this bucket is now empty or longer than the room left
        # The same pack repeats while every bucket of the recipe can serve it again.
        repeats = min(left[length] // taken for length, taken in recipe)
        ids = np.arange(n_bins, n_bins + repeats, dtype=np.int32)
        for length, taken in recipe:
            pos = next_pos[length]
            bin_of_sorted[pos : pos + repeats * taken] = np.repeat(ids, taken)
            next_pos[length] = pos + repeats * taken
            left[length] -= repeats * taken
            if not left[length]:
                nonempty.pop(bisect_left(nonempty, length))
        n_bins += repeats
    return assemble(order, bin_of_sorted, n_bins)
