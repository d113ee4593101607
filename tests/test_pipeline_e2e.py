"""End to end with the real stages: generated shards -> scan -> bucket -> plan -> write -> verify -> loaders.

The issue-5 acceptance: packed shards written by ``vlmpack write`` from a generated
dataset (faults included), read through the energon ``PackTaskEncoder`` and through
the plain ``PackDataset``; every pack's lengths equal the plan's, and every input
sample is either in exactly one pack or in the manifest with its drop reason.
The pipeline runs once per module on a tiny dataset.
"""

from __future__ import annotations

import json
import tarfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from megatron.energon import WorkerConfig, get_loader, get_train_dataset, get_val_dataset

from vlmpack_offline.config import Config, config_from_dict
from vlmpack_offline.loader import IGNORE_INDEX, PackDataset, PackEncoder, PackTaskEncoder
from vlmpack_offline.manifest import Manifest, SampleRecord, manifest_path
from vlmpack_offline.plan_file import Pack, read_plan
from vlmpack_offline.stages import bucket, plan, scan, verify, write
from vlmpack_offline.synthetic.shards import expected_fault, generate_dataset
from vlmpack_offline.tario import split_key

pytestmark = pytest.mark.filterwarnings("ignore:'pin_memory' argument is set as true")

CAPACITY = 4096
TINY_VIDEO = {"min_pixels": 4 * 28 * 28, "max_pixels": 16 * 28 * 28, "min_frames": 4, "fps": 2.0}


@dataclass(frozen=True, slots=True, kw_only=True)
class Pipeline:
    config: Config
    src: Path  # the generated input shards live under here
    packs: dict[int, Pack]  # the plan, by pack_id
    samples: dict[str, SampleRecord]  # the manifest, ok and dropped, by id


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory, qwen25_processor_dir) -> Pipeline:
    """Generate 2 shards (10 good samples each + every fault), then run every stage once.

    Module-scoped, so the config is built like conftest's ``make_config`` (function-scoped) builds it.
    """
    root = tmp_path_factory.mktemp("pipeline_e2e")
    src = root / "src"
    generate_dataset(src, seed=3, n_shards=2, samples_per_shard=10, include_faults=True)
    config = config_from_dict(
        {
            "data": {
                "wds_dir": str(src),
                "work_dir": str(root / "work"),
                "packed_wds_dir": str(root / "packed"),
            },
            "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(qwen25_processor_dir)}},
            "sample": {"max_token_len": CAPACITY},
            "split": {"val_ratio": 0.25},
            "packed_wds": {"maxcount": 2},
            "video": TINY_VIDEO,
            "scan": {"max_drop_ratio": 1.0},  # one sample per fault on purpose: about a quarter dropped
        },
        source="test",
    )
    for stage in (scan, bucket, plan, write, verify):
        result = stage.run(config)
        assert result.exit_code == 0, (stage.__name__, result.summary)
    packs = {p.pack_id: p for p in read_plan(config.data.work_dir)}
    with Manifest(manifest_path(config.data.work_dir)) as manifest:
        samples = {s.id: s for s in manifest.iter_samples()}
    return Pipeline(config=config, src=src, packs=packs, samples=samples)


def _check_batch(batch, pipeline: Pipeline) -> None:
    """One loaded pack against its plan line and its samples' manifest rows."""
    pack = pipeline.packs[batch.pack_id]
    assert batch.sample_ids == pack.sample_ids
    assert tuple((batch.cu_seqlens[1:] - batch.cu_seqlens[:-1]).tolist()) == pack.sample_token_lens
    assert batch.input_ids.shape == batch.labels.shape == (1, pack.total_token_len)
    assert batch.position_ids.shape[-1] == pack.total_token_len
    rows = [pipeline.samples[sample_id] for sample_id in pack.sample_ids]
    assert batch.n_images_per_sample.tolist() == [r.n_images for r in rows]
    assert batch.n_videos_per_sample.tolist() == [r.n_videos for r in rows]
    for start, end in zip(batch.cu_seqlens[:-1].tolist(), batch.cu_seqlens[1:].tolist(), strict=True):
        assert batch.labels[0, start] == IGNORE_INDEX  # nothing predicts a sub-sample's first token
        assert (batch.labels[0, start:end] != IGNORE_INDEX).any()  # every sub-sample is trained on
        assert batch.position_ids[..., start].max() == 0


def _assert_each_pack_once(seen: list[int], pipeline: Pipeline) -> None:
    assert sorted(seen) == sorted(pipeline.packs)


def test_plan_has_train_and_val_packs_over_several_shards(pipeline):
    splits = Counter(p.split for p in pipeline.packs.values())
    assert splits["train"] > 0 and splits["val"] > 0
    assert len(list(pipeline.config.packed_wds_dir.glob("pretrain-*.tar"))) >= 2


def test_energon_train_and_val_yield_every_planned_pack_once_with_its_lengths(pipeline):
    config = pipeline.config
    task_encoder = PackTaskEncoder(PackEncoder(config))
    worker_config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    train = get_train_dataset(
        config.packed_wds_dir, batch_size=1, shuffle_buffer_size=None, max_samples_per_sequence=None,
        worker_config=worker_config, task_encoder=task_encoder, repeat=False,
    )  # fmt: skip
    val = get_val_dataset(
        config.packed_wds_dir, batch_size=1, worker_config=worker_config, task_encoder=task_encoder
    )
    seen = []
    for split, dataset in (("train", train), ("val", val)):
        for batch in get_loader(dataset):
            assert pipeline.packs[batch.pack_id].split == split
            _check_batch(batch, pipeline)
            seen.append(batch.pack_id)
    _assert_each_pack_once(seen, pipeline)


def test_plain_dataset_yields_every_planned_pack_once_with_its_lengths(pipeline):
    seen = []
    encoder = PackEncoder(pipeline.config)
    for split in ("train", "val"):
        for batch in PackDataset(pipeline.config.packed_wds_dir, encoder, split=split):  # 1 slot: nothing dropped
            _check_batch(batch, pipeline)
            assert pipeline.packs[batch.pack_id].split == split
            seen.append(batch.pack_id)
    _assert_each_pack_once(seen, pipeline)


def _input_sample_ids(src: Path) -> set[str]:
    """``<shard relpath>/<key>`` of every sample in the input tars, read with plain tarfile."""
    ids = set()
    for path in sorted(src.rglob("*.tar")):
        with tarfile.open(path) as tar:
            ids |= {f"{path.relative_to(src).as_posix()}/{split_key(name)[0]}" for name in tar.getnames()}
    return ids


def test_every_input_sample_is_in_exactly_one_pack_or_dropped_with_its_reason(pipeline):
    samples = pipeline.samples
    assert set(samples) == _input_sample_ids(pipeline.src)
    in_packs = Counter(sample_id for p in pipeline.packs.values() for sample_id in p.sample_ids)
    overlong_file = pipeline.config.work_dir / "bins" / "overlong.jsonl"
    overlong = {json.loads(line)["id"] for line in overlong_file.read_text().splitlines()}  # bucket's drops
    assert set(in_packs) == {i for i, s in samples.items() if s.status == "ok"} - overlong
    assert set(in_packs.values()) == {1}
    for pack in pipeline.packs.values():
        assert pack.sample_token_lens == tuple(samples[i].token_len for i in pack.sample_ids)
        assert pack.total_token_len <= CAPACITY
    reasons = Counter()
    for sample in samples.values():
        meant = expected_fault(sample.key)
        status = "overlong" if sample.id in overlong else sample.status
        if status == "overlong":
            assert sample.status == "ok" and sample.token_len > CAPACITY and meant in (None, "overlong"), sample
        else:
            assert status == (meant or "ok"), (sample.id, sample.status, sample.error)
        assert (sample.status == "ok") == (sample.error == ""), sample
        reasons[status] += 1
    assert set(reasons) - {"ok"} == {
        "bad_json", "unknown_format", "missing_media", "corrupt_media", "unsupported_aspect", "overlong",
        "bad_member_name",
    }  # fmt: skip
