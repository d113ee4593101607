"""InternVL videos: counts and loader tensors equal transformers' ``InternVLProcessor`` + ``InternVLVideoProcessor``.

``InternVLProcessor.replace_video_token`` writes ``Frame{i}: <img><IMG_CONTEXT>*256</img>`` per frame the
video processor returns, joined by newlines; with ``do_sample_frames=False`` (the InternVL-hf folders' setting)
it returns the frames it is given, so the count is the shared sampler's frames times that block. Oracles:

- ``.venv-ref``: the real ``AutoProcessor`` of the folder (both layouts, with the video processor settings),
  run on the rendered chat, the decoded images and the sampled frames (PyAV-decoded at the sampler's
  indices): its ``input_ids`` length and ``<IMG_CONTEXT>`` count equal the scan's ``token_len`` /
  ``media_tokens`` for every sample, video ones included (text before ``<video>`` ending in a letter,
  space, punctuation, digit or newline); the loader's ``input_ids`` and ``pixel_values`` (image tiles and
  frames in order) equal the processor's per sub-sample.
- ``.venv`` (no torchvision): the real ``InternVLProcessor`` (images and tokenizer) expands the video pads
  with its own ``replace_video_token`` for the sampled frame count: ``count`` and ``materialize`` equal it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import av
import numpy as np
import pytest
import torch
import yaml
from _family_kit import images_only, read_packs, samples_in
from click.testing import CliRunner
from PIL import Image
from transformers import InternVLProcessor

from vlmpack_offline.cli import cli
from vlmpack_offline.config import config_from_dict
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import (
    SyntheticSample,
    generate_dataset,
    image_bytes,
    video_bytes,
    write_shard,
)
from vlmpack_offline.tokens import VideoMedia, make_counter

LAYOUTS = ("hub", "transformers5")
# the text before <video>: empty (role header), ends in a letter, a space, punctuation, a newline, a digit
CONTEXTS = ["", "Look at this", "Look at this ", "Look:", "Watch\n", "Clip 12"]
_ImagesOnly = images_only(InternVLProcessor)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    return {layout: build_processor_dir(tmp_path_factory.mktemp(f"internvl_video_{layout}"), "internvl", layout=layout,
                                        video=True) for layout in LAYOUTS}  # fmt: skip


@pytest.fixture(scope="module")
def wds(tmp_path_factory) -> Path:
    """A small generated dataset (text, images, videos) plus video samples in every context of ``CONTEXTS``,
    of odd and even lengths, one with an image after the video and a second video of another size. The two
    videos of that sample sample the same frame count: ``InternVLProcessor`` (transformers 5.23) stacks a
    sample's videos into one tensor, so it fails on videos of different frame counts (vlmpack counts and
    loads each video on its own)."""
    root = tmp_path_factory.mktemp("internvl_video_wds")
    generate_dataset(root, seed=5, n_shards=1, samples_per_shard=10, include_faults=False)
    samples = []
    for index, context in enumerate(CONTEXTS):
        media = {"v.mp4": video_bytes(9 + 4 * index, 5, 64, 48, seed=index)}
        user = ([{"type": "text", "text": context}] if context else []) + [{"type": "video", "video": "v.mp4"},
                                                                              {"type": "text", "text": "What is it?"}]  # fmt: skip
        if index == 1:
            media |= {"i.png": image_bytes(900, 500, fmt="PNG"), "w.mp4": video_bytes(13, 5, 96, 64, seed=9)}
            user += [{"type": "image", "image": "i.png"}, {"type": "text", "text": "and"}, {"type": "video", "video": "w.mp4"}]
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": f"Clip {index}."}]
        samples.append(SyntheticSample(key=f"ctx{index:02d}", json={"messages": messages}, media=media))
    write_shard(root / "contexts.tar", samples)
    return root


def _frames(data: bytes, indices) -> np.ndarray:
    """The frames at ``indices``, decoded by PyAV alone."""
    with av.open(io.BytesIO(data)) as container:
        every = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    return np.stack([every[i] for i in indices])


def _reference(processor, counter, conversation, parts) -> dict:
    """The real processor's output for one sample: its images and, per video, the sampler's frames."""
    text = processor.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
    images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media if m.kind == "image"]
    videos = []
    for ref in conversation.media:
        if ref.kind == "video":
            sampling = counter.probe("video", parts[ref.part], part=ref.part).sampling
            videos.append(_frames(parts[ref.part], sampling.frame_indices))
    return processor(text=[text], images=images or None, videos=videos or None, do_sample_frames=False,
                     return_tensors="pt")  # fmt: skip


def test_frame_text_joins_the_text_before_the_video(dirs):
    """Why ``compact_text`` keeps ``Frame1: `` in place: the tokenizer's pre-split joins it to a preceding
    letter, space or punctuation, so tokenizing it alone would miscount."""
    from vlmpack_offline.tokens.counter import load_tokenizer

    tokenizer = load_tokenizer(str(dirs["hub"]))

    def n(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    joined = [n(c + "Frame1: ") != n(c) + n("Frame1: ") for c in CONTEXTS[1:]]
    assert any(joined) and not all(joined), joined  # "Watch\n" and "Clip 12" split; the others join


def test_counts_equal_replace_video_token_without_torchvision(dirs, wds, make_config):
    directory = dirs["hub"]
    counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    processor = _ImagesOnly.from_pretrained(directory)
    checked = 0
    for conversation, parts in samples_in(wds).values():
        media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
        if not any(isinstance(item, VideoMedia) for item in media):
            continue
        text = processor.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
        images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media if m.kind == "image"]
        kwargs = processor._merge_kwargs(tokenizer_init_kwargs=processor.tokenizer.init_kwargs)["images_kwargs"]
        image_repl = processor._process_images(images, **kwargs)[1] if images else []  # crop_to_patches, as __call__
        frames = [np.zeros((item.sampling.n_frames, 1)) for item in media if isinstance(item, VideoMedia)]
        video_repl = [processor.replace_video_token({"pixel_values_videos": frames}, i) for i in range(len(frames))]
        (expanded,), _ = processor.get_text_with_replacements([text], image_repl, video_repl)
        reference = processor.tokenizer(expanded, add_special_tokens=False)["input_ids"]
        count = counter.count(conversation, media)
        assert count.token_len == len(reference)
        assert count.media_tokens == reference.count(processor.image_token_id)
        assert counter.materialize(conversation, media).input_ids == reference
        checked += 1
    assert checked >= len(CONTEXTS) + 2


@pytest.mark.torchvision
@pytest.mark.parametrize("layout", LAYOUTS)
def test_scan_counts_equal_the_real_processor_with_its_video_processor(tmp_path, layout, dirs, wds):
    from transformers import AutoProcessor

    directory = dirs[layout]
    processor = AutoProcessor.from_pretrained(directory)
    assert type(processor.video_processor).__name__ == "InternVLVideoProcessor"
    assert processor.video_processor.do_sample_frames is False
    raw = {
        "data": {"wds_dir": str(wds), "work_dir": str(tmp_path / "work"), "packed_wds_dir": str(tmp_path / "packed")},
        "sample": {"max_token_len": 65536},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(directory)}},
    }
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(cli, ["scan", "--config", str(tmp_path / "config.yaml")])
    assert result.exit_code == 0, result.output + repr(result.exception)
    counter = make_counter(config_from_dict(raw, source="test"))
    samples = samples_in(wds)
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        rows = list(manifest.iter_samples())
    assert len(rows) == len(samples)
    videos = 0
    for row in rows:
        conversation, parts = samples[row.key]
        assert row.status == "ok", (row.key, row.status, row.error)
        ids = _reference(processor, counter, conversation, parts)["input_ids"][0].tolist()
        assert (row.token_len, row.media_tokens) == (len(ids), ids.count(processor.image_token_id)), row.key
        videos += any(m.kind == "video" for m in conversation.media)
    assert videos >= len(CONTEXTS) + 2


@pytest.mark.slow
@pytest.mark.torchvision
def test_loader_video_packs_equal_the_real_processor(tmp_path, dirs, wds):
    """ids and pixel_values (image tiles and frames, in order) of every sub-sample; values bit-equal (the
    loader runs the same processor call on the same frames)."""
    from transformers import AutoProcessor

    from vlmpack_offline.loader import PackEncoder
    from vlmpack_offline.stages import bucket, plan, scan, write

    directory = dirs["transformers5"]
    config = config_from_dict({
        "data": {"wds_dir": str(wds), "work_dir": str(tmp_path / "work"), "packed_wds_dir": str(tmp_path / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(directory)}},
        "sample": {"max_token_len": 16384},
    }, source="test")  # fmt: skip
    for stage in (scan, bucket, plan, write):
        stage.run(config)
    encoder = PackEncoder.from_packed_dir(tmp_path / "packed", directory)
    processor = AutoProcessor.from_pretrained(directory)
    counter = make_counter(config)
    videos = 0
    for pack, media in read_packs(tmp_path / "packed"):
        batch = encoder.encode(pack, media)
        bounds = batch.cu_seqlens.tolist()
        pixels = []
        for index, sub in enumerate(pack.samples):
            conversation = _conversation(sub)
            expected = _reference(processor, counter, conversation, media)
            start, end = bounds[index], bounds[index + 1]
            assert end - start == sub.token_len
            assert torch.equal(batch.input_ids[0, start:end], expected["input_ids"][0])
            if "pixel_values" in expected:
                pixels.append(expected["pixel_values"])
            videos += sum(m.kind == "video" for m in conversation.media)
        if pixels:
            assert torch.equal(batch.vision["pixel_values"], torch.cat(pixels))
    assert videos >= len(CONTEXTS) + 2


def _conversation(sub):
    from vlmpack_offline.conversation import parse_conversation

    parts = [item.get("image") or item.get("video") for m in sub.messages for item in m["content"]
             if isinstance(item, dict) and item.get("type") in ("image", "video")]  # fmt: skip
    return parse_conversation(json.dumps({"messages": list(sub.messages)}).encode(), key=sub.id, parts=parts)
