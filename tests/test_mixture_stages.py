"""A mixture through the real stages (issue 27): three sources scanned once, weighted twice.

Three small real sources (images, text, video) are scanned once; bucket / plan / write run with the
weights 0.5 / 0.3 / 0.2, then 0.2 / 0.2 / 0.6 without a rescan. Each source's packed count is checked
against the weights' arithmetic, and every sample's use count against what megatron-energon's own
loader reads from the written shards, never against the plan's arrays alone.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from _largest_remainder import largest_remainder
from megatron.energon import WorkerConfig, get_savable_loader
from torch.utils.data import DataLoader

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.errors import ConfigError, ShardError
from vlmpack_offline.inspect_pack import summarize
from vlmpack_offline.loader import PackDataset, PackEncoder, PackTaskEncoder
from vlmpack_offline.loader.task_encoder import train_dataset
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.packed_settings import written_mixture, written_schedule
from vlmpack_offline.stages import bucket, plan, scan, verify, write
from vlmpack_offline.synthetic.shards import FAULT_REASONS, generate_dataset, generate_source

pytestmark = pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")

SIZES = {"img": 48, "txt": 60, "vid": 12}
KINDS = {"img": "image", "txt": "text", "vid": "video"}


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sources")
    for name, n in SIZES.items():
        generate_source(root / name, KINDS[name], n_samples=n, seed=len(name) + n, samples_per_shard=16)
    generate_dataset(root / "bad", n_shards=1, samples_per_shard=8, include_faults=True)  # one drop per reason
    return root


@pytest.fixture(scope="module")
def scanned(tmp_path_factory, sources, qwen25_processor_dir) -> Path:
    """The work_dir of one scan of img / txt / vid: tests copy it, so only weights and packing change."""
    root = tmp_path_factory.mktemp("scanned")
    assert scan.run(_config(root, sources, qwen25_processor_dir)).exit_code == 0
    return root / "work"


def _reuse(scanned: Path, root: Path) -> None:
    shutil.copytree(scanned, root / "work")


def _config(root: Path, src: Path, processor: Path, weights: dict[str, float] | None = None, **sections) -> object:
    weights = weights or {"img": 0.5, "txt": 0.3, "vid": 0.2}
    raw = {
        "data": {"sources": [{"name": n, "wds_dir": str(src / n), "weight": w} for n, w in weights.items()],
                 "work_dir": str(root / "work"), "packed_wds_dir": str(root / "packed")},
        "sample": {"max_token_len": 2048},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor)}},
        "video": {"min_pixels": 100352, "max_pixels": 100352},
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return config_from_dict(raw, source="test")


def _run(config) -> dict:
    results = {stage.__name__.rsplit(".", 1)[-1]: stage.run(config) for stage in (scan, bucket, plan, write)}
    assert all(r.exit_code == 0 for r in results.values()), results
    return results


def _energon_reads(packed: Path) -> Counter:
    """Sample ids of every train pack megatron-energon's own loader yields in one epoch, with multiplicity."""
    encoder = PackEncoder.from_packed_dir(packed)
    loader = get_savable_loader(train_dataset(packed, PackTaskEncoder(encoder), WorkerConfig(rank=0, world_size=1,
                                                                                               num_workers=0)))
    seen: Counter = Counter()
    n_train = written_mixture(packed)["train_packs"]
    for k, batch in enumerate(loader):
        if k == n_train:
            break
        assert len(set(batch.sample_ids)) == len(batch.sample_ids), "a pack holds two copies of one sample"
        seen.update(batch.sample_ids)
    return seen


def _planned_uses(root: Path) -> dict[str, int]:
    with Manifest(manifest_path(root / "work")) as manifest:
        ids = [s.id for s in manifest.iter_samples("ok")]
    return dict(zip(ids, np.load(root / "work" / "bins" / "uses.npy").tolist(), strict=True))


def test_weights_set_each_sources_count_and_a_new_weighting_reuses_the_scan(tmp_path, sources, qwen25_processor_dir):
    first = _run(_config(tmp_path, sources, qwen25_processor_dir))
    assert not first["scan"].skipped  # this test scans itself: the others reuse a copy of one scan
    total = sum(SIZES.values())
    for weights in ({"img": 0.5, "txt": 0.3, "vid": 0.2}, {"img": 0.2, "txt": 0.2, "vid": 0.6}):
        config = _config(tmp_path, sources, qwen25_processor_dir, weights)
        results = _run(config)
        assert results["scan"].skipped or weights["img"] == 0.5  # the second weighting never rescans
        mixture = written_mixture(config.packed_wds_dir)
        packed = {row["name"]: row["packed"] for row in mixture["sources"]}
        assert list(packed.values()) == largest_remainder(list(weights.values()), total)
        assert verify.run(config).exit_code == 0
        stats = json.loads((config.work_dir / "stats.json").read_text())
        assert [row["name"] for row in stats["mixture"]["sources"]] == list(SIZES)
        assert (config.work_dir / "mixture.png").is_file()
        assert all(name in summarize(config.packed_wds_dir) for name in SIZES)

        # every sample's uses, as energon reads them from the written tars (the split is all train)
        read = _energon_reads(config.packed_wds_dir)
        planned = _planned_uses(tmp_path)
        assert {i: read.get(i, 0) for i in planned} == planned
        assert Counter(i.split("/", 1)[0] for i in read.elements()) == Counter(packed)
        left_out = [i for i, n in planned.items() if n == 0]
        assert all(i.startswith("txt/") for i in left_out) == (weights["txt"] == 0.3)  # down-sampled: txt only


def test_ids_carry_the_source_name_and_the_manifest_records_each_shards_source(tmp_path, sources,
                                                                              qwen25_processor_dir, scanned):
    _reuse(scanned, tmp_path)
    config = _config(tmp_path, sources, qwen25_processor_dir)
    scan.run(config)
    with Manifest(manifest_path(config.work_dir)) as manifest:
        shards = manifest.shards()
        ids = [s.id for s in manifest.iter_samples("ok")]
    assert {s.source for s in shards} == set(SIZES)
    assert all(s.shard.startswith(f"{s.source}/") for s in shards)
    assert Counter(i.split("/", 1)[0] for i in ids) == Counter(SIZES)


def test_every_scanned_sample_is_used_k_times_or_dropped_with_its_reason_per_source(tmp_path, sources,
                                                                                   qwen25_processor_dir):
    weights = {"img": 0.4, "txt": 0.3, "vid": 0.2, "bad": 0.1}
    config = _config(tmp_path, sources, qwen25_processor_dir, weights, scan={"max_drop_ratio": 1.0})
    _run(config)
    rows = {row["name"]: row for row in json.loads((config.work_dir / "stats.json").read_text())["mixture"]["sources"]}
    with Manifest(manifest_path(config.work_dir)) as manifest:
        scanned = Counter(s.id.split("/", 1)[0] for s in manifest.iter_samples())
        unread = sum(s.n_unread for s in manifest.shards())
    for name, row in rows.items():
        used_or_left_out = sum(row["uses"].values())
        assert row["scanned"] == sum(row["dropped"].values()) + row["overlong"] + used_or_left_out
        assert row["scanned"] == scanned[name] + (unread if name == "bad" else 0)
    assert set(rows["bad"]["dropped"]) >= set(FAULT_REASONS) - {"overlong"}
    assert not any(rows[name]["dropped"] for name in SIZES)


def test_repeat_and_epochs_use_every_sample_as_its_rule_says(tmp_path, sources, qwen25_processor_dir, scanned):
    _reuse(scanned, tmp_path)
    config = _config(tmp_path, sources, qwen25_processor_dir, plan={"epochs": 2})
    config = dataclasses.replace(config, data=dataclasses.replace(config.data, sources=[
        dataclasses.replace(config.data.sources[0], weight=None, repeat=1.5),
        dataclasses.replace(config.data.sources[1], weight=None, count=20),
        dataclasses.replace(config.data.sources[2], weight=None),
    ]))
    _run(config)
    uses = _planned_uses(tmp_path)
    per = {name: [n for i, n in uses.items() if i.startswith(f"{name}/")] for name in SIZES}
    assert sum(per["img"]) == 2 * round(1.5 * SIZES["img"]) and set(per["img"]) <= {2, 3, 4}
    assert sum(per["txt"]) == 2 * 20
    assert set(per["vid"]) == {2}
    assert verify.run(config).exit_code == 0


def test_a_source_with_no_shards_or_nothing_packable_is_one_line_naming_it(tmp_path, sources, qwen25_processor_dir,
                                                                          scanned):
    empty = tmp_path / "empty"
    empty.mkdir()
    config = _config(tmp_path, sources, qwen25_processor_dir)
    broken = dataclasses.replace(config.data, sources=[*config.data.sources,
                                                       dataclasses.replace(config.data.sources[0], name="none",
                                                                           wds_dir=str(empty))])
    with pytest.raises(ShardError, match="source 'none'.*allow_empty_sources"):
        scan.run(dataclasses.replace(config, data=broken))
    allowed = dataclasses.replace(config, data=dataclasses.replace(broken, allow_empty_sources=True))
    assert any("source 'none'" in line for line in scan.run(allowed).summary)

    _reuse(scanned, tmp_path / "tiny")
    tiny = _config(tmp_path / "tiny", sources, qwen25_processor_dir, sample={"max_token_len": 200})  # no video fits
    scan.run(tiny)
    with pytest.raises(ConfigError, match="source 'vid' has no sample left to pack"):
        bucket.run(tiny)
    lenient = dataclasses.replace(tiny, data=dataclasses.replace(tiny.data, allow_empty_sources=True))
    assert any("'vid' has no sample left" in line for line in bucket.run(lenient).summary)


def test_two_sources_listing_one_shard_are_refused_naming_both(tmp_path, sources, qwen25_processor_dir):
    config = _config(tmp_path, sources, qwen25_processor_dir)
    twice = dataclasses.replace(config.data, sources=[*config.data.sources,
                                                      dataclasses.replace(config.data.sources[0], name="again")])
    with pytest.raises(ConfigError, match="sources 'img' and 'again' both list"):
        scan.run(dataclasses.replace(config, data=twice))


def test_verify_names_a_source_whose_written_count_disagrees_with_the_plan(tmp_path, sources, qwen25_processor_dir, scanned):
    _reuse(scanned, tmp_path)
    config = _config(tmp_path, sources, qwen25_processor_dir)
    _run(config)
    path = config.packed_wds_dir / ".nv-meta" / "vlmpack.json"
    document = json.loads(path.read_text())
    document["mixture"]["sources"][0]["packed"] += 1
    document["mixture"]["sources"][1]["uses"] = {"1": SIZES["txt"]}  # as if no text sample were left out
    path.write_text(json.dumps(document))
    result = verify.run(config)
    assert result.exit_code == 1
    assert any("source 'img'" in line and "sub-samples packed" in line for line in result.summary)
    assert any("source 'txt'" in line and "samples by uses" in line for line in result.summary)


def test_a_balanced_mixture_is_read_in_its_interleaved_order_rotated_per_epoch(tmp_path, sources,
                                                                              qwen25_processor_dir, scanned):
    _reuse(scanned, tmp_path)
    config = _config(tmp_path, sources, qwen25_processor_dir, sample={"max_token_len": 1024},
                     parallel={"data_parallel_size": 2, "loader_workers": 1},
                     scan={"max_drop_ratio": 1.0})  # a small capacity for many packs: it cuts the long samples
    _run(config)
    schedule = written_schedule(config.packed_wds_dir)
    assert schedule.step_order == "rotate"
    encoder = PackEncoder.from_packed_dir(config.packed_wds_dir)
    n = schedule.packs_per_rank
    orders = {}
    for epoch in (0, 1):
        for rank in (0, 1):
            dataset = PackDataset(config.packed_wds_dir, encoder, rank=rank, world_size=2)
            dataset.set_epoch(epoch)
            orders[epoch, rank] = [b.pack_id - rank * n for b in DataLoader(dataset, batch_size=None)]
        assert orders[epoch, 0] == orders[epoch, 1]  # both ranks read the same slot at every step
    first, second = orders[0, 0], orders[1, 0]
    shift = second.index(first[0])
    assert second == first[-shift:] + first[:-shift] if shift else second == first  # a rotation of the written order
