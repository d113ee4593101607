"""The planner's chunked steps (``packing/_chunked.py``) give exactly what the whole-array numpy expressions give,
whatever the chunk size: the plan's bytes must not depend on how a billion samples were cut into chunks."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from vlmpack_offline.packing._chunked import counting_sort, flatnonzero32, pack_chunk_end, pack_sums

CHUNKS = st.sampled_from([1, 2, 3, 7, 64, 1 << 20])


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(st.integers(0, 9), max_size=300), chunk=CHUNKS, with_values=st.booleans())
def test_counting_sort_is_numpys_stable_argsort(keys, chunk, with_values):
    keys = np.array(keys, np.int64)
    values = np.arange(len(keys), dtype=np.int64)[::-1] * 3 if with_values else None
    out, counts = counting_sort(len(keys), 10, lambda a, b: keys[a:b], None if values is None else
                                (lambda a, b: values[a:b]), chunk=chunk)  # fmt: skip
    order = np.argsort(keys, kind="stable")
    assert out.dtype == np.int32
    assert np.array_equal(out, order if values is None else values[order])
    assert np.array_equal(counts, np.bincount(keys, minlength=10))


def test_counting_sort_with_more_keys_than_a_bincount_per_chunk_affords():
    keys = np.random.default_rng(0).integers(0, 1000, 500)
    out, counts = counting_sort(len(keys), 1000, lambda a, b: keys[a:b], chunk=2)  # n_keys > 4 * chunk
    assert np.array_equal(out, np.argsort(keys, kind="stable")) and counts.sum() == 500


@settings(max_examples=100, deadline=None)
@given(mask=st.lists(st.booleans(), max_size=200), chunk=CHUNKS)
def test_flatnonzero32_is_flatnonzero(mask, chunk):
    mask = np.array(mask, bool)
    found = flatnonzero32(len(mask), lambda a, b: mask[a:b], chunk=chunk)
    assert found.dtype == np.int32 and np.array_equal(found, np.flatnonzero(mask))


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(st.integers(1, 9), min_size=1, max_size=60), chunk=CHUNKS, seed=st.integers(0, 99))
def test_pack_sums_is_reduceat_over_each_pack(sizes, chunk, seed):
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 2**31 - 1, 400, dtype=np.int64).astype(np.int32)
    offsets = np.r_[0, np.cumsum(sizes)]
    indexes = rng.integers(0, 400, offsets[-1])
    expected = np.add.reduceat(values[indexes].astype(np.int64), offsets[:-1])
    assert np.array_equal(pack_sums(values, indexes, offsets, chunk=chunk), expected)
    first = 0
    while first < len(sizes):  # the runs of whole packs cover every pack once, in order
        last = pack_chunk_end(offsets, first, chunk)
        assert first < last <= len(sizes)
        first = last
