"""A mixture through the real stages (issue 27): three sources scanned once, weighted twice.

Three small real sources (images, text, video) are scanned once; bucket / plan / write run with the
weights 0.5 / 0.3 / 0.2, then 0.2 / 0.2 / 0.6 without a rescan. Each source's packed count is checked
against the weights' arithmetic, and every sample's use count against what megatron-energon's own
loader reads from the written shards, never against the plan's arrays alone.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from megatron.energon import WorkerConfig, get_savable_loader

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.errors import ConfigError, ShardError
from vlmpack_offline.inspect_pack import summarize
from vlmpack_offline.loader import PackEncoder, PackTaskEncoder
from vlmpack_offline.loader.task_encoder import train_dataset
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.packed_settings import written_mixture
from vlmpack_offline.stages import bucket, plan, scan, verify, write
from vlmpack_offline.synthetic.shards import generate_source

pytestmark = pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")

SIZES = {"img": 48, "txt": 60, "vid": 12}
KINDS = {"img": "image", "txt": "text", "vid": "video"}


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sources")
    for name, n in SIZES.items():
        generate_source(root / name, KINDS[name], n_samples=n, seed=len(name) + n, samples_per_shard=16)
    return root


def _config(root: Path, src: Path, processor: Path, weights: dict[str, float] | None = None, **sections) -> object:
    weights = weights or {"img": 0.5, "txt": 0.3, "vid": 0.2}
    raw = {
        "data": {"sources": [{"name": n, "wds_dir": str(src / n), "weight": w} for n, w in weights.items()],
                 "work_dir": str(root / "work"), "packed_wds_dir": str(root / "packed")},
        "sample": {"max_token_len": 2048},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor)}},
        "video": {"max_pixels": 50176},
    }
    for name, values in sections.items():
        raw.setdefault(name, {}).update(values)
    return config_from_dict(raw, source="test")


def _run(config) -> dict:
    results = {stage.__name__.rsplit(".", 1)[-1]: stage.run(config) for stage in (scan, bucket, plan, write)}
    assert all(r.exit_code == 0 for r in results.values()), results
    return results


def _largest_remainder(weights: list[float], total: int) -> list[int]:
    exact = [w / sum(weights) * total for w in weights]
    floor = [math.floor(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: -(exact[i] - floor[i]))[: total - sum(floor)]:
        floor[i] += 1
    return floor


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
    assert not first["scan"].skipped
    total = sum(SIZES.values())
    for weights in ({"img": 0.5, "txt": 0.3, "vid": 0.2}, {"img": 0.2, "txt": 0.2, "vid": 0.6}):
        config = _config(tmp_path, sources, qwen25_processor_dir, weights)
        results = _run(config)
        assert results["scan"].skipped or weights["img"] == 0.5  # the second weighting never rescans
        mixture = written_mixture(config.packed_wds_dir)
        packed = {row["name"]: row["packed"] for row in mixture["sources"]}
        assert list(packed.values()) == _largest_remainder(list(weights.values()), total)
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
                                                                              qwen25_processor_dir):
    config = _config(tmp_path, sources, qwen25_processor_dir)
    scan.run(config)
    with Manifest(manifest_path(config.work_dir)) as manifest:
        shards = manifest.shards()
        ids = [s.id for s in manifest.iter_samples("ok")]
    assert {s.source for s in shards} == set(SIZES)
    assert all(s.shard.startswith(f"{s.source}/") for s in shards)
    assert Counter(i.split("/", 1)[0] for i in ids) == Counter(SIZES)


def test_repeat_and_epochs_use_every_sample_as_its_rule_says(tmp_path, sources, qwen25_processor_dir):
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


def test_a_source_with_no_shards_or_nothing_packable_is_one_line_naming_it(tmp_path, sources, qwen25_processor_dir):
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


def test_verify_names_a_source_whose_written_count_disagrees_with_the_plan(tmp_path, sources, qwen25_processor_dir):
    config = _config(tmp_path, sources, qwen25_processor_dir)
    _run(config)
    path = config.packed_wds_dir / ".nv-meta" / "vlmpack.json"
    document = json.loads(path.read_text())
    document["mixture"]["sources"][0]["packed"] += 1
    path.write_text(json.dumps(document))
    result = verify.run(config)
    assert result.exit_code == 1 and any("source 'img'" in line for line in result.summary)
