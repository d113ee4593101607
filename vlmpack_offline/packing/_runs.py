"""Shared plumbing of the planners: sort into runs of equal length, and turn assignments into ``Bins``."""

from __future__ import annotations

import numpy as np

from ._chunked import counting_sort
from .records import Bins

__all__ = ["sorted_runs", "assemble"]


def sorted_runs(lengths: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """Indexes sorted by decreasing length (ties by index), and its runs ``(length, start, count)``.

    Samples of equal length are interchangeable for packing, so the planners work
    per run, not per sample: at most C runs however many samples there are. The order is
    ``np.argsort(-lengths, kind="stable")`` built as a counting sort over lengths ``1..max``
    (``_chunked.counting_sort``): int32 out, no per-sample temporary.
    """
    lengths = np.asarray(lengths)
    if lengths.size == 0:
        return np.zeros(0, np.int32), []
    top = int(lengths.max())
    key_type = np.uint16 if top < 1 << 16 else np.int64  # uint16 keys sort by radix

    def longest_first(first: int, last: int) -> np.ndarray:
        return (top - lengths[first:last]).astype(key_type)

    order, counts = counting_sort(lengths.size, top + 1, longest_first)
    starts = np.cumsum(counts) - counts
    runs = [(top - int(k), int(starts[k]), int(counts[k])) for k in np.flatnonzero(counts)]
    return order, runs


def assemble(order: np.ndarray, bin_of_sorted: np.ndarray, n_bins: int) -> Bins:
    """Group sorted samples by bin; inside a bin they keep the sorted order (longest first, ties by index).

    ``order[np.argsort(bin_of_sorted, kind="stable")]``, as a counting sort by bin (``_chunked.counting_sort``)."""
    indexes, sizes = counting_sort(order.size, n_bins, lambda a, b: bin_of_sorted[a:b], lambda a, b: order[a:b])
    offsets = np.zeros(n_bins + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return Bins(indexes=indexes, offsets=offsets)
