"""Shared inputs of the per-family tests (not a test module): datasets with edge-size images,
the samples of a dataset as the oracle reads them, packs read back with tarfile alone, and
hand-made packs of text and image sub-samples."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import torch
import yaml
from PIL import Image

from vlmpack_offline.conversation import Conversation, parse_conversation
from vlmpack_offline.packed_format import PackedSample, PackedSubSample
from vlmpack_offline.synthetic.shards import SyntheticSample, generate_dataset, image_bytes, write_shard
from vlmpack_offline.tario import iter_samples, read_range, split_key

__all__ = ["scan_config", "edge_dataset", "sub_sample_images", "processor_on", "samples_in", "read_packs", "pack_of", "text_item",
           "segment_bounds", "forward_fields", "assert_own_rows_then_zeros", "TEXT_TURNS", "IMAGE_TURNS"]


def scan_config(tmp_path: Path, wds: Path, processor_dir: Path, *, max_token_len: int = 65536,
                sections: dict | None = None, **processor_kwargs) -> Path:
    """A config file that scans ``wds`` with ``processor_dir`` (``processor_kwargs`` on top, as a user's
    ``model.processor_kwargs``), any share of drops allowed (edge datasets drop some on purpose), and
    ``sections`` merged in (e.g. ``{"video": {...}}``)."""
    raw = {
        "data": {"wds_dir": str(wds), "work_dir": str(tmp_path / "work"), "packed_wds_dir": str(tmp_path / "packed")},
        "sample": {"max_token_len": max_token_len},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir), **processor_kwargs}},
        "scan": {"max_drop_ratio": 1.0},
    }
    for name, values in (sections or {}).items():
        raw.setdefault(name, {}).update(values)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def edge_dataset(root: Path, *, seed: int, samples_per_shard: int, sizes, second_image: tuple[int, int]) -> Path:
    """A generated dataset (text, image, multi-image, videos) plus one sample per size in ``sizes``:
    that image, text with blank lines, a second image of ``second_image`` size, more text."""
    generate_dataset(root, seed=seed, n_shards=2, samples_per_shard=samples_per_shard)
    samples = []
    for index, (width, height) in enumerate(sizes):
        media = {"a.png": image_bytes(width, height, fmt="PNG", seed=index), "b.jpg": image_bytes(*second_image, seed=index)}
        user = [{"type": "image", "image": "a.png"}, {"type": "text", "text": "Left.\n\n"},
                {"type": "image", "image": "b.jpg"}, {"type": "text", "text": " and\n\nright"}]  # fmt: skip
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": f"Answer {index}."}]
        samples.append(SyntheticSample(key=f"edge{index:03d}", json={"messages": messages}, media=media))
    write_shard(root / "edges.tar", samples)
    return root


def samples_in(root: Path) -> dict[str, tuple[Conversation, dict[str, bytes]]]:
    """key -> (Conversation, {part: bytes}) for every sample of every shard under ``root``."""
    out = {}
    for path in sorted(root.rglob("*.tar")):
        with open(path, "rb") as handle:
            for raw in iter_samples(path):
                parts = {m.part: read_range(handle, m.offset, m.size) for m in raw.members}
                conversation = parse_conversation(parts.pop("json"), key=raw.key, parts=list(parts))
                assert raw.key not in out
                out[raw.key] = (conversation, parts)
    return out


def read_packs(packed_dir: Path) -> Iterator[tuple[PackedSample, dict[str, bytes]]]:
    """(PackedSample, media bytes by part) of every pack, read from the tars with tarfile alone."""
    for tar_path in sorted(packed_dir.glob("pretrain-*.tar")):
        groups: dict[str, dict[str, bytes]] = {}
        with tarfile.open(tar_path) as tar:
            for member in tar:
                key, part = split_key(member.name)
                groups.setdefault(key, {})[part] = tar.extractfile(member).read()
        for parts in groups.values():
            yield PackedSample.from_json(json.loads(parts.pop("json"))), parts


def sub_sample_images(sub: PackedSubSample, media: dict[str, bytes]) -> list[Image.Image]:
    """A packed sub-sample's images in conversation order, opened from the pack's media (no EXIF transpose)."""
    parts = [item["image"] for m in sub.messages for item in m["content"]
             if isinstance(item, dict) and item.get("type") == "image"]  # fmt: skip
    return [Image.open(io.BytesIO(media[p])) for p in parts]


def processor_on(oracle, sub: PackedSubSample, media: dict[str, bytes]) -> tuple[list[Image.Image], dict]:
    """(its images, the real processor's output) for one sub-sample alone: the processor's own chat template
    renders the text, and the processor expands and processes its images."""
    images = sub_sample_images(sub, media)
    text = oracle.apply_chat_template(list(sub.messages), tokenize=False)
    return images, oracle(text=[text], images=images or None, return_tensors="pt")


def segment_bounds(batch) -> list[tuple[int, int]]:
    """(start, end) of each sub-sample of a ``PackBatch``, from its ``cu_seqlens``."""
    edges = batch.cu_seqlens.tolist()
    return list(zip(edges[:-1], edges[1:], strict=True))


def forward_fields(model, out: dict) -> dict:
    """The fields of a processor's output that the model's ``forward`` takes, labels left out."""
    import inspect

    names = set(inspect.signature(model.forward).parameters)
    return {k: v for k, v in out.items() if k in names and k != "labels"}


def assert_own_rows_then_zeros(packed, expected, name: str) -> None:
    """Each packed row (an audio's features or mask, padded to the pack's longest) holds its own row at its start
    and zeros past it."""
    for row, own in zip(packed, expected, strict=True):
        inside = tuple(slice(0, size) for size in own.shape)
        assert torch.equal(row[inside], own), name
        past = row.clone()
        past[inside] = 0
        assert not past.any(), name


def text_item(text: str) -> dict:
    return {"type": "text", "text": text}


def pack_of(turns: list[tuple[list[dict], str]], *, capacity: int) -> PackedSample:
    """A pack of one-turn sub-samples (user content, assistant answer); lengths are not checked."""
    samples = tuple(
        PackedSubSample(id=f"s{i}", token_len=0, media_tokens=0, messages=(
            {"role": "user", "content": user}, {"role": "assistant", "content": [text_item(answer)]},
        ))  # fmt: skip
        for i, (user, answer) in enumerate(turns)
    )
    return PackedSample(pack_id=0, capacity=capacity, split="train", samples=samples)


TEXT_TURNS = [
    ([text_item("Say hello to everyone in this room, please.")], "Hello there, everyone in the room!"),
    ([text_item("Count from one to ten.")], "One, two, three, four, five, six, seven, eight, nine, ten."),
    ([text_item("Name a colour.")], "Blue is a colour that many people like a lot."),
]
IMAGE_TURNS = [
    TEXT_TURNS[0],
    ([{"type": "image", "image": "m0.jpg"}, text_item("What is it?")], "A square."),
    ([{"type": "image", "image": "m1.png"}, text_item("and"), {"type": "image", "image": "m2.jpg"}], "Two."),
]


def images_only(processor_cls: type) -> type:
    """``processor_cls`` (transformers' own) restricted to its image processor and tokenizer: its video
    processor needs torchvision, which this machine does not have; images go through its own code."""
    return type(f"{processor_cls.__name__}ImagesOnly", (processor_cls,), {
        "get_attributes": classmethod(lambda cls: ["image_processor", "tokenizer"]),
    })  # fmt: skip


def packed_dataset(root: Path, family: str, layout: str, *, seed: int, max_token_len: int, videos: bool = True) -> tuple[Path, Path]:
    """A generated dataset packed by the real stages (scan -> write) with a ``family`` folder in ``layout``;
    (packed_wds_dir, processor folder). Video samples of families without video drop on purpose;
    ``videos=False`` generates none (a loader test of image packs without torchvision)."""
    from vlmpack_offline.config import config_from_dict
    from vlmpack_offline.stages import bucket, plan, scan, write
    from vlmpack_offline.synthetic.processor_dir import build_processor_dir

    processor = build_processor_dir(root / "processor", family, layout=layout)
    generate_dataset(root / "src", seed=seed, n_shards=2, samples_per_shard=10, include_faults=False, video=videos)
    config = config_from_dict({
        "data": {"wds_dir": str(root / "src"), "work_dir": str(root / "work"), "packed_wds_dir": str(root / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor)}},
        "sample": {"max_token_len": max_token_len},
        "scan": {"max_drop_ratio": 1.0},
    }, source="test")  # fmt: skip
    for stage in (scan, bucket, plan, write):
        stage.run(config)
    return root / "packed", processor


def hidden_and_text_logits(model, media_token_id: int, **kwargs):
    """(the text model's last hidden state at every position, the logits at every position but the media
    tokens), from the model's own forward with ``logits_to_keep``. Full ``[L, vocab]`` logits of a pack of
    image tiles are gigabytes (vocabulary 151k); the media positions' logits are the same ``lm_head`` of the
    hidden states compared here, and they never carry a label."""
    import torch

    keep = kwargs["input_ids"] != media_token_id
    with torch.no_grad():
        out = model(**{"use_cache": False, **kwargs}, logits_to_keep=keep, output_hidden_states=True)
    return out.hidden_states[-1][0], out.logits


def tiny_internvl(tokenizer):
    """A tiny random ``InternVLForConditionalGeneration`` (Qwen2 text, hidden 64, 2 layers; vision tower at
    448 px tiles, patch 14, 0.5 pixel shuffle: 256 tokens per tile), fp32, sdpa, eval."""
    import torch
    from transformers import InternVLConfig, InternVLForConditionalGeneration

    config = InternVLConfig(
        text_config=dict(model_type="qwen2", vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=16384),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           image_size=[448, 448], patch_size=[14, 14]),
        image_token_id=tokenizer.context_image_token_id, downsample_ratio=0.5,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return InternVLForConditionalGeneration(config).eval()
