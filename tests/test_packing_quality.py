"""Packing quality: best-fit decreasing within 0.1% of the lower bound, and hand-checked small cases."""

from __future__ import annotations

import numpy as np
import pytest

from vlmpack_offline.errors import PlanError
from vlmpack_offline.packing import PackLimits, lower_bound, pack_samples


def _lognormal_lengths(capacity: int, n: int, seed: int) -> np.ndarray:
    """Lengths with median C/20 and a long tail (sigma 1), clipped to 1..C."""
    rng = np.random.default_rng(seed)
    return np.clip(np.round(rng.lognormal(np.log(capacity / 20), 1.0, n)), 1, capacity).astype(np.int32)


@pytest.mark.parametrize("capacity", [8192, 32768])
def test_best_fit_within_a_tenth_of_a_percent_of_the_lower_bound(capacity):
    lengths = _lognormal_lengths(capacity, 100_000, seed=capacity)
    assert abs(np.median(lengths) - capacity / 20) < capacity / 200
    bins = pack_samples(lengths, PackLimits(capacity=capacity))
    assert bins.n_packs <= 1.001 * lower_bound(lengths, capacity)


def test_lower_bound_counts_volume_and_halves():
    assert lower_bound(np.array([6, 6, 6]), 10) == 3  # three samples over C/2, volume only needs 2
    assert lower_bound(np.array([5, 5, 5, 4]), 10) == 2  # 19 tokens: ceil(19 / 10); 5 is not over C/2
    assert lower_bound(np.array([], dtype=np.int32), 10) == 0


def _packs(bins, lengths):
    return [[int(lengths[i]) for i in bins.pack(p)] for p in range(bins.n_packs)]


def test_golden_best_fit_first_fit_and_hashbucket():
    lengths = np.array([2, 5, 4, 7, 1, 3, 8])  # C = 10, sum 30, lower bound 3
    limits = PackLimits(capacity=10)
    # BFD: 8 | 7 | 5 ; 4 -> room 5 (best, least room that fits) ; 3 -> room 3 (7's bin) ;
    # 2 -> room 2 (8's bin) ; 1 -> room 1 (5+4's bin)
    bfd = pack_samples(lengths, limits, algorithm="best_fit_decreasing")
    assert sorted(_packs(bfd, lengths)) == [[5, 4, 1], [7, 3], [8, 2]]
    # FFD: 4 -> first bin with room (8's has 2, 7's has 3, 5's has 5) = 5's ; 3 -> 7's ; 2 -> 8's ; 1 -> 5+4's
    ffd = pack_samples(lengths, limits, algorithm="first_fit_decreasing")
    assert _packs(ffd, lengths) == [[8, 2], [7, 3], [5, 4, 1]]
    # hashbucket: pack opens with the longest left and takes the longest that fits until full
    hb = pack_samples(lengths, limits, algorithm="hashbucket")
    assert _packs(hb, lengths) == [[8, 2], [7, 3], [5, 4, 1]]


def test_golden_where_best_fit_beats_first_fit_order():
    lengths = np.array([6, 5, 4, 3, 2])  # C = 10
    bfd = pack_samples(lengths, PackLimits(capacity=10))
    assert _packs(bfd, lengths) == [[6, 4], [5, 3, 2]]


def test_golden_limits():
    lengths = np.array([3, 3, 3, 3, 3])  # C = 10 would take 3 a pack
    two_each = pack_samples(lengths, PackLimits(capacity=10, max_samples=2))
    assert _packs(two_each, lengths) == [[3, 3], [3, 3], [3]]
    media = np.array([5, 5, 5, 0, 20])  # the 20 exceeds the media limit alone: a pack of its own
    capped = pack_samples(lengths, PackLimits(capacity=10, max_media_tokens=10), media_tokens=media)
    assert sorted(bins.tolist() for bins in (capped.pack(p) for p in range(capped.n_packs))) == [[0, 1, 3], [2], [4]]


def test_overlong_sample_is_refused_with_the_fix():
    with pytest.raises(PlanError, match=r"token_len 11, outside 1\.\.10.*`vlmpack bucket` drops longer samples as overlong"):
        pack_samples(np.array([3, 11]), PackLimits(capacity=10))


def test_stats_lower_bound_counts_each_media_group_separately():
    # Three 300-token samples fit one pack of 1000, but grouped by media type the
    # image pair and the lone text sample can never share a pack: the bound is 2.
    from vlmpack_offline.stats import compute_stats

    lengths = np.array([300, 300, 300])
    args = (lengths, np.array([600, 300]), np.array([2, 1]), 1000, {})
    assert compute_stats(*args).lower_bound == 1
    assert compute_stats(*args, sample_groups=np.array(["image", "image", "text"])).lower_bound == 2
