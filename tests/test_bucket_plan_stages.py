"""bucket -> plan -> stats on small real manifests built in tmp_path.

Manifests are written through ``Manifest.write_shard`` (the scan's writer), so
these tests do not depend on the scan stage.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from vlmpack_offline.cli import cli
from vlmpack_offline.config import config_from_dict
from vlmpack_offline.errors import ConfigError, PlanError, StaleArtifactError
from vlmpack_offline.manifest import Manifest, SampleRecord, ShardRecord, manifest_path
from vlmpack_offline.plan_file import (
    Pack,
    export_jsonl,
    plan_path,
    read_plan,
    read_plan_arrays,
    read_plan_meta,
)
from vlmpack_offline.stages import bucket, plan, stats
from vlmpack_offline.stats import PANELS, PackStats, stats_figure

CAPACITY = 1000


def _write_manifest(
    work_dir, *, n=120, seed=0, drops=("bad_json", "overlong"), kinds=("text", "image", "video")
) -> dict[str, int]:
    """Random ok samples over the media types plus a few drops; returns {id: token_len} of ok samples."""
    rng = np.random.default_rng(seed)
    ok = {}
    with Manifest(manifest_path(work_dir)) as manifest:
        for shard_no in range(2):
            shard = f"part-{shard_no:03d}.tar"
            records = []
            for seq in range(n // 2):
                kind = kinds[int(rng.integers(len(kinds)))]
                length = int(rng.integers(1, CAPACITY + 1))
                rec = SampleRecord(
                    id=f"{shard}/k{seq}", shard=shard, seq=seq, key=f"k{seq}", media_type=kind,
                    token_len=length, media_tokens=0 if kind == "text" else length // 2,
                    n_images=int(kind == "image"), n_videos=int(kind == "video"), members=(("json", 0, 10),),
                    encoder_patches=0 if kind == "text" else 2 * length,
                    encoder_attention=0 if kind == "text" else (2 * length) ** 2,
                )
                records.append(rec)
                ok[rec.id] = length
            for j, reason in enumerate(drops):
                records.append(SampleRecord(
                    id=f"{shard}/bad{j}", shard=shard, seq=n + j, key=f"bad{j}", media_type="text",
                    token_len=0, media_tokens=0, n_images=0, n_videos=0, members=(), status=reason, error="x",
                ))
            manifest.write_shard(ShardRecord(shard=shard, path=shard, size=1, mtime_ns=1, n_samples=len(records)),
                                 records)
        manifest.set_meta({"fingerprint": f"scan-{seed}-{n}"})
    return ok


def _config(tmp_path, **sections):
    raw = {"data": {"work_dir": str(tmp_path / "work")}, "sample": {"max_token_len": CAPACITY}}
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return config_from_dict(raw, source="test")


def _run_all(config):
    return bucket.run(config), plan.run(config)


def test_plan_holds_every_ok_sample_once_within_capacity(tmp_path):
    config = _config(tmp_path)
    ok = _write_manifest(config.work_dir)
    _run_all(config)
    packs = list(read_plan(config.work_dir))
    ids = [sid for pack in packs for sid in pack.sample_ids]
    assert sorted(ids) == sorted(ok)
    assert [p.pack_id for p in packs] == list(range(len(packs)))
    for pack in packs:
        assert pack.total_token_len <= CAPACITY
        assert list(pack.sample_token_lens) == [ok[s] for s in pack.sample_ids]
        assert list(pack.sample_token_lens) == sorted(pack.sample_token_lens, reverse=True)
        assert pack.media_type in {"text", "image", "video"}


def test_same_inputs_give_byte_identical_bins_and_plan(tmp_path):
    outputs = []
    for run_dir in ("a", "b"):
        config = _config(tmp_path / run_dir)
        _write_manifest(config.work_dir)
        _run_all(config)
        files = sorted((config.work_dir / "bins").iterdir()) + [plan_path(config.work_dir)]
        outputs.append({f.name: f.read_bytes() for f in files})
    assert outputs[0] == outputs[1]


def test_rerun_is_a_noop_and_config_change_reruns(tmp_path):
    config = _config(tmp_path)
    _write_manifest(config.work_dir)
    _run_all(config)
    before = plan_path(config.work_dir).stat().st_mtime_ns
    again_bucket, again_plan = _run_all(config)
    assert again_bucket.skipped and again_plan.skipped
    assert plan_path(config.work_dir).stat().st_mtime_ns == before
    other = _config(tmp_path, packing={"algorithm": "first_fit_decreasing"})
    with pytest.raises(StaleArtifactError, match=r"bins was built from other inputs \(settings that changed since: "
                                                 r"packing\.algorithm \"best_fit_decreasing\" -> "
                                                 r"\"first_fit_decreasing\"\): rerun `vlmpack bucket`"):
        plan.run(other)  # bins were built under another packing config: the key, both values, the stage to rerun
    assert not bucket.run(other).skipped
    assert not plan.run(other).skipped
    # what only the plan reads (order, step balancing, costs) reruns the plan on the same bins
    for sections in ({"packing": {"algorithm": "first_fit_decreasing", "seed": 7}},
                     {"packing": {"algorithm": "first_fit_decreasing", "cost": {"token": 1.0}},
                      "parallel": {"data_parallel_size": 2, "loader_workers": 1}}):
        replanned = _config(tmp_path, **sections)
        assert bucket.run(replanned).skipped
        assert not plan.run(replanned).skipped


def test_new_manifest_makes_bins_stale(tmp_path):
    config = _config(tmp_path)
    _write_manifest(config.work_dir)
    _run_all(config)
    with Manifest(manifest_path(config.work_dir)) as manifest:
        manifest.set_meta({"fingerprint": "a-new-scan"})
    with pytest.raises(StaleArtifactError, match=r"the manifest was scanned again since\): rerun `vlmpack bucket`"):
        plan.run(config)
    with pytest.raises(StaleArtifactError):
        stats.run(config)


def test_reading_the_plan_against_another_manifest_is_refused(tmp_path):
    config = _config(tmp_path)
    _write_manifest(config.work_dir)
    _run_all(config)
    with Manifest(manifest_path(config.work_dir)) as manifest:
        manifest.set_meta({"fingerprint": "a-new-scan"})
    with pytest.raises(StaleArtifactError, match="rerun `vlmpack bucket` and `vlmpack plan`"):
        next(read_plan(config.work_dir))  # ids are resolved from the manifest's ok rows: they must be the planned ones


def test_bucket_drops_samples_over_capacity_as_overlong(tmp_path):
    config = _config(tmp_path)
    ok = _write_manifest(config.work_dir, drops=("bad_json",))
    _run_all(config)
    assert not (config.work_dir / "bins" / "overlong.jsonl").read_text()
    small = _config(tmp_path, sample={"max_token_len": CAPACITY // 2}, scan={"max_drop_ratio": 1.0})  # cuts on purpose
    result_bucket, _ = _run_all(small)
    report = [json.loads(line) for line in (small.work_dir / "bins" / "overlong.jsonl").read_text().splitlines()]
    too_long = {sid for sid, n in ok.items() if n > CAPACITY // 2}
    assert {r["id"] for r in report} == too_long and too_long
    assert result_bucket.counts["dropped_overlong"] == len(too_long)
    first = report[0]
    assert first == {"id": first["id"], "status": "overlong", "token_len": ok[first["id"]],
                     "error": f"sample is too long ({ok[first['id']]} > {CAPACITY // 2} tokens): "
                              "raise sample.max_token_len or leave it dropped"}
    packed = [sid for pack in read_plan(small.work_dir) for sid in pack.sample_ids]
    assert sorted(packed + [r["id"] for r in report]) == sorted(ok)
    meta = read_plan_meta(small.work_dir)
    assert meta["drops"] == {"bad_json": 2, "overlong": len(too_long)}
    assert meta["n_samples"] == len(packed)


def test_plan_exports_readable_jsonl(tmp_path):
    config = _config(tmp_path)
    _write_manifest(config.work_dir)
    _run_all(config)
    out = export_jsonl(config.work_dir)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [Pack.from_json(line) for line in lines] == list(read_plan(config.work_dir))
    assert all(line["total_token_len"] == sum(line["sample_token_lens"]) for line in lines)


def test_val_split_by_count_and_by_ratio(tmp_path):
    config = _config(tmp_path, split={"val_packs": 3})
    _write_manifest(config.work_dir)
    _run_all(config)
    splits = [p.split for p in read_plan(config.work_dir)]
    assert splits.count("val") == 3 and splits[-3:] == ["val"] * 3
    ratio = _config(tmp_path, split={"val_ratio": 0.25})
    plan.run(ratio)
    splits = [p.split for p in read_plan(ratio.work_dir)]
    assert splits.count("val") == round(0.25 * len(splits))


def test_a_balanced_plan_writes_slots_of_near_equal_cost_rank_major(tmp_path):
    ranks, workers = 4, 2
    config = _config(tmp_path, parallel={"data_parallel_size": ranks, "loader_workers": workers},
                     split={"val_packs": 3})
    _write_manifest(config.work_dir, n=400)
    result = _run_all(config)[-1]
    meta, arrays = read_plan_meta(config.work_dir), read_plan_arrays(config.work_dir)
    schedule = meta["schedule"]
    n, rest = schedule["packs_per_rank"], schedule["unscheduled"]
    n_train = meta["n_train_packs"]
    assert n % workers == 0 and ranks * n + rest == n_train and rest < ranks * workers
    train = arrays.cost[:n_train]
    table = train[: ranks * n].reshape(ranks, n)  # [rank, slot]: rank-major
    ranked = np.sort(train[: ranks * n])
    # every slot holds ranks consecutive packs of the cost order, so no rank's pack is far from another's
    assert sorted(tuple(np.sort(table[:, j])) for j in range(n)) == [tuple(ranked[i : i + ranks])
                                                                    for i in range(0, len(ranked), ranks)]
    assert list(table[0]) != sorted(table[0])  # the slots themselves are shuffled
    balance = meta["balance"]
    assert balance["balanced"]["max"] <= balance["random order"]["max"]
    assert any(line.startswith(f"balanced for {ranks} data-parallel ranks") for line in result.summary)
    assert any("Qwen2.5-VL-7B-sized defaults" in line for line in result.summary)  # defaults said, not silent


def test_the_older_balance_world_size_is_an_alias_of_data_parallel_size(tmp_path):
    config = _config(tmp_path, packing={"balance_world_size": 2}, parallel={"loader_workers": 1})
    assert config.data_parallel_size == 2
    with pytest.raises(ConfigError, match="disagree"):
        _config(tmp_path, packing={"balance_world_size": 2}, parallel={"data_parallel_size": 4})


@pytest.mark.parametrize(("section", "match"), [
    ({"data_parallel_size": 0}, "data_parallel_size must be a positive integer"),
    ({"data_parallel_size": -8}, "data_parallel_size must be a positive integer"),
    ({"data_parallel_size": 8, "micro_batches_per_step": 0}, "micro_batches_per_step must be a positive integer"),
    ({"data_parallel_size": 8, "loader_workers": -1}, "loader_workers must be a positive integer"),
])
def test_bad_parallel_sizes_are_refused_naming_the_setting(tmp_path, section, match):
    with pytest.raises(ConfigError, match=match):
        _config(tmp_path, parallel=section)


def test_more_ranks_than_packs_is_a_plan_error_naming_the_fix(tmp_path):
    config = _config(tmp_path, parallel={"data_parallel_size": 4096})
    _write_manifest(config.work_dir, n=40)
    bucket.run(config)
    with pytest.raises(PlanError, match="fewer than one balanced block .*data_parallel_size 4096"):
        plan.run(config)


def test_group_by_none_mixes_media_types(tmp_path):
    config = _config(tmp_path, packing={"group_by": "none"})
    ok = _write_manifest(config.work_dir)
    _run_all(config)
    packs = list(read_plan(config.work_dir))
    assert {p.media_type for p in packs} == {"mixed"}
    assert sorted(s for p in packs for s in p.sample_ids) == sorted(ok)


def test_a_media_type_beyond_text_image_video_gets_its_own_packs(tmp_path):
    config = _config(tmp_path)
    ok = _write_manifest(config.work_dir, kinds=("image", "audio"))
    _run_all(config)
    packs = list(read_plan(config.work_dir))
    assert {p.media_type for p in packs} == {"image", "audio"}
    assert sorted(s for p in packs for s in p.sample_ids) == sorted(ok)


def test_limits_hold_in_the_plan(tmp_path):
    config = _config(tmp_path, packing={"max_samples_per_pack": 2, "max_media_tokens_per_pack": 600})
    _write_manifest(config.work_dir)
    _run_all(config)
    for pack in read_plan(config.work_dir):
        assert len(pack.sample_ids) <= 2
        assert pack.media_tokens <= 600 or len(pack.sample_ids) == 1


def test_stats_writes_png_and_json_with_drops(tmp_path):
    config = _config(tmp_path)
    ok = _write_manifest(config.work_dir)
    _run_all(config)
    (config.work_dir / "stats.json").unlink()
    result = stats.run(config)
    numbers = json.loads((config.work_dir / "stats.json").read_text())
    assert (config.work_dir / "stats.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert numbers["png_panels"] == ["token length", "pack fill per media group", "pack cost", "samples per pack",
                                     "drops by reason", "step balance"]
    assert numbers["samples"] == len(ok)
    assert numbers["packs"] == read_plan_meta(config.work_dir)["n_packs"]
    assert numbers["drops"] == {"bad_json": 2, "overlong": 2}
    assert numbers["lower_bound"] <= numbers["packs"]
    assert numbers["fill_ratio"] == pytest.approx(sum(ok.values()) / (numbers["packs"] * CAPACITY))
    assert any("fill ratio" in line for line in result.summary)
    assert stats.run(config).skipped


def test_stats_figure_panels_show_capacity_groups_sizes_and_drops(tmp_path):
    config = _config(tmp_path, sample={"max_token_len": CAPACITY // 2}, scan={"max_drop_ratio": 1.0})
    _write_manifest(config.work_dir, drops=("bad_json",))
    _run_all(config)
    plan_arrays = read_plan_arrays(config.work_dir)
    done = read_plan_meta(config.work_dir)
    numbers = {k: v for k, v in json.loads((config.work_dir / "stats.json").read_text()).items()
               if k not in ("plan_fingerprint", "png_panels")}
    fig = stats_figure(PackStats(**numbers), plan_arrays.token_len, plan_arrays.pack_totals,
                       pack_groups=plan_arrays.group, group_names=plan_arrays.group_names,
                       pack_sizes=plan_arrays.pack_sizes, drop_lengths=np.array([CAPACITY]),
                       pack_costs=plan_arrays.cost)
    length, fill, cost, sizes, drops, steps = fig.axes
    assert [ax.get_title().split(" (")[0] for ax in fig.axes] == list(PANELS)
    assert [line.get_xdata()[0] for line in length.get_lines()] == [CAPACITY // 2]  # the capacity line
    assert {t.get_text().split(":")[0] for t in fill.get_legend().get_texts()} == {"text", "image", "video"}
    assert sum(p.get_height() for p in sizes.patches) == done["n_packs"]
    assert sorted(t.get_text() for t in drops.get_yticklabels()) == ["bad_json", "overlong"]
    assert sorted(p.get_width() for p in drops.patches) == sorted(done["drops"].values())
    assert {t.get_text().split(":")[0] for t in cost.get_legend().get_texts()} == {"text", "image", "video"}
    assert steps.get_title() == "step balance (no schedule)"  # planned without data_parallel_size


def test_stats_show_cost_per_pack_and_the_balance_of_every_step(tmp_path):
    config = _config(tmp_path, parallel={"data_parallel_size": 4, "loader_workers": 1})
    _write_manifest(config.work_dir, n=400)
    _run_all(config)
    (config.work_dir / "stats.json").unlink()
    result = stats.run(config)
    numbers = json.loads((config.work_dir / "stats.json").read_text())
    meta = read_plan_meta(config.work_dir)
    assert numbers["step_balance"] == meta["balance"]  # vlmpack stats recomputes what the plan reported
    assert numbers["cost"]["p1"] <= 1.0 <= numbers["cost"]["max"]
    assert any(line.startswith("step balance (balanced)") for line in result.summary)
    assert any(line.startswith("cost/pack") for line in result.summary)


def test_cli_runs_the_stages_and_every_command_has_help(tmp_path):
    config_path = tmp_path / "c.yaml"
    config_path.write_text(f"data:\n  work_dir: {tmp_path / 'work'}\nsample:\n  max_token_len: {CAPACITY}\n")
    _write_manifest(tmp_path / "work")
    runner = CliRunner()
    for name in ("bucket", "plan", "stats"):
        helped = runner.invoke(cli, [name, "--help"])
        assert helped.exit_code == 0 and "--config" in helped.output and len(helped.output.splitlines()) > 3
        done = runner.invoke(cli, [name, "--config", str(config_path)])
        assert done.exit_code == 0, done.output
    assert "lower bound" in done.output
    again = runner.invoke(cli, ["bucket", "--config", str(config_path)])
    assert "up to date" in again.output


def test_rerun_after_a_crash_gives_the_identical_files(tmp_path):
    clean = _config(tmp_path / "clean")
    _write_manifest(clean.work_dir)
    _run_all(clean)
    crashed = _config(tmp_path / "crashed")
    _write_manifest(crashed.work_dir)
    _run_all(crashed)
    # What a kill -9 mid-write leaves: half-written temporaries, a truncated plan, no meta marking it complete.
    plan_file = plan_path(crashed.work_dir)
    plan_file.write_bytes(plan_file.read_bytes()[:100])
    (crashed.work_dir / "pack_plan.meta.json").unlink()
    (crashed.work_dir / "pack_plan.npz.tmp").write_text("{partial")
    (crashed.work_dir / "bins" / "meta.json").unlink()
    (crashed.work_dir / "bins" / "image.indexes.npy").write_bytes(b"junk")
    bucket_again, plan_again = _run_all(crashed)
    assert not bucket_again.skipped and not plan_again.skipped
    for name in ("pack_plan.npz", "pack_plan.meta.json", "bins/image.indexes.npy", "bins/meta.json"):
        assert (crashed.work_dir / name).read_bytes() == (clean.work_dir / name).read_bytes(), name
