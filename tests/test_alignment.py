"""Alignment for the training layout: bucket and plan pack each sub-sample at its padded length.

Under context parallelism Megatron pads every sub-sample to a multiple of 2*cp (and cp*tp with
sequence parallelism); padding added after planning would push full packs past capacity.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.errors import ConfigError, StaleArtifactError
from vlmpack_offline.manifest import Manifest, SampleRecord, ShardRecord, manifest_path
from vlmpack_offline.packing.alignment import Alignment, parallel_multiple
from vlmpack_offline.plan_file import read_plan, read_plan_meta
from vlmpack_offline.stages import bucket, plan
from vlmpack_offline.stages._ok_samples import MEDIA_TYPES, OkSamples


@pytest.mark.parametrize(
    ("cp", "tp", "sp", "multiple"),
    [
        (1, 1, False, 1),  # no context parallelism: nothing to pad
        (2, 1, False, 4),  # 2*cp chunks, load-balanced
        (4, 1, False, 8),
        (1, 4, False, 1),  # tensor parallelism alone splits heads, not tokens
        (1, 4, True, 4),  # sequence parallelism splits tokens over the tp ranks
        (2, 4, False, 4),
        (2, 4, True, 8),  # lcm(2*2, 2*4)
        (3, 2, True, 6),  # lcm(6, 6)
        (2, 3, True, 12),  # lcm(4, 6)
    ],
)
def test_the_multiple_is_megatron_bridges(cp, tp, sp, multiple):
    assert parallel_multiple(cp, tp, sp) == multiple


def test_megatron_bridges_golden_case():
    # Megatron-Bridge's own test: lengths [5, 4] with m = 4 are padded to [8, 4]
    assert Alignment(context_parallel_size=2).aligned(np.array([5, 4])).tolist() == [8, 4]


def _manifest(work_dir, lengths, kind="text"):
    with Manifest(manifest_path(work_dir)) as manifest:
        records = [
            SampleRecord(id=f"a.tar/k{i}", shard="a.tar", seq=i, key=f"k{i}", media_type=kind, token_len=n,
                         media_tokens=0, n_images=0, n_videos=0, members=(("json", 0, 10),))
            for i, n in enumerate(lengths)
        ]
        manifest.write_shard(ShardRecord(shard="a.tar", path="a.tar", size=1, mtime_ns=1, n_samples=len(records)),
                             records)
        manifest.set_meta({"fingerprint": "scan-fixed"})


def _config(tmp_path, capacity, **sections):
    raw = {"data": {"work_dir": str(tmp_path / "work")}, "sample": {"max_token_len": capacity}, **sections}
    return config_from_dict(raw, source="test.yaml")


def _aligned_pack_totals(config):
    m = config.alignment.multiple
    return [sum(-(-n // m) * m for n in pack.sample_token_lens) for pack in read_plan(config.work_dir)]


def test_packs_hold_the_padded_lengths_within_capacity(tmp_path):
    # 5 + 4 + 3 = 12 tokens fill one pack of 12 unaligned; with cp=2 they take 8 + 4 + 4 = 16 slots
    plain = _config(tmp_path / "plain", 12)
    cp2 = _config(tmp_path / "cp2", 12, parallel={"context_parallel_size": 2})
    for config in (plain, cp2):
        _manifest(config.work_dir, [5, 4, 3])
        bucket.run(config)
        plan.run(config)
    assert [p.sample_token_lens for p in read_plan(plain.work_dir)] == [(5, 4, 3)]
    assert sorted(_aligned_pack_totals(cp2)) == [4, 12]  # [5, 4 -> 8 + 4] and [3 -> 4]: two packs, not one
    assert sorted(n for p in read_plan(cp2.work_dir) for n in p.sample_token_lens) == [3, 4, 5]  # real lengths kept
    assert read_plan_meta(cp2.work_dir)["alignment"]["multiple"] == 4


def test_a_sample_that_fits_only_unpadded_is_overlong_with_its_aligned_length(tmp_path):
    config = _config(tmp_path, 12, parallel={"context_parallel_size": 4})  # m = 8
    _manifest(config.work_dir, [10, 8, 3])
    result = bucket.run(config)
    assert result.counts["dropped_overlong"] == 1
    (line,) = (tmp_path / "work" / "bins" / "overlong.jsonl").read_text().splitlines()
    drop = json.loads(line)
    assert drop["id"] == "a.tar/k0" and drop["status"] == "overlong" and drop["token_len"] == 10
    assert "10 tokens, 16 aligned to a multiple of 8 > 12" in drop["error"]
    assert any("context_parallel_size=4" in s for s in result.summary)


def test_fill_and_lower_bound_count_padding(tmp_path):
    config = _config(tmp_path, 12, parallel={"context_parallel_size": 2})
    _manifest(config.work_dir, [5, 4, 3, 7])  # aligned 8 + 4 + 4 + 8 = 24 slots: bound 2 packs
    bucket.run(config)
    plan.run(config)
    stats = json.loads((config.work_dir / "stats.json").read_text())
    assert stats["tokens"] == 19 and stats["padding_tokens"] == 5 and stats["alignment"] == 4
    assert stats["lower_bound"] == 2 and stats["packs"] == 2 and stats["fill_ratio"] == 1.0


@pytest.mark.parametrize(
    "layout",
    [
        {},
        {"parallel": {"context_parallel_size": 2}},
        {"parallel": {"context_parallel_size": 4}},
        {"parallel": {"context_parallel_size": 8, "tensor_model_parallel_size": 2, "sequence_parallel": True}},
        {"parallel": {"tensor_model_parallel_size": 8, "sequence_parallel": True}},
        {"packing": {"align_to": 64}},
        {"packing": {"align_to": 24, "max_samples_per_pack": 6}, "parallel": {"context_parallel_size": 3}},
        {"packing": {"algorithm": "first_fit_decreasing"}, "parallel": {"context_parallel_size": 2}},
        {"packing": {"algorithm": "hashbucket"}, "parallel": {"context_parallel_size": 4}},
    ],
)
def test_no_pack_exceeds_capacity_after_padding_on_a_mixed_set(layout):
    rng = np.random.default_rng(7)
    n, capacity = 5000, 4096
    lengths = np.concatenate([rng.integers(1, 64, n // 5), rng.integers(64, 4097, n - n // 5)]).astype(np.int32)
    codes = rng.integers(0, 3, n).astype(np.int8)
    samples = OkSamples(token_len=lengths, media_tokens=(lengths // 3).astype(np.int32), media_code=codes,
                        media_names=MEDIA_TYPES)
    raw = {"sample": {"max_token_len": capacity}, **layout}
    config = config_from_dict(raw)
    m = config.alignment.multiple
    aligned = -(-lengths.astype(np.int64) // m) * m
    seen = np.zeros(n, np.int64)
    for indexes, offsets, _ in bucket.build_bins(samples, config).values():
        np.add.at(seen, indexes, 1)
        totals = np.add.reduceat(aligned[indexes], offsets[:-1])
        assert totals.max() <= capacity
    assert (seen == (aligned <= capacity)).all()  # each fitting sample in exactly one pack, the rest overlong


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_parallel_unset_builds_what_explicit_defaults_build(tmp_path):
    lengths = list(np.random.default_rng(3).integers(1, 300, 200))
    outputs = []
    for name, extra in [("unset", {}), ("defaults", {"parallel": {"context_parallel_size": 1,
                                                                  "tensor_model_parallel_size": 1,
                                                                  "sequence_parallel": False}})]:
        config = _config(tmp_path / name, 1000, **extra)
        _manifest(config.work_dir, [int(n) for n in lengths])
        bucket.run(config)
        plan.run(config)
        outputs.append(_files(config.work_dir / "bins") | {"plan": (config.work_dir / "pack_plan.npz").read_bytes()})
    assert outputs[0] == outputs[1]


def test_write_refuses_a_plan_aligned_for_another_layout(tmp_path):
    from vlmpack_offline.stages import write

    config = _config(tmp_path, 12, parallel={"context_parallel_size": 2})
    _manifest(config.work_dir, [5, 4, 3])
    bucket.run(config)
    plan.run(config)
    other = _config(tmp_path, 12, data={"work_dir": str(tmp_path / "work"), "packed_wds_dir": str(tmp_path / "out")})
    with pytest.raises(StaleArtifactError, match=r"parallel\.context_parallel_size 2 -> 1\): rerun `vlmpack bucket`"):
        write.run(other)


@pytest.mark.parametrize(
    ("sections", "message"),
    [
        ({"parallel": {"context_parallel_size": 0}}, r"parallel\.context_parallel_size must be a positive integer"),
        ({"parallel": {"tensor_model_parallel_size": -2}}, r"parallel\.tensor_model_parallel_size must be a positive"),
        ({"parallel": {"context_parallel_size": 1.5}}, r"`parallel\.context_parallel_size` = 1\.5 is not a valid int"),
        ({"packing": {"align_to": 0}}, r"packing\.align_to must be a positive integer"),
        ({"packing": {"align_to": "8"}}, r"`packing\.align_to` = '8' is not a valid int"),
        ({"packing": {"align_to": 6}, "parallel": {"context_parallel_size": 2}},
         r"packing\.align_to 6 is not a multiple of 4.*context_parallel_size 2"),
    ],
)
def test_a_bad_layout_is_a_config_error_naming_the_key(sections, message):
    with pytest.raises(ConfigError, match=message):
        config_from_dict(sections, source="test.yaml")
