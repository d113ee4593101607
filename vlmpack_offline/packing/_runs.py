"""Shared plumbing of the planners: sort into runs of equal length, and turn assignments into ``Bins``."""

from __future__ import annotations

import numpy as np

from .records import Bins

__all__ = ["sorted_runs", "assemble"]


def sorted_runs(lengths: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """Indexes sorted by decreasing length (ties by index), and its runs ``(length, start, count)``.

    Samples of equal length are interchangeable for packing, so the planners work
    per run, not per sample: at most C runs however many samples there are.
    """
    order = np.argsort(-lengths.astype(np.int64), kind="stable").astype(np.int32)
    ordered = lengths[order]
    if ordered.size == 0:
        return order, []
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    counts = np.diff(np.r_[starts, ordered.size])
    runs = [(int(ordered[s]), int(s), int(c)) for s, c in zip(starts, counts, strict=True)]
    return order, runs


def assemble(order: np.ndarray, bin_of_sorted: np.ndarray, n_bins: int) -> Bins:
    """Group sorted samples by bin; inside a bin they keep the sorted order (longest first, ties by index)."""
    by_bin = np.argsort(bin_of_sorted, kind="stable")
    indexes = order[by_bin].astype(np.int32)
    sizes = np.bincount(bin_of_sorted, minlength=n_bins)
    offsets = np.zeros(n_bins + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return Bins(indexes=indexes, offsets=offsets)
