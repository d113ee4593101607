"""Qwen3.5 (``qwen3_5``): what only Qwen3.5 has, beyond the conformance table's checks.

Counts against the real ``AutoProcessor`` on the whole scan (``qwen3_5`` in both layouts, ``qwen3_5_moe``,
``qwen3_vl_moe``; edge-size images, past 200:1 refused, videos whose frames the processor samples itself,
materialize) are the ``qwen3_5*`` / ``qwen3_vl_moe`` rows of ``tests/_families_table.py``. Here:

- the folder holds Qwen/Qwen3.5-9B's published video settings, as the real ``Qwen3VLVideoProcessor`` reads them;
- ``.venv`` (no torchvision): the real ``Qwen3VLProcessor`` loaded from the folder without its video processor
  (images and text through its own code), and for videos its real ``Qwen3VLVideoProcessor.sample_frames`` +
  the Qwen3-VL video ``smart_resize`` + ``replace_video_token`` (the parts of the video path that need no
  torchvision) give ``count`` and ``materialize``;
- the thinking template's multi-turn labels.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from _families_table import row
from _family_kit import images_only, samples_in
from PIL import Image
from transformers import Qwen3VLProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
from transformers.models.qwen3_vl.video_processing_qwen3_vl import smart_resize as video_smart_resize
from transformers.video_utils import VideoMetadata

from vlmpack_offline.synthetic import folder_qwen3_5
from vlmpack_offline.tokens import VideoMedia, make_counter

QWEN3_5 = row("qwen3_5")
CASES = [("qwen3_5", "hub"), ("qwen3_5", "transformers5")]


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
    """The table row's data: the generated dataset with edge-size images, plus clips of several lengths and rates."""
    return QWEN3_5.data.build(tmp_path_factory.mktemp("qwen3_5_wds"))


def test_folders_are_the_published_qwen3_5_settings(folders):
    for model_type, layout in CASES:
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
