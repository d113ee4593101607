"""Whole-array steps of the planner done ``CHUNK`` elements at a time, so no temporary grows with the data set.

A billion samples (issue 37) cannot afford an int64 temporary per sample for every sort, gather and sum:
``np.argsort`` returns int64 positions, ``np.bincount`` casts its input to int64, a fancy-indexed gather
copies the whole selection. Each helper here gives exactly what the whole-array expression gives (the
docstrings name it), holding only its output plus O(``CHUNK``) (or O(keys)) scratch.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator

import numpy as np

__all__ = ["CHUNK", "counting_sort", "flatnonzero32", "pack_chunks", "pack_sums", "release", "rows"]

CHUNK = 1 << 20  # elements per step: ~30 MB of scratch at most
RELEASE_EVERY = 16  # chunks read from a memory-mapped array between two ``release`` calls (16 Mi elements' pages)

Slice = Callable[[int, int], np.ndarray]  # (start, stop) -> that slice of a per-element array


def counting_sort(n: int, n_keys: int, key_of: Slice, value_of: Slice | None = None,
                  chunk: int = CHUNK) -> tuple[np.ndarray, np.ndarray]:
    """(values in a stable sort by key, as int32; the count of each key, int64 [n_keys]).

    Equals ``values[np.argsort(keys, kind="stable")]`` for keys in ``0..n_keys-1`` (values default to the
    positions ``0..n-1``), built as a counting sort: one pass counts the keys, a second places each chunk's
    elements after those of the chunks before it, so ties keep their order."""
    counts = np.zeros(n_keys, np.int64)
    for first in range(0, n, chunk):
        keys = key_of(first, min(first + chunk, n))
        if n_keys <= 4 * chunk:
            counts += np.bincount(keys, minlength=n_keys)
        else:  # a bincount per chunk would cost O(n_keys) each
            present, times = np.unique(keys, return_counts=True)
            counts[present] += times
    next_free = np.cumsum(counts) - counts
    out = np.empty(n, np.int32)
    for first in range(0, n, chunk):
        last = min(first + chunk, n)
        keys = key_of(first, last)
        by_key = np.argsort(keys, kind="stable")
        keys = keys[by_key]
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if keys.size else np.zeros(0, np.int64)
        sizes = np.diff(np.r_[starts, keys.size])
        rank = np.arange(keys.size) - np.repeat(starts, sizes)  # place among the chunk's equal keys
        values = np.arange(first, last) if value_of is None else value_of(first, last)
        out[next_free[keys] + rank] = values[by_key]
        next_free[keys[starts]] += sizes
    return out, counts


def flatnonzero32(n: int, mask_of: Slice, chunk: int = CHUNK) -> np.ndarray:
    """``np.flatnonzero(mask).astype(np.int32)`` of a bool mask over ``n`` elements given a slice at a time
    (``mask_of(start, stop)``): neither the mask nor an int64 intermediate is ever whole."""
    parts = [np.flatnonzero(mask_of(first, min(first + chunk, n))).astype(np.int32) + np.int32(first)
             for first in range(0, n, chunk)]
    return np.concatenate(parts) if parts else np.zeros(0, np.int32)


def release(*arrays: np.ndarray) -> None:
    """Drop the pages of memory-mapped arrays from this process (``madvise(MADV_DONTNEED)``); a no-op for
    arrays in memory.

    A page of a file mapping counts in the process's RSS once touched, until unmapped: reading a 4 GB
    ``np.load(mmap_mode="r")`` array through adds 4 GB to the peak RSS however little is kept. For a shared
    file mapping (numpy's ``memmap``, read-only or written), MADV_DONTNEED only unmaps: the data stays in the
    file (the page cache), and the next read faults it back in (madvise(2)). So a pass over a mapped array
    calls this every ``RELEASE_EVERY`` chunks and the peak is bounded by that, not by the file."""
    for array in arrays:
        handle = getattr(array, "_mmap", None)  # numpy.memmap and its slices keep their mmap.mmap here
        if isinstance(handle, mmap.mmap) and not handle.closed:
            handle.madvise(mmap.MADV_DONTNEED)


def rows(array: np.ndarray, first: int, last: int) -> np.ndarray:
    """``array[first:last]`` held in memory: a view of an in-memory array, a copy of a memory-mapped one (whose
    pages are then released, ``release``), so a partition's rows cost their own bytes and no more."""
    if getattr(array, "_mmap", None) is None:
        return array[first:last]
    out = np.array(array[first:last])
    release(array)
    return out


def pack_sums(values: np.ndarray, indexes: np.ndarray, offsets: np.ndarray, chunk: int = CHUNK) -> np.ndarray:
    """int64 [P]: ``np.add.reduceat(values[indexes].astype(np.int64), offsets[:-1])``, the sum of a per-sample
    array over each pack ``indexes[offsets[p]:offsets[p + 1]]`` (0 for an empty pack list), gathered about
    ``chunk`` samples at a time (whole packs per step)."""
    out = np.zeros(len(offsets) - 1, np.int64)
    for first, last in pack_chunks(offsets, chunk, mapped=(values, indexes)):
        lo, hi = int(offsets[first]), int(offsets[last])
        if hi > lo:
            out[first:last] = np.add.reduceat(values[indexes[lo:hi]].astype(np.int64), offsets[first:last] - lo)
    return out


def pack_chunks(offsets: np.ndarray, chunk: int = CHUNK, *, mapped: tuple[np.ndarray, ...] = ()
                ) -> Iterator[tuple[int, int]]:
    """The packs ``offsets`` delimits as runs ``(first, last)`` of whole packs holding about ``chunk`` samples
    each (``pack_chunk_end``), in order. ``mapped``: arrays the caller reads through, whose pages are released
    (``release``) every ``RELEASE_EVERY`` runs and once more at the end, so a pass over memory-mapped columns
    holds a bounded number of their pages."""
    first, step, n_packs = 0, 0, len(offsets) - 1
    while first < n_packs:
        last = pack_chunk_end(offsets, first, chunk)
        yield first, last
        first, step = last, step + 1
        if step % RELEASE_EVERY == 0:
            release(*mapped)
    release(*mapped)


def pack_chunk_end(offsets: np.ndarray, first: int, chunk: int = CHUNK) -> int:
    """The pack after the last of a run of whole packs from ``first`` holding about ``chunk`` samples
    (at least one pack)."""
    last = int(np.searchsorted(offsets, offsets[first] + chunk, side="right")) - 1
    return min(max(last, first + 1), len(offsets) - 1)
