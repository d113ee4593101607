"""Bucket and plan past ``packing.partition_samples``: partitions packed on their own, plan streamed via files.

The contract (issue 37): memory is bounded by the setting, not the data set; every ok sample is still
planned exactly once within capacity; the bins and the plan are the same bytes for the same inputs;
at or below the setting nothing changes; and the out-of-core plan gives the same bytes as the
in-memory one for the same bins.
"""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from test_bucket_plan_stages import CAPACITY, _write_manifest  # the stage tests' manifest writer

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.errors import ConfigError, PlanError
from vlmpack_offline.packing import lower_bound
from vlmpack_offline.packing._chunked import release, rows
from vlmpack_offline.plan_file import _write_npy, plan_path, read_plan, read_plan_arrays, write_plan_arrays
from vlmpack_offline.stages import bucket, plan
from vlmpack_offline.stages._ok_samples import MEDIA_TYPES, OkSamples

PART = 1000  # the smallest partition the config takes


def _config(work_dir, partition=PART, **sections):
    raw = {"data": {"work_dir": str(work_dir)}, "sample": {"max_token_len": CAPACITY},
           "packing": {"partition_samples": partition}}
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return config_from_dict(raw, source="test")


def _digest(work_dir) -> dict[str, str]:
    files = sorted((work_dir / "bins").glob("*.npy")) + [plan_path(work_dir)]
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def _samples(n: int, seed: int = 0) -> OkSamples:
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(CAPACITY / 12), 1.0, n).round(), 1, CAPACITY + 50).astype(np.int32)
    codes = rng.choice(3, size=n, p=[0.3, 0.6, 0.1]).astype(np.int8)
    media = np.where(codes == 0, 0, lengths // 2).astype(np.int32)
    return OkSamples(token_len=lengths, media_tokens=media, media_code=codes, media_names=MEDIA_TYPES,
                     encoder_patches=media * 4, encoder_attention=(media.astype(np.int64) * 4) ** 2)


@pytest.mark.parametrize("sections", [{}, {"parallel": {"data_parallel_size": 2, "context_parallel_size": 2}},
                                      {"packing": {"group_by": "none"}, "split": {"val_ratio": 0.05}}])
def test_past_the_setting_every_ok_sample_is_planned_once_within_capacity(tmp_path, sections):
    config = _config(tmp_path / "work", **sections)
    ok = _write_manifest(config.work_dir, n=4600)
    bucket.run(config)
    result = plan.run(config)
    assert result.exit_code == 0
    packs = list(read_plan(config.work_dir))
    planned = [i for p in packs for i in p.sample_ids]
    overlong = {i for i, n in ok.items() if config.alignment.aligned(np.array([n]))[0] > CAPACITY}
    assert sorted(planned) == sorted(set(ok) - overlong)
    multiple = config.alignment.multiple
    assert all(sum(-(-n // multiple) * multiple for n in p.sample_token_lens) <= CAPACITY for p in packs)
    assert not (config.work_dir / "plan-scratch").exists()  # the streamed arrays are deleted once written


def test_only_the_repacked_tail_crosses_partitions(tmp_path):
    config = _config(tmp_path / "work")
    _write_manifest(config.work_dir, n=4600)
    bucket.run(config)
    plan.run(config)
    arrays = read_plan_arrays(config.work_dir)
    part = arrays.sample_index // PART
    crossing = np.add.reduceat((part != np.repeat(part[arrays.pack_offsets[:-1]], arrays.pack_sizes)).astype(int),
                               arrays.pack_offsets[:-1]) > 0
    partitions, groups = -(-4600 // PART), len(bucket.read_bins_meta(config)["groups"])
    assert crossing.sum() <= 16 * partitions * groups  # the re-packed tails (bucket._tail_packs) only


@pytest.mark.parametrize("partition", [5000, 10_000])
def test_partitions_cost_a_pack_or_two_each(tmp_path, partition):
    samples = _samples(40_000, seed=4)  # lognormal lengths, median C / 12: many samples a pack, as in training sets
    n_packs = {size: sum(len(g[1]) - 1 for g in bucket.build_bins(samples, _config(tmp_path, partition=size)).values())
               for size in (100_000_000, partition)}
    partitions = -(-samples.n // partition)
    assert n_packs[100_000_000] <= n_packs[partition] <= n_packs[100_000_000] + 2 * partitions


def test_same_inputs_give_the_same_bins_and_plan_bytes_past_the_setting(tmp_path):
    digests = []
    for name in ("a", "b"):
        config = _config(tmp_path / name, parallel={"data_parallel_size": 2})
        _write_manifest(config.work_dir, n=3400, seed=3)
        bucket.run(config)
        plan.run(config)
        digests.append(_digest(config.work_dir))
    assert digests[0] == digests[1]


def test_at_or_below_the_setting_the_bins_are_the_whole_planners(tmp_path):
    samples = _samples(5000)
    whole = bucket.build_bins(samples, _config(tmp_path, partition=100_000_000))
    at = bucket.build_bins(samples, _config(tmp_path, partition=5000))
    assert list(whole) == list(at)
    for name in whole:
        assert all(np.array_equal(a, b) for a, b in zip(whole[name][:2], at[name][:2], strict=True))
    parted = bucket.build_bins(samples, _config(tmp_path, partition=2000))
    assert any(not np.array_equal(whole[n][0], parted[n][0]) for n in whole)  # past it: partitions


def test_partitions_are_packed_as_data_sets_of_their_own_and_their_tails_again_together(tmp_path):
    samples = _samples(3500, seed=5)
    config = _config(tmp_path)
    parted = bucket.build_bins(samples, config)
    alone = [(first, bucket.build_bins(samples.rows(first, min(first + PART, samples.n)), config))
             for first in range(0, samples.n, PART)]
    for name, (indexes, offsets, _) in parted.items():
        kept, sparse = [], []
        for first, part in alone:
            if name not in part:
                continue
            idx, off, _ = part[name]
            packs = [idx[a:b] + first for a, b in zip(off[:-1], off[1:], strict=True)]
            tail = bucket._tail_packs(np.array([int(samples.token_len[p].sum()) for p in packs]), CAPACITY)
            for pack, in_tail in zip(packs, tail, strict=True):
                (sparse if in_tail else kept).append(pack)
        got = [indexes[a:b] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]
        assert [p.tolist() for p in got[: len(kept)]] == [p.tolist() for p in kept]  # in partition order
        tail = got[len(kept):]
        assert sorted(np.concatenate(tail).tolist()) == sorted(np.concatenate(sparse).tolist()) if sparse else not tail
        assert len(tail) <= len(sparse)
        assert all(int(samples.token_len[p].sum()) <= CAPACITY for p in tail)


def test_memory_mapped_columns_give_the_same_bins(tmp_path):
    samples = _samples(3500, seed=2)
    config = _config(tmp_path)
    for field in ("token_len", "media_tokens", "media_code", "encoder_patches", "encoder_attention"):
        np.save(tmp_path / f"{field}.npy", getattr(samples, field))
    mapped = OkSamples(media_names=MEDIA_TYPES, **{f: np.load(tmp_path / f"{f}.npy", mmap_mode="r") for f in
                                                   ("token_len", "media_tokens", "media_code", "encoder_patches",
                                                    "encoder_attention")})
    a, b = bucket.build_bins(samples, config), bucket.build_bins(mapped, config)
    assert list(a) == list(b)
    assert all(np.array_equal(a[n][0], b[n][0]) and np.array_equal(a[n][1], b[n][1]) for n in a)


def test_the_streamed_plan_is_the_in_memory_plan_byte_for_byte(tmp_path):
    samples = _samples(6000, seed=1)
    config = _config(tmp_path, parallel={"data_parallel_size": 4}, split={"val_ratio": 0.02})
    groups = bucket.build_bins(samples, config)
    indexes = np.concatenate([g[0] for g in groups.values()])
    offsets = np.zeros(1 + sum(len(g[1]) - 1 for g in groups.values()), np.int64)
    np.cumsum(np.concatenate([np.diff(g[1]) for g in groups.values()]), out=offsets[1:])
    codes = np.concatenate([np.full(len(g[1]) - 1, c, np.int8) for c, g in enumerate(groups.values())])
    np.save(tmp_path / "lengths.npy", samples.token_len)
    np.save(tmp_path / "media.npy", samples.media_tokens)
    lengths = np.load(tmp_path / "lengths.npy", mmap_mode="r")
    media = np.load(tmp_path / "media.npy", mmap_mode="r")
    costs = np.arange(len(offsets) - 1, dtype=np.float64) % 17 + 1.0
    outs = []
    for name, scratch in (("memory", None), ("streamed", tmp_path / "scratch")):
        arrays, _ = plan.make_plan(indexes, offsets, codes, tuple(groups), lengths if scratch else samples.token_len,
                                   media if scratch else samples.media_tokens, config, costs, scratch=scratch)
        (tmp_path / name).mkdir()
        write_plan_arrays(tmp_path / name, arrays, {})
        outs.append(plan_path(tmp_path / name).read_bytes())
    assert isinstance(arrays.token_len, np.memmap)
    assert outs[0] == outs[1]


def test_validate_a_partition_at_a_time_finds_the_same_breach(tmp_path):
    lengths = np.full(5000, 10, np.int32)
    indexes = np.arange(5000, dtype=np.int32)
    indexes[4321] = 17  # sample 17 twice, 4321 nowhere
    offsets = np.arange(0, 5001, 5, dtype=np.int64)
    messages = []
    for rows_at_once in (None, 1000, 1024):
        with pytest.raises(PlanError) as raised:
            plan.validate(indexes, offsets, lengths, 5000, 100, rows_at_once=rows_at_once)
        messages.append(str(raised.value))
    assert len(set(messages)) == 1 and "#17 is in 2 packs" in messages[0]
    good = np.arange(5000, dtype=np.int32)
    plan.validate(good, offsets, lengths, 5000, 100, rows_at_once=1000)


def test_a_partition_smaller_than_the_floor_is_refused_naming_the_setting(tmp_path):
    with pytest.raises(ConfigError, match="packing.partition_samples must be >= 1,000"):
        _config(tmp_path, partition=10)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int8, np.float64, np.uint8])
@pytest.mark.parametrize("n", [0, 1, 4097])
def test_the_piecewise_npy_writer_writes_numpys_bytes(tmp_path, dtype, n):
    array = (np.arange(n) * 7 % 251).astype(dtype)
    expected, got = io.BytesIO(), io.BytesIO()
    np.lib.format.write_array(expected, array, allow_pickle=False)
    np.save(tmp_path / "a.npy", array)
    _write_npy(got, np.load(tmp_path / "a.npy", mmap_mode="r"), piece=1000)
    assert got.getvalue() == expected.getvalue()


def test_released_pages_read_back_the_same_and_rows_copies_a_mapped_column(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(300_000, dtype=np.int64))
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r+")
    mapped[5] = -1  # a written page of a shared mapping: released, still in the file
    release(mapped)
    assert int(mapped[5]) == -1 and int(mapped.sum()) == int(np.arange(300_000).sum()) - 6
    part = rows(mapped, 10, 20)
    assert not isinstance(part, np.memmap) and part.tolist() == list(range(10, 20))
    plain = np.arange(5)
    assert rows(plain, 1, 3).base is plain  # an in-memory column is not copied
    assert lower_bound(np.array([6, 5]), 10) == 2


def test_copies_past_the_setting_are_each_packed_and_kept_apart(tmp_path):
    samples = _samples(3500, seed=6)
    uses = (np.arange(samples.n) % 3 == 0).astype(np.uint16) + 1  # every third sample twice (a mixture's repeat)
    uses[samples.token_len > CAPACITY] = 0
    groups = bucket.build_bins(samples, _config(tmp_path), uses)
    indexes = np.concatenate([g[0] for g in groups.values()])
    assert np.array_equal(np.bincount(indexes, minlength=samples.n), uses)
    for idx, off, together in groups.values():
        twice = [np.unique(idx[a:b]).size < b - a for a, b in zip(off[:-1], off[1:], strict=True)]
        assert sum(twice) <= together


def test_the_partitions_of_the_sample_sets_here_leave_tails_to_repack(tmp_path):
    samples = _samples(3500, seed=5)  # the set test_partitions_are_packed_as_data_sets... checks
    config = _config(tmp_path)
    sparse = 0
    for first in range(0, samples.n, PART):
        for idx, off, _ in bucket.build_bins(samples.rows(first, min(first + PART, samples.n)), config).values():
            totals = np.add.reduceat(samples.token_len[idx + first].astype(np.int64), off[:-1])
            sparse += int(bucket._tail_packs(totals, CAPACITY).sum())
    assert sparse > 0


def test_a_partitions_tail_is_its_few_emptiest_packs_under_99_percent():
    totals = np.array([1000, 990, 500, 989, 10, 700, 1000])
    assert bucket._tail_packs(totals, 1000).tolist() == [False, False, True, True, True, True, False]
    many = np.arange(100, 140)  # every pack part-filled (long samples): only the 16 emptiest, bounded
    assert np.flatnonzero(bucket._tail_packs(many, 1000)).tolist() == list(range(16))


def test_a_changed_setting_that_does_not_apply_leaves_bins_and_plan_current(tmp_path):
    """At or below the setting the bins are those of no partitioning, so changing it there rebuilds nothing;
    past it, bucket rebuilds, names the setting, and says how many partitions it packed."""
    small = _config(tmp_path / "work", partition=5000)
    _write_manifest(small.work_dir, n=4600)
    bucket.run(small)
    plan.run(small)
    lower = _config(tmp_path / "work", partition=4700)  # still above the ok samples: nothing to redo
    assert bucket.run(lower).skipped and plan.run(lower).skipped
    past = _config(tmp_path / "work", partition=PART)
    result = bucket.run(past)
    assert not result.skipped
    assert any(line.startswith("packed in 5 partitions of at most 1,000 ok samples") for line in result.summary)
    assert "packing.partition_samples" in bucket.read_bins_meta(past)["settings"]
    with pytest.raises(Exception, match=r"packing\.partition_samples 1000 -> 2000"):
        plan.run(_config(tmp_path / "work", partition=2000))  # past it too: another partitioning, stale bins


def test_a_killed_partitioned_plans_scratch_is_removed_by_the_next_plan_partitioned_or_not(tmp_path):
    config = _config(tmp_path / "work", partition=5000)
    _write_manifest(config.work_dir, n=4600)
    scratch = config.work_dir / "plan-scratch"
    scratch.mkdir(parents=True)
    for name in ("indexes.npy", "sample_index.npy", "token_len.npy"):  # what a kill -9 mid-plan leaves
        (scratch / name).write_bytes(b"\0" * 64)
    bucket.run(config)
    plan.run(config)
    assert not scratch.exists()
