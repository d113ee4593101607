"""Invariants of the planner for any input (Hypothesis): each sample once, no pack over C, limits held."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from vlmpack_offline.packing import ALGORITHMS, PackLimits, lower_bound, pack_samples


@st.composite
def problems(draw):
    capacity = draw(st.integers(1, 200))
    n = draw(st.integers(0, 120))
    lengths = draw(st.lists(st.integers(1, capacity), min_size=n, max_size=n))
    media = draw(st.lists(st.integers(0, 300), min_size=n, max_size=n))
    max_samples = draw(st.none() | st.integers(1, 8))
    max_media = draw(st.none() | st.integers(1, 400))
    algorithm = draw(st.sampled_from(sorted(ALGORITHMS)))
    limits = PackLimits(capacity=capacity, max_samples=max_samples, max_media_tokens=max_media)
    return np.array(lengths, dtype=np.int32), np.array(media, dtype=np.int32), limits, algorithm


@settings(max_examples=300, deadline=None)
@given(problems())
def test_any_input_gives_a_valid_plan(problem):
    lengths, media, limits, algorithm = problem
    bins = pack_samples(lengths, limits, algorithm=algorithm, media_tokens=media)
    assert np.array_equal(np.sort(bins.indexes), np.arange(len(lengths)))
    assert (bins.pack_sizes() >= 1).all()
    assert (bins.pack_sums(lengths) <= limits.capacity).all()
    assert bins.n_packs >= lower_bound(lengths, limits.capacity)
    if limits.max_samples is not None:
        assert (bins.pack_sizes() <= limits.max_samples).all()
    if limits.max_media_tokens is not None:
        shared = bins.pack_sizes() > 1  # a lone sample over the media limit gets its own pack
        assert (bins.pack_sums(media)[shared] <= limits.max_media_tokens).all()
    for p in range(bins.n_packs):  # inside a pack: longest first, ties by index
        members = bins.pack(p)
        assert list(members) == sorted(members, key=lambda i: (-lengths[i], i))


@settings(max_examples=100, deadline=None)
@given(problems())
def test_packing_is_a_pure_function_of_its_inputs(problem):
    lengths, media, limits, algorithm = problem
    first = pack_samples(lengths, limits, algorithm=algorithm, media_tokens=media)
    second = pack_samples(lengths.copy(), limits, algorithm=algorithm, media_tokens=media.copy())
    assert np.array_equal(first.indexes, second.indexes) and np.array_equal(first.offsets, second.offsets)


def _textbook_bfd_rooms(lengths, capacity):
    """Textbook best-fit decreasing, one bin at a time (the definition, for small inputs)."""
    rooms = []
    for length in sorted(lengths, reverse=True):
        fitting = [r for r in rooms if r >= length]
        if fitting:
            rooms[rooms.index(min(fitting))] -= length
        else:
            rooms.append(capacity - length)
    return sorted(rooms)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 100).flatmap(lambda c: st.tuples(st.just(c), st.lists(st.integers(1, c), max_size=80))))
def test_histogram_best_fit_matches_textbook_best_fit(problem):
    capacity, lengths = problem
    bins = pack_samples(np.array(lengths, dtype=np.int32), PackLimits(capacity=capacity))
    rooms = sorted((capacity - bins.pack_sums(np.array(lengths, dtype=np.int64))).tolist())
    assert rooms == _textbook_bfd_rooms(lengths, capacity)
