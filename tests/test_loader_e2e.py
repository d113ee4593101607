"""Packed shards -> energon TaskEncoder and plain PyTorch dataset: every pack has the plan's lengths.

Fixture packs are written with the write stage's own tar writer and ``.nv-meta``
files; each sub-sample's planned ``token_len`` comes from the scan's counter
(``TokenCounter.count``), so the loader's materialized lengths are checked
against what the scan would have planned. A second test runs the real pipeline
(scan -> bucket -> plan -> write) on a generated dataset when all stages exist.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from megatron.energon import WorkerConfig, get_loader, get_train_dataset

from vlmpack_offline.config import Config
from vlmpack_offline.conversation import Conversation, MediaRef
from vlmpack_offline.errors import LengthMismatchError
from vlmpack_offline.loader import EncoderOptions, PackDataset, PackEncoder, PackTaskEncoder
from vlmpack_offline.output.energon_meta import write_dataset_yaml, write_info_json, write_split_yaml
from vlmpack_offline.output.tar_writer import ShardTarWriter
from vlmpack_offline.packed_format import JSON_PART, PackedSample, PackedSubSample, pack_key
from vlmpack_offline.synthetic.shards import image_bytes, video_bytes
from vlmpack_offline.tokens import TokenCounter

TINY_VIDEO = {"min_pixels": 4 * 28 * 28, "max_pixels": 16 * 28 * 28, "min_frames": 4, "fps": 2.0}


def _turns(user: list[dict], answer: str) -> tuple[dict, ...]:
    return (
        {"role": "user", "content": user},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    )


def _fixture_packs(config: Config) -> list[tuple[PackedSample, dict[str, bytes]]]:
    """Three packs (text, image, video); token_len from the scan's counter."""
    counter = TokenCounter.from_config(config)
    specs = [
        [(_turns([{"type": "text", "text": "Hi."}], "Hello!"), {}),
         (_turns([{"type": "text", "text": "Count to three."}], "One, two, three."), {})],
        [(_turns([{"type": "image", "image": "m0000.jpg"}, {"type": "text", "text": "What?"}], "A box."),
          {"m0000.jpg": image_bytes(60, 44, seed=1)}),
         (_turns([{"type": "image", "image": "m0001.png"}, {"type": "image", "image": "m0002.jpg"}], "Two."),
          {"m0001.png": image_bytes(30, 90, fmt="PNG", seed=2), "m0002.jpg": image_bytes(80, 50, seed=3)})],
        [(_turns([{"type": "video", "video": "m0000.mp4"}, {"type": "text", "text": "Describe."}], "Moving."),
          {"m0000.mp4": video_bytes(8, 8, 64, 48, seed=4)})],
    ]  # fmt: skip
    packs = []
    for pack_id, subs in enumerate(specs):
        samples, media = [], {}
        for index, (messages, parts) in enumerate(subs):
            refs = tuple(
                MediaRef(kind=item["type"], part=item[item["type"]])
                for m in messages
                for item in m["content"]
                if item["type"] in ("image", "video")
            )
            conversation = Conversation(messages=messages, media=refs)
            infos = [counter.probe(ref.kind, parts[ref.part]) for ref in refs]
            count = counter.count(conversation, infos)
            samples.append(
                PackedSubSample(
                    id=f"src.tar/p{pack_id}s{index}",
                    token_len=count.token_len,
                    media_tokens=count.media_tokens,
                    messages=messages,
                )
            )
            media.update(parts)
        packs.append((PackedSample(pack_id=pack_id, capacity=4096, split="train", samples=tuple(samples)), media))
    return packs


def _write_shards(out: Path, packs: list[tuple[PackedSample, dict[str, bytes]]], sample_type: str) -> None:
    """Two shards (packs 0-1, pack 2) + .nv-meta, with the write stage's writer."""
    out.mkdir(parents=True, exist_ok=True)
    counts = {}
    for shard, chunk in enumerate((packs[:2], packs[2:])):
        name = f"pretrain-{shard:06d}.tar"
        writer = ShardTarWriter(out / name)
        for pack, media in chunk:
            members = [(JSON_PART, json.dumps(pack.to_json()).encode())] + sorted(media.items())
            writer.add_sample(pack_key(pack.pack_id), members)
        writer.finish()
        counts[name] = len(chunk)
    write_dataset_yaml(out, sample_type)
    write_split_yaml(out, {"train": sorted(counts)})
    write_info_json(out, counts)


@pytest.fixture
def packed(make_config, tmp_path):
    config = make_config(wds_dir=tmp_path / "src", video=TINY_VIDEO)
    packs = _fixture_packs(config)
    _write_shards(config.packed_wds_dir, packs, config.sample.sample_type)
    planned = {pack.pack_id: [s.token_len for s in pack.samples] for pack, _ in packs}
    return config, planned


def _lengths(batch) -> list[int]:
    return (batch.cu_seqlens[1:] - batch.cu_seqlens[:-1]).tolist()


def _check_batch(batch, planned: dict[int, list[int]]) -> None:
    assert _lengths(batch) == planned[batch.pack_id]
    assert batch.seq_len == sum(planned[batch.pack_id]) == int(batch.cu_seqlens[-1])
    assert batch.position_ids.shape[-1] == batch.labels.shape[-1] == batch.seq_len
    assert len(batch.n_images_per_sample) == len(batch.n_videos_per_sample) == len(planned[batch.pack_id])
    for start in batch.cu_seqlens[:-1].tolist():  # every sub-sample starts at position 0 with an unscored label
        assert batch.position_ids[..., start].max() == 0
        assert batch.labels[0, start] == -100


def test_energon_task_encoder_yields_planned_lengths(packed):
    config, planned = packed
    worker_config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    dataset = get_train_dataset(
        config.packed_wds_dir,
        batch_size=1,
        shuffle_buffer_size=None,
        max_samples_per_sequence=None,
        worker_config=worker_config,
        task_encoder=PackTaskEncoder(PackEncoder(config)),
        repeat=False,
    )
    seen = []
    for batch in get_loader(dataset):
        _check_batch(batch, planned)
        seen.append(batch.pack_id)
    assert sorted(seen) == sorted(planned)


def test_plain_dataset_splits_packs_across_ranks_and_yields_planned_lengths(packed):
    config, planned = packed
    encoder = PackEncoder(config)
    per_rank = []
    for rank in range(2):  # 3 packs, 2 ranks: one pack each, the third dropped for this epoch
        ids = []
        for batch in PackDataset(config.packed_wds_dir, encoder, rank=rank, world_size=2):
            _check_batch(batch, planned)
            ids.append(batch.pack_id)
        per_rank.append(ids)
    assert len(per_rank[0]) == len(per_rank[1]) == len(planned) // 2
    assert len(set(per_rank[0] + per_rank[1])) == 2 and set(per_rank[0] + per_rank[1]) <= set(planned)
    three = [
        [b.pack_id for b in PackDataset(config.packed_wds_dir, encoder, rank=r, world_size=3)] for r in range(3)
    ]  # more slots than shards: packs are dealt out one by one
    assert sorted(sum(three, [])) == sorted(planned) and all(three)


def test_length_mismatch_names_pack_and_sample(packed, make_config, tmp_path):
    config, _ = packed
    other_video = dataclasses.replace(config.video, min_pixels=16 * 28 * 28, max_pixels=32 * 28 * 28)
    encoder = PackEncoder(dataclasses.replace(config, video=other_video))  # not the config the packs were planned with
    with pytest.raises(LengthMismatchError, match=r"pack 2, sample 'src.tar/p2s0'"):
        list(PackDataset(config.packed_wds_dir, encoder))


def test_loss_weights_average_per_sample(packed):
    config, planned = packed
    encoder = PackEncoder(config, EncoderOptions(loss_weights=True))
    for batch in PackDataset(config.packed_wds_dir, encoder):
        weights = batch.loss_weights[0]
        for start, end in zip(batch.cu_seqlens[:-1].tolist(), batch.cu_seqlens[1:].tolist(), strict=True):
            scored = batch.labels[0, start:end] != -100
            assert scored.any()
            assert abs(float(weights[start:end].sum()) - 1.0) < 1e-6
            assert (weights[start:end][~scored] == 0).all()
