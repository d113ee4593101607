"""Qwen3.5 (``qwen3_5``, ``qwen3_5_moe``) and Qwen3-VL MoE (``qwen3_vl_moe``) folders counted against their own processors.

The folders (``synthetic/folder_qwen3_5.py``) hold Qwen/Qwen3.5-9B's published preprocessor and video
preprocessor settings and its chat template; ``AutoProcessor`` resolves them to the classes transformers
5 registers for these model types (``Qwen3VLProcessor``, ``Qwen2VLImageProcessor``, ``Qwen3VLVideoProcessor``,
``Qwen3_5Tokenizer`` for Qwen3.5). Oracles:

- ``.venv-ref`` (torchvision): the real ``AutoProcessor`` of each folder, run on the rendered chat, the decoded
  images and, for videos, every frame of the video (decord) with its ``VideoMetadata`` (the processor samples
  the frames itself, from the folder's ``video_preprocessor_config.json``). Its ``input_ids`` length and its
  ``<|image_pad|>`` + ``<|video_pad|>`` count equal the scan's ``token_len`` / ``media_tokens`` (the whole
  ``vlmpack scan`` stage) for text, image, multi-image, edge-size (1x1 .. 200:1; past 200:1 both refuse) and
  video samples.
- ``.venv`` (no torchvision): the real ``Qwen3VLProcessor`` loaded from the folder without its video processor
  (images and text through its own code), and for videos its real ``Qwen3VLVideoProcessor.sample_frames`` +
  the Qwen3-VL video ``smart_resize`` + ``replace_video_token`` (the parts of the video path that need no
  torchvision).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import yaml
from _family_kit import edge_dataset, images_only, samples_in
from click.testing import CliRunner
from PIL import Image
from transformers import Qwen3VLProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize as video_smart_resize
from transformers.video_utils import VideoMetadata

from vlmpack_offline.cli import cli
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.reasons import Reason
from vlmpack_offline.synthetic import folder_qwen3_5
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, video_bytes, write_shard
from vlmpack_offline.tokens import VideoMedia, make_counter

# (width, height): tiny, factor-sized, wide / tall up to 200:1 (counted), past it (refused by both)
SIZES = [(1, 1), (31, 33), (32, 32), (100, 100), (1920, 1080), (777, 333), (200, 1), (1, 200), (250, 1)]
# (frames, fps, width, height): short, odd count, longer at 25 fps, portrait, slow
VIDEOS = [(30, 10, 96, 64), (7, 5, 64, 48), (100, 25, 160, 90), (48, 24, 48, 96), (9, 3, 320, 240)]
CASES = [("qwen3_5", "hub"), ("qwen3_5", "transformers5"), ("qwen3_5_moe", "transformers5"), ("qwen3_vl_moe", "hub")]
# the MoE folders differ from the dense ones in config.json only: their full scans run with the slow tests
SCAN_CASES = [pytest.param(case, marks=[pytest.mark.slow] if "moe" in case[0] else [], id="-".join(case)) for case in CASES]


class _Folders(dict):
    """(model_type, layout) -> folder, built on first use (each build saves a tokenizer and a processor)."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def __missing__(self, case: tuple[str, str]) -> Path:
        self[case] = folder_qwen3_5.build(self.root / "_".join(case), layout=case[1], video=True, model_type=case[0])
        return self[case]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> _Folders:
    return _Folders(tmp_path_factory.mktemp("qwen3_5_folders"))


@pytest.fixture(scope="module")
def wds(tmp_path_factory) -> Path:
    """The generated dataset with edge-size images, plus video samples of several lengths, rates and sizes."""
    root = edge_dataset(tmp_path_factory.mktemp("qwen3_5_wds"), seed=11, samples_per_shard=8, sizes=SIZES,
                        second_image=(640, 480))  # fmt: skip
    samples = []
    for index, spec in enumerate(VIDEOS):
        media = {"v.mp4": video_bytes(*spec, seed=index)}
        user = [{"type": "video", "video": "v.mp4"}, {"type": "text", "text": f"What happens in clip {index}?"}]
        if index == 0:  # a second video and an image in the same turn
            media |= {"w.mp4": video_bytes(12, 6, 64, 64, seed=9), "i.png": image_bytes(300, 200, fmt="PNG")}
            user += [{"type": "image", "image": "i.png"}, {"type": "video", "video": "w.mp4"}]
        messages = [{"role": "user", "content": user}, {"role": "assistant", "content": f"Clip {index}."}]
        samples.append(SyntheticSample(key=f"vid{index:02d}", json={"messages": messages}, media=media))
    write_shard(root / "videos.tar", samples)
    return root


def test_folders_are_the_published_qwen3_5_settings(folders):
    for model_type, layout in CASES[:2]:  # the MoE folders: built and loaded by their (slow) scans
        directory = folders[model_type, layout]
        assert (directory / "preprocessor_config.json").exists() == (layout == "hub")
        assert f'"model_type": "{model_type}"' in (directory / "config.json").read_text()
    video = Qwen3VLVideoProcessor.from_pretrained(folders["qwen3_5", "transformers5"])  # reads processor_config.json
    assert (video.size.shortest_edge, video.size.longest_edge, video.patch_size) == (4096, 25165824, 16)
    assert (video.fps, video.min_frames, video.max_frames, video.do_sample_frames) == (2, 4, 768, True)


def _decoded(data: bytes) -> tuple[np.ndarray, VideoMetadata]:
    """Every frame (PyAV) and the metadata a video loader reports: decord's frame count and average rate."""
    import av
    import decord

    with av.open(io.BytesIO(data)) as container:
        frames = np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])
    reader = decord.VideoReader(io.BytesIO(data), num_threads=1)
    assert len(reader) == len(frames)
    return frames, VideoMetadata(total_num_frames=len(reader), fps=float(reader.get_avg_fps()))


def _scan(tmp_path: Path, wds: Path, directory: Path) -> list:
    raw = {
        "data": {"wds_dir": str(wds), "work_dir": str(tmp_path / "work"), "packed_wds_dir": str(tmp_path / "packed")},
        "sample": {"max_token_len": 262144},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(directory)}},
        "scan": {"max_drop_ratio": 1.0},  # past 200:1 drops on purpose
    }
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(cli, ["scan", "--config", str(config)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        return list(manifest.iter_samples())


@pytest.mark.torchvision
@pytest.mark.parametrize("case", SCAN_CASES)
def test_scan_counts_equal_the_real_auto_processor(tmp_path, case, folders, wds):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(folders[case])
    assert f'"model_type": "{case[0]}"' in (folders[case] / "config.json").read_text()
    assert type(processor).__name__ == "Qwen3VLProcessor"
    assert type(processor.video_processor).__name__ == "Qwen3VLVideoProcessor"
    assert type(processor.tokenizer).__name__ == ("Qwen3_5Tokenizer" if case[0].startswith("qwen3_5") else "Qwen2Tokenizer")
    pads = {processor.tokenizer.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|video_pad|>")}
    samples = samples_in(wds)
    rows = _scan(tmp_path, wds, folders[case])
    assert len(rows) == len(samples)
    seen = {"text": 0, "image": 0, "multi": 0, "video": 0, "refused": 0}
    for row in rows:
        conversation, parts = samples[row.key]
        kinds = [m.kind for m in conversation.media]
        text = processor.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
        images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media if m.kind == "image"]
        decoded = [_decoded(parts[m.part]) for m in conversation.media if m.kind == "video"]
        kwargs = {"images": images or None}
        if decoded:
            kwargs |= {"videos": [f for f, _ in decoded], "video_metadata": [m for _, m in decoded]}
        if row.status == Reason.UNSUPPORTED_ASPECT:
            with pytest.raises(ValueError, match="aspect ratio"):
                processor(text=[text], **kwargs)
            seen["refused"] += 1
            continue
        assert row.status == "ok", (row.key, row.status, row.error)
        ids = list(processor(text=[text], **kwargs)["input_ids"][0])
        assert (row.token_len, row.media_tokens) == (len(ids), sum(i in pads for i in ids)), row.key
        seen["video" if "video" in kinds else "text" if not kinds else "image" if len(kinds) == 1 else "multi"] += 1
    assert seen["refused"] == 1 and seen["video"] >= len(VIDEOS) + 2 and seen["multi"] >= len(SIZES) - 1, seen
    assert seen["text"] >= 1 and seen["image"] >= 2, seen


def test_counts_equal_the_processor_classes_without_torchvision(folders, wds, make_config):
    directory = folders["qwen3_5", "hub"]  # both layouts: the AutoProcessor test
    counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    processor = images_only(Qwen3VLProcessor).from_pretrained(directory)
    video_processor = Qwen3VLVideoProcessor.from_pretrained(directory)
    processor.video_processor = video_processor  # replace_video_token reads merge / temporal sizes from it
    checked = 0
    for conversation, parts in samples_in(wds).values():
        try:
            media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
        except Exception:  # past 200:1: checked against the real processor above
            continue
        text = counter.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
        images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media if m.kind == "image"]
        image_repl = processor._process_images(images)[1] if images else []
        video_repl = []
        for item, ref in zip(media, conversation.media, strict=True):
            if not isinstance(item, VideoMedia):
                continue
            frames, metadata = _decoded(parts[ref.part])
            indices = [int(i) for i in video_processor.sample_frames(metadata)]
            h, w = video_smart_resize(
                num_frames=len(indices), height=frames.shape[1], width=frames.shape[2],
                temporal_factor=2, factor=32, min_pixels=video_processor.size.shortest_edge,
                max_pixels=video_processor.size.longest_edge,
            )  # fmt: skip
            grid = np.array([[-(-len(indices) // 2), h // 16, w // 16]])
            metadata.frames_indices = indices
            video_repl.append(processor.replace_video_token({"video_grid_thw": grid, "video_metadata": [metadata]}, 0))
        (expanded,), _ = processor.get_text_with_replacements([text], image_repl, video_repl)
        reference = counter.tokenizer(expanded, add_special_tokens=False)["input_ids"]
        assert counter.count(conversation, media).token_len == len(reference)
        assert counter.materialize(conversation, media).input_ids == reference
        checked += 1
    assert checked >= 20



def test_multi_turn_labels_with_the_thinking_template(folders):
    """Qwen3.5 renders only the turns after the last user query with a <think> block: earlier turns are
    located in their history form, the same way one sample at a time and batched."""
    from vlmpack_offline.tokens.counter import load_tokenizer
    from vlmpack_offline.tokens.spans import ChatRenderer

    tokenizer = load_tokenizer(str(folders["qwen3_5", "hub"]))
    chat = ChatRenderer(tokenizer.chat_template, dict(tokenizer.special_tokens_map))
    messages = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "One."},
                {"role": "user", "content": "Again?"}, {"role": "assistant", "content": "Two."}]  # fmt: skip
    full, spans = chat.render_with_spans(messages)
    assert [full[a:b] for a, b in spans] == ["One.<|im_end|>", "\n</think>\n\nTwo.<|im_end|>"]
    assert full.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nTwo.<|im_end|>\n")
    assert chat.spans_many([messages], [full]) == [spans]
