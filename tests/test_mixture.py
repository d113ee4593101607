"""A mixture's rules, as functions of the samples and the seed (``packing/mixture.py``), and the even
interleave of sources over steps (``packing/interleave.py``).

Counts are checked against arithmetic written here from the rules' definitions (largest remainder,
whole passes plus a subset), never against a second call of the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from _largest_remainder import largest_remainder

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.packing import PackLimits, pack_samples
from vlmpack_offline.packing.copies import copies, separate_copies
from vlmpack_offline.packing.interleave import interleave, window_deviation
from vlmpack_offline.packing.mixture import SourceRule, rules_of, use_counts
from vlmpack_offline.schedule import balance, slot_balance


def _sources(*sizes: int) -> np.ndarray:
    return np.concatenate([np.full(n, code, np.int16) for code, n in enumerate(sizes)])


def _rules(*pairs) -> list[SourceRule]:
    return [SourceRule(name=f"s{i}", kind=kind, value=value) for i, (kind, value) in enumerate(pairs)]


def _per_source(uses: np.ndarray, source: np.ndarray, n: int) -> list[int]:
    return [int(uses[source == s].sum()) for s in range(n)]


@pytest.mark.parametrize("weights", [(0.5, 0.3, 0.2), (0.2, 0.2, 0.6), (1, 1, 1)])
def test_weights_split_the_mixture_exactly_bylargest_remainder(weights):
    source = _sources(300, 50, 120)
    tokens = np.full(source.size, 10)
    uses, _ = use_counts(source, tokens, np.ones(source.size, bool), _rules(*(("weight", w) for w in weights)),
                         by_tokens=False, epochs=1, seed=0)
    assert _per_source(uses, source, 3) == largest_remainder(list(weights), source.size)


def test_down_sampling_leaves_a_seeded_subset_out_and_up_sampling_repeats_whole_passes_first():
    source = _sources(300, 50)
    uses, _ = use_counts(source, np.ones(350), np.ones(350, bool), _rules(("weight", 0.5), ("weight", 0.5)),
                         by_tokens=False, epochs=1, seed=3)
    big, small = uses[source == 0], uses[source == 1]
    assert set(big.tolist()) == {0, 1} and big.sum() == 175  # half of 350, each sample at most once
    assert set(small.tolist()) <= {3, 4} and small.sum() == 175  # 3 whole passes + 25 once more
    again, _ = use_counts(source, np.ones(350), np.ones(350, bool), _rules(("weight", 0.5), ("weight", 0.5)),
                          by_tokens=False, epochs=1, seed=3)
    other, _ = use_counts(source, np.ones(350), np.ones(350, bool), _rules(("weight", 0.5), ("weight", 0.5)),
                          by_tokens=False, epochs=1, seed=4)
    assert np.array_equal(uses, again) and not np.array_equal(uses, other)


def test_repeat_two_and_a_half_is_every_sample_twice_plus_a_seeded_half():
    source = _sources(101)
    uses, targets = use_counts(source, np.ones(101), np.ones(101, bool), _rules(("repeat", 2.5)),
                               by_tokens=False, epochs=1, seed=0)
    assert set(uses.tolist()) == {2, 3}
    assert int((uses == 3).sum()) == math.floor(0.5 * 101 + 0.5)
    assert targets.used[0] == uses.sum()


def test_count_takes_exactly_n_samples_and_each_epoch_draws_its_own():
    source = _sources(40, 60)
    rules = _rules(("count", 10), ("repeat", 1))
    uses, _ = use_counts(source, np.ones(100), np.ones(100, bool), rules, by_tokens=False, epochs=3, seed=0)
    first = uses[:40]
    assert first.sum() == 30 and first.max() >= 1  # 10 per epoch
    assert (uses[40:] == 3).all()  # every sample once per epoch
    one, _ = use_counts(source, np.ones(100), np.ones(100, bool), rules, by_tokens=False, epochs=1, seed=0)
    assert np.count_nonzero(first) > np.count_nonzero(one[:40])  # other samples in later epochs


def test_by_tokens_each_source_reaches_its_token_target_within_one_sample():
    rng = np.random.default_rng(0)
    source = _sources(500, 200, 80)
    tokens = np.concatenate([rng.integers(50, 200, 500), rng.integers(500, 3000, 200), rng.integers(10, 40, 80)])
    weights = (0.5, 0.3, 0.2)
    uses, targets = use_counts(source, tokens, np.ones(source.size, bool), _rules(*(("weight", w) for w in weights)),
                               by_tokens=True, epochs=1, seed=0)
    part = tokens.sum()
    for s, w in enumerate(weights):
        reached = int((uses[source == s] * tokens[source == s]).sum())
        assert abs(reached - w * part) <= tokens[source == s].max()
        assert reached == targets.used[s]


def test_samples_that_do_not_fit_are_never_used():
    source = _sources(10)
    eligible = np.arange(10) % 2 == 0
    uses, targets = use_counts(source, np.ones(10), eligible, _rules(("repeat", 2)), by_tokens=False, epochs=1, seed=0)
    assert (uses[~eligible] == 0).all() and (uses[eligible] == 2).all()
    assert targets.available[0] == 5


def test_a_source_with_nothing_packable_is_named_empty():
    source = _sources(5, 5)
    eligible = source == 0
    _, targets = use_counts(source, np.ones(10), eligible, _rules(("weight", 1), ("weight", 1)), by_tokens=False,
                            epochs=1, seed=0)
    assert targets.empty == ("s1",)


def test_copies_spread_each_samples_copies_evenly_over_the_order():
    uses = np.array([0, 1, 2, 3, 1], np.uint32)
    # keys (j + position / 4) / uses: 1: 0; 2: .125, .625; 3: .167, .5, .833; 4: .75
    assert copies(uses).tolist() == [1, 2, 3, 3, 2, 4, 3]
    many = copies(np.full(100, 4, np.uint32))
    gaps = [np.diff(np.flatnonzero(many == s)).min() for s in range(100)]
    assert min(gaps) >= 99  # four copies of each, a quarter of the order apart


def test_separate_copies_swaps_a_copy_for_a_sample_of_equal_length_and_keeps_every_pack_total():
    lengths = np.array([5, 5, 5, 3])
    indexes = np.array([0, 0, 3, 1, 2, 3])  # pack 0 holds sample 0 twice; pack 1 holds 1, 2, 3
    offsets = np.array([0, 3, 6])
    totals = np.add.reduceat(lengths[indexes], offsets[:-1])
    indexes, offsets, left = separate_copies(indexes, offsets, lengths, PackLimits(capacity=20))
    assert left == 0
    for p in range(2):
        members = indexes[offsets[p] : offsets[p + 1]].tolist()
        assert len(set(members)) == len(members)
    assert np.array_equal(np.add.reduceat(lengths[indexes], offsets[:-1]), totals)
    assert sorted(indexes.tolist()) == [0, 0, 1, 2, 3, 3]


def test_copies_with_no_sample_of_their_length_to_trade_with_are_packed_again_apart():
    lengths = np.array([7, 2])
    indexes, offsets, left = separate_copies(np.array([0, 0, 1]), np.array([0, 3]), lengths, PackLimits(capacity=16))
    assert left == 0
    packs = [indexes[offsets[p] : offsets[p + 1]].tolist() for p in range(len(offsets) - 1)]
    assert sorted(map(sorted, packs)) == [[0], [0, 1]]  # one more pack: the only way to keep the copies apart


def test_packing_every_copy_together_fills_like_distinct_samples():
    rng = np.random.default_rng(0)
    # long ones 3x; lengths repeat, as they do at scale (a copy trades with a sample of its length)
    lengths = np.concatenate([rng.integers(3000, 3030, 300), rng.integers(20, 400, 3000)])
    uses = np.concatenate([np.full(300, 3), np.ones(3000)]).astype(np.uint32)
    items = copies(uses)
    bins = pack_samples(lengths[items], PackLimits(capacity=8192))
    indexes, offsets, left = separate_copies(items[bins.indexes], bins.offsets, lengths, PackLimits(capacity=8192))
    assert left == 0 and np.array_equal(np.sort(indexes), np.sort(items))
    assert len(offsets) == len(bins.offsets)  # separating copies never adds a pack
    # packing each round of copies apart (short fillers in round 0 only) takes more packs
    apart = sum(len(pack_samples(lengths[np.flatnonzero(uses > r)], PackLimits(capacity=8192)).offsets) - 1
                for r in range(3))
    assert len(offsets) - 1 < apart
    assert np.add.reduceat(lengths[indexes], offsets[:-1]).max() <= 8192
    for p in range(len(offsets) - 1):
        members = indexes[offsets[p] : offsets[p + 1]]
        assert len(np.unique(members)) == len(members)


def test_config_without_sources_is_one_source_used_once():
    config = config_from_dict({"data": {"wds_dir": "/x"}})
    assert rules_of(config) == (SourceRule(name="default", kind="repeat", value=1.0),)


@pytest.mark.parametrize(("source", "message"), [
    ({"name": "a", "wds_dir": "/x", "weight": -1}, "finite number >= 0"),
    ({"name": "a", "wds_dir": "/x", "weight": float("nan")}, "finite number >= 0"),
    ({"name": "a", "wds_dir": "/x", "weight": 0}, "every source weight is 0"),
    ({"name": "a", "wds_dir": "/x", "weight": 1, "repeat": 2}, "sets weight and repeat"),
    ({"name": "a/b", "wds_dir": "/x"}, "without '/'"),
    ({"name": "a", "wds_dir": ""}, "has no wds_dir"),
    ({"name": "a", "wds_dir": "/x", "count": -3}, "count must be >= 0"),
])
def test_bad_source_rules_are_refused_naming_the_source(source, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict({"data": {"sources": [source]}})


def test_two_sources_with_one_name_and_sources_beside_wds_dir_are_refused():
    with pytest.raises(ConfigError, match="two sources are named 'a'"):
        config_from_dict({"data": {"sources": [{"name": "a", "wds_dir": "/x"}, {"name": "a", "wds_dir": "/y"}]}})
    with pytest.raises(ConfigError, match="both set"):
        config_from_dict({"data": {"wds_dir": "/z", "sources": [{"name": "a", "wds_dir": "/x"}]}})


# -- even mixing over steps -------------------------------------------------------------------------------


def _units(n: int, n_sources: int, seed: int, mixed: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sub-samples (unit, source, amount) of ``n`` units: one source each with uneven amounts (1 to 60 samples,
    as BFD packs of short and long samples hold), or, ``mixed``, a dominant source and a few of another."""
    rng = np.random.default_rng(seed)
    weights = rng.dirichlet(np.ones(n_sources) * 2)
    dominant = rng.choice(n_sources, n, p=weights)
    heavy = rng.random(n) < 0.1
    amount = np.where(heavy, rng.integers(20, 60, n), rng.integers(1, 6, n)).astype(float)
    unit, source = np.arange(n), dominant
    if mixed:
        extra = rng.integers(0, n_sources, n)
        unit = np.concatenate([unit, np.arange(n)])
        source = np.concatenate([source, extra])
        amount = np.concatenate([amount, rng.integers(0, 3, n).astype(float)])
    return unit, source.astype(np.int16), amount


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_class_holds_its_share_of_any_window_within_two_units_cyclically(seed):
    unit, source, amount = _units(3000, 6, seed, mixed=True)
    order = interleave(unit, source, amount, 3000, np.random.default_rng(seed))
    assert sorted(order.tolist()) == list(range(3000))
    content = np.zeros((3000, 6))
    np.add.at(content, (unit, source), amount)
    dominant = content.argmax(axis=1)[order]
    doubled = np.concatenate([dominant, dominant])
    for c in np.unique(dominant):
        share = np.count_nonzero(dominant == c) / 3000
        hits = np.concatenate([[0], np.cumsum(doubled == c)])
        for w in (7, 50, 400):
            counts = hits[w : w + 3000] - hits[:3000]  # every cyclic window of w units
            assert np.abs(counts - w * share).max() < 2


def _steps(order: np.ndarray, unit: np.ndarray, ranks: int) -> np.ndarray:
    position = np.empty(len(order), np.int64)
    position[order] = np.arange(len(order))
    return position[unit] // ranks


def test_interleaved_windows_hold_each_source_within_2_pp_where_random_order_does_not():
    n, ranks = 8000, 8  # 100 steps of 8 ranks is 800 packs
    unit, source, amount = _units(n, 5, 7, mixed=True)
    asked = np.bincount(source, weights=amount, minlength=5) / amount.sum()
    order = interleave(unit, source, amount, n, np.random.default_rng(0))
    worst, window, _ = window_deviation(_steps(order, unit, ranks), source, amount, n // ranks, asked)
    shuffled = np.random.default_rng(0).permutation(n)
    random_worst, _, _ = window_deviation(_steps(shuffled, unit, ranks), source, amount, n // ranks, asked)
    assert window == 100
    assert worst.max() <= 0.02 < random_worst.max()


def test_window_deviation_is_the_worst_cyclic_window_share():
    # four steps holding one sample each: a, b, a, a
    step, source = np.arange(4), np.array([0, 1, 0, 0], np.int16)
    worst, window, _ = window_deviation(step, source, np.ones(4), 4, np.array([0.75, 0.25]), window=2)
    # windows (cyclic): ab -> .5/.5, ba -> .5/.5, aa -> 1/0, aa -> 1/0
    assert window == 2 and np.allclose(worst, [0.25, 0.25])


def test_balanced_slots_of_a_mixture_hold_several_sources_and_stay_as_balanced():
    costs = np.linspace(100, 100.1, 4096)
    pack_class = (np.arange(4096) // 16) % 4  # runs of 16 near-equal costs from one source, as a source's packs are
    plain, _, _ = balance(costs, 8, 1, 1, np.random.default_rng(0))
    mixed, _, schedule = balance(costs, 8, 1, 1, np.random.default_rng(0), pack_class=pack_class)

    def sources_per_slot(order):
        table = order.reshape(8, -1)  # [rank, slot]
        return np.mean([len(set(pack_class[table[:, j]].tolist())) for j in range(table.shape[1])])

    assert sources_per_slot(plain) < 1.5 and sources_per_slot(mixed) > 3
    assert slot_balance(costs[mixed], schedule).max() <= slot_balance(costs[plain], schedule).max() + 0.002


def test_each_source_reads_its_own_texts_key_and_the_others_the_data_default():
    config = config_from_dict({"data": {"template_text_key": "texts", "sources": [
        {"name": "a", "wds_dir": "/a", "template_text_key": "conversation"}, {"name": "b", "wds_dir": "/b"}]}})
    assert config.data.template_text_key_of("a/part-0.tar") == "conversation"
    assert config.data.template_text_key_of("b/sub/part-0.tar") == "texts"
    assert config_from_dict({"data": {"wds_dir": "/x", "template_text_key": "t"}}).data.template_text_key_of("a/p.tar") \
        == "t"  # one source: every shard, whatever its path
