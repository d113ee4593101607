"""A new ``sample.max_token_len`` reruns bucket and plan only: the scan is a no-op, and every
input sample is packed or dropped exactly once at each capacity (issue 11)."""

from __future__ import annotations

import json

from test_scan_stage import _write_config

from vlmpack_offline.config import load_config
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.plan_file import read_plan, read_plan_meta
from vlmpack_offline.stages import bucket, plan, scan, stats
from vlmpack_offline.synthetic.shards import generate_dataset


def _packed_and_overlong(config) -> tuple[list[str], list[dict]]:
    packed = [sid for pack in read_plan(config.work_dir) for sid in pack.sample_ids]
    report = (config.work_dir / "bins" / "overlong.jsonl").read_text().splitlines()
    return packed, [json.loads(line) for line in report]


def test_capacity_change_reruns_bucket_and_plan_not_the_scan(tmp_path, qwen25_processor_dir):
    wds = tmp_path / "wds"
    generate_dataset(wds, seed=3, n_shards=2, samples_per_shard=6, include_faults=True, video=False)
    big = load_config(_write_config(tmp_path, wds, qwen25_processor_dir))
    first_scan = scan.run(big)
    with Manifest(manifest_path(big.work_dir)) as manifest:
        statuses = manifest.status_counts()
        ok_lens = {s.id: s.token_len for s in manifest.iter_samples("ok")}
    assert "overlong" not in statuses  # the scan applies no capacity; the 20k-word fault is ok with its length
    n_input = first_scan.counts["samples"]
    scan_drops = {k: v for k, v in statuses.items() if k != "ok"}

    small_cap = sorted(ok_lens.values())[len(ok_lens) // 2]  # about half the samples become overlong
    small = load_config(_write_config(tmp_path, wds, qwen25_processor_dir, sample={"max_token_len": small_cap}))
    again = scan.run(small)
    assert again.skipped and "0 scanned now" in " ".join(again.summary)

    overlong_counts = []
    for config in (big, small):
        assert not bucket.run(config).skipped and not plan.run(config).skipped
        cap = config.sample.max_token_len
        packed, report = _packed_and_overlong(config)
        dropped_ids = [r["id"] for r in report]
        assert sorted(packed + dropped_ids) == sorted(ok_lens)  # every ok sample once: packed xor overlong
        assert {r["id"] for r in report} == {sid for sid, n in ok_lens.items() if n > cap}
        for r in report:
            assert r["error"] == (f"sample is too long ({ok_lens[r['id']]} > {cap} tokens): "
                                  "raise sample.max_token_len or leave it dropped")
        meta = read_plan_meta(config.work_dir)
        assert meta["drops"] == {**scan_drops, "overlong": len(report)}
        assert n_input == len(packed) + sum(meta["drops"].values())  # input = packed + dropped
        numbers = stats.run(config).counts
        assert numbers["packs"] == meta["n_packs"]
        stats_json = json.loads((config.work_dir / "stats.json").read_text())
        assert stats_json["drops"]["overlong"] == len(report) and stats_json["samples"] == len(packed)
        overlong_counts.append(len(report))
    assert overlong_counts[0] < overlong_counts[1]
