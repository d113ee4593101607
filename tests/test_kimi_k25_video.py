"""Kimi-K2.5 videos: counts and loader tensors equal transformers' ``Kimi_K25Processor`` + ``Kimi_K25VideoProcessor``.

``Kimi_K25Processor.replace_video_token`` writes ``HH:MM:SS.mmm<|media_begin|>video<|media_content|>`` + the
video placeholder per merged patch of one frame + ``<|media_end|>`` for every chunk of 4 sampled frames; the
video processor samples its own frames (``fps`` 2 of the container's rate). Oracles:

- ``.venv-ref``: the real ``AutoProcessor`` of the folder, handed EVERY frame of a video with the container's
  ``VideoMetadata`` (``total_num_frames``, ``fps``), so it samples the frames itself: its ``input_ids`` length
  and placeholder + ``<|media_pad|>`` count equal the scan's ``token_len`` / ``media_tokens`` for many
  (frame count, frame rate, size, text before the video) combinations, a video crossing an hour, and the
  samples of a generated dataset (video only, video + image, video + text, two videos; both folder layouts);
  a video below 2 fps is refused by the processor's sampler and dropped by the scan. The loader's
  ``input_ids``, ``pixel_values_videos`` / ``video_grid_thw`` (one row per chunk) and image tensors equal the
  processor's per sub-sample, bit for bit (the loader decodes only the sampled frames, PyAV or decord; the
  oracle decodes all with PyAV and samples with the processor).
- ``.venv`` (no torchvision): ``Kimi_K25Processor.replace_video_token`` itself (its module needs no
  torchvision), fed the chunk grid of ``navit_resize`` (checked against transformers' in
  ``test_family_kimi_k25.py``), gives ``materialize``'s text and ``count``'s length.
"""

from __future__ import annotations

import io
import itertools
import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from _family_kit import read_packs, samples_in, scan_config
from click.testing import CliRunner
from PIL import Image

from vlmpack_offline.cli import cli
from vlmpack_offline.config import config_from_dict
from vlmpack_offline.conversation import parse_conversation
from vlmpack_offline.families.kimi_k25 import VIDEO_DEFAULTS
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.media import VideoInfo
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, video_bytes, write_shard
from vlmpack_offline.tokens import VideoMedia, make_counter
from vlmpack_offline.tokens.media_info import sample_for

LAYOUTS = ("hub", "transformers5")
# the text before the video: none (role header), a letter, punctuation, a space, a digit, a newline
CONTEXTS = ["", "Look:", "Look at this ", "Clip 12", "Watch\n"]
# (frames, fps, width, height) of the dataset's videos: 4 / 6 / 10 / 1 / 2 sampled frames (chunks 4 / 4+2 /
# 4+4+2 / 1 / 2), 1000x700 past the 4096-patch frame budget
# (64x48: decord 0.6 cannot decode the 48x48 clips video_bytes writes; those are read with PyAV, tests/test_video_reading.py)
CLIPS = [(9, 4, 64, 48), (30, 10, 96, 64), (41, 8, 64, 48), (3, 30, 64, 48), (16, 16, 1000, 700)]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    return {layout: build_processor_dir(tmp_path_factory.mktemp(f"kimi_video_{layout}"), "kimi_k25", layout=layout,
                                        video=True) for layout in LAYOUTS}  # fmt: skip


@pytest.fixture(scope="module")
def wds(tmp_path_factory) -> Path:
    """Video samples: each clip of ``CLIPS`` after a text of ``CONTEXTS``; a video + an image; a video between
    texts; two videos; a 1 fps video (dropped); and text / image samples to pack them with."""
    root = tmp_path_factory.mktemp("kimi_video_wds")
    samples = []

    def add(key, user, media, answer):
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
        samples.append(SyntheticSample(key=key, json={"messages": messages}, media=media))

    video = {"type": "video", "video": "v.mp4"}
    for index, (clip, context) in enumerate(zip(CLIPS, CONTEXTS, strict=True)):
        user = ([{"type": "text", "text": context}] if context else []) + [video]
        add(f"clip{index}", user, {"v.mp4": video_bytes(*clip, seed=index)}, f"Clip {index}.")
    add("with_image", [video, {"type": "text", "text": "and"}, {"type": "image", "image": "i.png"}],
        {"v.mp4": video_bytes(30, 10, 96, 64, seed=7), "i.png": image_bytes(300, 200, fmt="PNG")}, "Both.")  # fmt: skip
    add("with_text", [{"type": "text", "text": "First this."}, video, {"type": "text", "text": "What happens?"}],
        {"v.mp4": video_bytes(41, 8, 64, 48, seed=8)}, "Motion.")  # fmt: skip
    add("two", [video, {"type": "video", "video": "w.mp4"}],
        {"v.mp4": video_bytes(9, 4, 64, 48, seed=9), "w.mp4": video_bytes(30, 10, 96, 64, seed=10)}, "Two.")  # fmt: skip
    add("slow", [video], {"v.mp4": video_bytes(4, 1, 64, 48, seed=11)}, "Slow.")
    add("text", [{"type": "text", "text": "Hello there."}], {}, "Hi.")
    add("image", [{"type": "image", "image": "i.jpg"}], {"i.jpg": image_bytes(120, 90)}, "A picture.")
    write_shard(root / "videos.tar", samples)
    return root


def every_frame(data: bytes):
    """(every frame as uint8 [T, H, W, 3], the container's VideoMetadata), read by PyAV alone."""
    import av
    from transformers.video_utils import VideoMetadata

    with av.open(io.BytesIO(data)) as container:
        fps = float(container.streams.video[0].average_rate)
        frames = np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])
    return frames, VideoMetadata(total_num_frames=len(frames), fps=fps, duration=len(frames) / fps)


def reference(processor, conversation, parts) -> dict:
    """The processor on one sample: its images, and every frame of each video with its metadata (the video
    processor samples the frames itself, as the folder says: ``do_sample_frames``)."""
    text = processor.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
    images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media if m.kind == "image"]
    videos = [every_frame(parts[m.part]) for m in conversation.media if m.kind == "video"]
    kwargs = {"videos": [v for v, _ in videos], "video_metadata": [m for _, m in videos]} if videos else {}
    return processor(text=[text], images=images or None, return_tensors="pt", **kwargs)


def _conversation(messages: list[dict]):
    parts = [item.get("image") or item.get("video") for m in messages for item in m["content"]
             if isinstance(item, dict) and item.get("type") in ("image", "video")]  # fmt: skip
    return parse_conversation(json.dumps({"messages": messages}).encode(), key="k", parts=parts)


def _media_ids(processor) -> tuple[int, int]:
    return processor.image_token_id, processor.video_token_id


@pytest.mark.torchvision
def test_the_video_defaults_are_the_video_processors(dirs):
    from transformers import AutoProcessor
    from transformers.models.kimi_k25.video_processing_kimi_k25 import Kimi_K25VideoProcessor as Real

    assert VIDEO_DEFAULTS == {"fps": Real.fps, "temporal_patch_size": Real.temporal_patch_size,
                              "max_patches": Real.max_patches, "max_side": Real.size["max_height"]}  # fmt: skip
    for directory in dirs.values():
        video = AutoProcessor.from_pretrained(directory).video_processor
        assert (type(video), video.fps, video.temporal_patch_size, video.max_patches, video.do_sample_frames) == (
            Real, 2, 4, 4096, True)  # the public media_proc_cfg: sample_fps, temporal_merge_kernel_size, ...


@pytest.mark.torchvision
def test_counts_equal_the_processor_over_frame_counts_rates_sizes_and_contexts(dirs, make_config):
    """The processor samples from every frame itself; 1 fps videos are refused by its sampler and dropped."""
    from transformers import AutoProcessor
    from transformers.video_utils import VideoMetadata

    directory = dirs["hub"]
    processor = AutoProcessor.from_pretrained(directory)
    counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    checked = dropped = 0
    combos = itertools.product([1, 4, 5, 9, 23], [1.0, 2.0, 7.5, 29.97], [(28, 28), (60, 80), (33, 100)], CONTEXTS)
    cases = [(*c, False) for i, c in enumerate(combos) if i % 3 == 0 or c[0] == 23]
    cases += [(6, 12.0, (1000, 1500), "Big", True)]  # past the 4096-patch frame budget, with an image
    for total, fps, (height, width), context, image in cases:
        user = ([{"type": "text", "text": context}] if context else []) + [{"type": "video", "video": "v.mp4"}]
        user += [{"type": "image", "image": "i.png"}] if image else [{"type": "text", "text": "What?"}]
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": "It."}]
        conversation = _conversation(messages)
        info = VideoInfo(n_frames=total, native_fps=fps, height=height, width=width, backend="pyav")
        frames = np.random.default_rng(total).integers(0, 256, (total, height, width, 3), dtype=np.uint8)
        metadata = VideoMetadata(total_num_frames=total, fps=fps, duration=total / fps)
        text = processor.tokenizer.apply_chat_template(messages, tokenize=False)
        pictures = [Image.new("RGB", (500, 70))] if image else None
        try:
            ids = processor(text=[text], images=pictures, videos=[frames], video_metadata=[metadata])["input_ids"][0]
        except ValueError as exc:  # fps above the video's rate: the sampler asks more frames than there are
            assert "exceeds total_num_frames" in str(exc)
            with pytest.raises(DropError) as caught:
                sample_for(counter.rules, info, counter.rules.video, part="v.mp4")
            assert caught.value.reason == Reason.UNSUPPORTED_MEDIA
            dropped += 1
            continue
        media = [VideoMedia(sampling=sample_for(counter.rules, info, counter.rules.video, part="v.mp4"))]
        media += [counter.probe("image", _png(500, 70), part="i.png")] if image else []
        count = counter.count(conversation, media)
        assert (count.token_len, count.media_tokens) == (len(ids), sum(ids.count(i) for i in _media_ids(processor)))
        assert counter.materialize(conversation, media).input_ids == list(ids), (total, fps, context)
        checked += 1
    assert checked >= 40 and dropped >= 5


def _png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height)).save(buffer, format="PNG")
    return buffer.getvalue()


def test_counts_equal_replace_video_token_without_torchvision(dirs, wds, make_config):
    """``Kimi_K25Processor.replace_video_token`` (no torchvision in its module) on the chunk grid and the
    sampled frames' metadata gives the text ``materialize`` tokenizes, and ``count`` its length."""
    from transformers import AutoTokenizer
    from transformers.models.kimi_k25.processing_kimi_k25 import Kimi_K25Processor
    from transformers.video_utils import VideoMetadata

    directory = dirs["hub"]
    counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    tokenizer = AutoTokenizer.from_pretrained(directory)
    rules = counter.rules
    host = SimpleNamespace(video_processor=SimpleNamespace(merge_size=rules.merge_size, temporal_patch_size=rules.temporal_patch_size),
                           video_token="<|kimi_k25_video_placeholder|>")  # fmt: skip
    hour = _conversation([{"role": "user", "content": [{"type": "text", "text": "At "}, {"type": "video", "video": "v.mp4"}]},
                          {"role": "assistant", "content": "Long."}])  # fmt: skip
    info = VideoInfo(n_frames=8000, native_fps=2.2, height=14, width=28, backend="pyav")  # 3636 s: past the hour
    cases = [("hour", hour, [VideoMedia(sampling=sample_for(rules, info, rules.video, part="v.mp4"))])]
    for key, (conversation, parts) in samples_in(wds).items():
        if key not in ("slow", "with_image", "image") and conversation.media:  # the 1 fps video drops (test
            # below); images need the torchvision image processor
            cases.append((key, conversation, [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]))
    checked = 0
    for key, conversation, media in cases:
        pieces = tokenizer.apply_chat_template(list(conversation.messages), tokenize=False).split(host.video_token)
        text = pieces[0]
        for item, after in zip(media, pieces[1:], strict=True):  # the i-th placeholder is the i-th video's
            s = item.sampling
            chunks = [[min(4, s.n_frames - i), s.resized_height // 14, s.resized_width // 14] for i in range(0, s.n_frames, 4)]
            inputs = {"num_chunks_per_video": [len(chunks)], "video_grid_thw": torch.tensor(chunks),
                      "video_metadata": [VideoMetadata(total_num_frames=s.total_frames, fps=s.native_fps,
                                                       frames_indices=list(s.frame_indices))]}  # fmt: skip
            text += Kimi_K25Processor.replace_video_token(host, inputs, 0) + after
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        count = counter.count(conversation, media)
        assert count.token_len == len(ids), key
        assert count.media_tokens == ids.count(tokenizer.convert_tokens_to_ids(host.video_token)), key
        assert counter.materialize(conversation, media).input_ids == ids, key
        if key == "hour":
            assert re.search(r"<\|media_end\|>01:00:0\d\.\d{3}<\|media_begin\|>", text), "no stamp past the hour"
        checked += 1
    assert checked >= len(CLIPS) + 3


@pytest.mark.torchvision
@pytest.mark.parametrize("layout", ["transformers5"])  # both layouts: test_conformance_counts.py's generated videos
def test_scan_counts_equal_the_real_processor(tmp_path, layout, dirs, wds):
    from transformers import AutoProcessor

    directory = dirs[layout]
    processor = AutoProcessor.from_pretrained(directory)
    result = CliRunner().invoke(cli, ["scan", "--config", str(scan_config(tmp_path, wds, directory))])
    assert result.exit_code == 0, result.output + repr(result.exception)
    samples = samples_in(wds)
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        rows = list(manifest.iter_samples())
    assert len(rows) == len(samples)
    videos = 0
    for row in rows:
        conversation, parts = samples[row.key]
        if row.key == "slow":  # 4 frames at 1 fps: the processor's sampler asks for 8
            assert row.status == Reason.UNSUPPORTED_MEDIA and "cannot sample it at 2.0 fps" in row.error
            continue
        assert row.status == "ok", (row.key, row.status, row.error)
        ids = reference(processor, conversation, parts)["input_ids"][0].tolist()
        assert (row.token_len, row.media_tokens) == (len(ids), sum(ids.count(i) for i in _media_ids(processor))), row.key
        videos += sum(m.kind == "video" for m in conversation.media)
    assert videos == len(CLIPS) + 4


@pytest.mark.slow
@pytest.mark.torchvision
def test_loader_video_packs_equal_the_real_processor(tmp_path, dirs, wds):
    """ids, pixel_values_videos, video_grid_thw (one row per chunk), pixel_values, image_grid_thw of every
    sub-sample, bit-equal; 1-D positions restarting per segment."""
    from transformers import AutoProcessor

    from vlmpack_offline.loader import PackEncoder
    from vlmpack_offline.stages import bucket, plan, scan, write

    directory = dirs["transformers5"]
    config = config_from_dict({
        "data": {"wds_dir": str(wds), "work_dir": str(tmp_path / "work"), "packed_wds_dir": str(tmp_path / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(directory)}},
        "sample": {"max_token_len": 16384}, "scan": {"max_drop_ratio": 1.0},
    }, source="test")  # fmt: skip
    for stage in (scan, bucket, plan, write):
        stage.run(config)
    encoder = PackEncoder.from_packed_dir(tmp_path / "packed", directory)
    processor = AutoProcessor.from_pretrained(directory)
    videos = 0
    for pack, media in read_packs(tmp_path / "packed"):
        batch = encoder.encode(pack, media)
        bounds = batch.cu_seqlens.tolist()
        expected: dict[str, list] = {}
        for index, sub in enumerate(pack.samples):
            out = reference(processor, _conversation(list(sub.messages)), media)
            start, end = bounds[index], bounds[index + 1]
            assert end - start == sub.token_len
            assert torch.equal(batch.input_ids[0, start:end], out["input_ids"][0])
            for name in ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw"):
                if name in out:
                    expected.setdefault(name, []).append(out[name])
            videos += sum(item.get("type") == "video" for m in sub.messages for item in m["content"]
                          if isinstance(item, dict))  # fmt: skip
        assert set(batch.vision) == set(expected)
        for name, parts in expected.items():
            assert torch.equal(batch.vision[name], torch.cat(parts)), name
        assert torch.equal(batch.position_ids, batch.text_position_ids())
    assert videos == len(CLIPS) + 4
