"""Kimi-K2.5 (``kimi_k25``) on the fast path: counts equal the real ``Kimi_K25Processor``, sample by sample.

The reference is transformers' own ``Kimi_K25Processor`` built by ``AutoProcessor`` from the folder (its
image and video processors need torchvision: those tests are marked ``torchvision`` and run in
``.venv-ref``), run on the rendered chat and the decoded images. Its ``input_ids`` are compared by length
with the scan's ``token_len`` (the whole ``vlmpack scan`` stage), token by token with ``materialize``, and
its ``<|media_pad|>`` + video placeholder ids with ``media_tokens``, for text, one-image and multi-image
samples with many sizes (below one patch, past the 16384-patch budget, past 512 patches on a side, 5000:1) and
the generated videos (every frame decoded by PyAV, handed with the container's ``VideoMetadata``: the
processor samples its own frames), in both folder layouts (more video cases: ``test_kimi_k25_video.py``).
``navit_resize`` (written out here: transformers' lives in a torchvision module) is compared with
transformers' own over a grid of sizes and settings. Without torchvision the scan still counts on the
fast path, and the loader says in one line that it needs torchvision.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from _family_kit import edge_dataset, samples_in, scan_config
from click.testing import CliRunner
from PIL import Image

from vlmpack_offline.cli import cli
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.families.kimi_k25 import KIMI_K25, navit_resize
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes
from vlmpack_offline.tokens import load_model_rules, make_counter

LAYOUTS = ("hub", "transformers5")
PATH_LINE = ("kimi_k25: fast path (NaViT patch grid from headers: patch 14, merge 2, max 16384 patches, 512 per side; "
             "videos: 2.0 fps, chunks of 4 frames, max 4096 patches per frame)")

# (width, height): below one patch, one patch, around the 28 px factor, wide / tall, 5000:1, past the
# 16384-patch budget (2100x1600: 150 x 114 patches), past 512 patches on one side (8000x100, 100x8000)
SIZES = [
    (1, 1), (13, 13), (14, 14), (27, 29), (28, 28), (100, 100), (1000, 300), (300, 1000), (5000, 1), (1, 5000),
    (1920, 1080), (777, 333), (2100, 1600), (8000, 100), (100, 8000),
]  # fmt: skip


@pytest.fixture(scope="module")
def kimi_dirs(tmp_path_factory) -> dict[str, Path]:
    return {layout: build_processor_dir(tmp_path_factory.mktemp(f"kimi_{layout}"), "kimi_k25", layout=layout)
            for layout in LAYOUTS}  # fmt: skip


@pytest.fixture(scope="module")
def wds(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("kimi_wds")
    return edge_dataset(root, seed=13, samples_per_shard=12, sizes=SIZES, second_image=(640, 480))



def _run_scan(tmp_path: Path, wds: Path, directory: Path, path_line: str, **kwargs) -> list:
    result = CliRunner().invoke(cli, ["scan", "--config", str(scan_config(tmp_path, wds, directory, **kwargs))])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert path_line in result.output, result.output
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        return list(manifest.iter_samples())


def every_frame(data: bytes):
    """(every frame as uint8 [T, H, W, 3], the container's VideoMetadata), read by PyAV alone."""
    import av
    import numpy as np
    from transformers.video_utils import VideoMetadata

    with av.open(io.BytesIO(data)) as container:
        fps = float(container.streams.video[0].average_rate)
        frames = np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])
    return frames, VideoMetadata(total_num_frames=len(frames), fps=fps, duration=len(frames) / fps)


def _reference(processor, conversation, parts) -> list[int]:
    """The processor's ``input_ids``: the decoded images, and every frame of each video with its metadata
    (the processor samples the frames itself, ``do_sample_frames`` of the folder)."""
    text = processor.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
    images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media if m.kind == "image"]
    videos = [every_frame(parts[m.part]) for m in conversation.media if m.kind == "video"]
    kwargs = {"videos": [v for v, _ in videos], "video_metadata": [m for _, m in videos]} if videos else {}
    return list(processor(text=[text], images=images or None, **kwargs)["input_ids"][0])


def _scan_matches_reference(tmp_path, wds, directory, processor, path_line, **kwargs) -> dict:
    """Run ``vlmpack scan``; every row's counts equal the real processor's; the kinds seen."""
    rows = _run_scan(tmp_path, wds, directory, path_line, **kwargs)
    samples = samples_in(wds)
    assert len(rows) == len(samples)
    image, video = processor.image_token_id, processor.video_token_id
    seen = {"text": 0, "image": 0, "multi": 0, "video": 0, "budget": 0}
    ip = processor.image_processor
    for row in rows:
        conversation, parts = samples[row.key]
        kinds = [m.kind for m in conversation.media]
        ids = _reference(processor, conversation, parts)
        assert row.status == "ok", (row.key, row.status, row.error)
        assert (row.token_len, row.media_tokens) == (len(ids), ids.count(image) + ids.count(video)), row.key
        if "video" in kinds:
            seen["video"] += 1
            continue
        seen["text" if not kinds else "image" if len(kinds) == 1 else "multi"] += 1
        sizes = [Image.open(io.BytesIO(parts[m.part])).size for m in conversation.media]
        seen["budget"] += any((h // ip.patch_size) * (w // ip.patch_size) > ip.max_patches
                              or max(h, w) > ip.size["max_height"] * ip.patch_size for w, h in sizes)  # fmt: skip
    return seen


@pytest.mark.torchvision
def test_navit_resize_equals_transformers():
    from transformers.models.kimi_k25 import image_processing_kimi_k25 as real

    settings = [(14, 2, 16384, 512), (14, 2, 1024, 64), (16, 2, 4096, 100), (14, 3, 333, 17)]
    sizes = [(h, w) for h in (1, 2, 13, 14, 15, 27, 28, 29, 55, 97, 448, 511, 1000, 1023, 2047, 4999, 7168, 7169,
                               9000, 20000) for w in (1, 5, 14, 28, 30, 300, 640, 1280, 3001, 7170, 12345)]  # fmt: skip
    for patch, merge, budget, side in settings:
        for height, width in sizes:
            expected = real.navit_resize(height, width, patch, merge, budget, side)
            assert navit_resize(height, width, patch, merge, budget, side) == expected, (height, width, patch)


@pytest.mark.slow
@pytest.mark.torchvision
@pytest.mark.parametrize("layout", LAYOUTS)
def test_scan_counts_equal_the_real_kimi_processor(tmp_path, layout, kimi_dirs, wds):
    from transformers import AutoProcessor

    directory = kimi_dirs[layout]
    assert (directory / "preprocessor_config.json").exists() == (layout == "hub")
    processor = AutoProcessor.from_pretrained(directory)
    assert type(processor).__name__ == "Kimi_K25Processor"
    assert type(processor.image_processor).__name__ == "Kimi_K25ImageProcessor"
    assert (processor.image_processor.max_patches, processor.image_token) == (16384, "<|media_pad|>")
    seen = _scan_matches_reference(tmp_path, wds, directory, processor, PATH_LINE)
    assert seen["text"] >= 2 and seen["image"] >= 4 and seen["multi"] >= len(SIZES), seen
    assert seen["video"] >= 2 and seen["budget"] >= 3, seen


@pytest.mark.slow
@pytest.mark.torchvision
def test_processor_kwargs_change_the_grid_as_in_the_processor(tmp_path, kimi_dirs, wds):
    """max_patches / size / patch settings from model.processor_kwargs, as ``from_pretrained`` takes them."""
    from transformers import AutoProcessor

    directory = kimi_dirs["transformers5"]
    kwargs = {"max_patches": 256, "size": {"max_height": 24, "max_width": 24}}
    processor = AutoProcessor.from_pretrained(directory, **kwargs)
    assert processor.image_processor.max_patches == 256
    path_line = ("kimi_k25: fast path (NaViT patch grid from headers: patch 14, merge 2, max 256 patches, 24 per side; "
                 "videos: 2.0 fps, chunks of 4 frames, max 256 patches per frame)")  # from_pretrained: both processors
    seen = _scan_matches_reference(tmp_path, wds, directory, processor, path_line, **kwargs)
    assert seen["multi"] >= len(SIZES) and seen["budget"] >= len(SIZES) and seen["video"] >= 2, seen


@pytest.mark.slow
@pytest.mark.torchvision
def test_materialize_gives_the_processor_input_ids(kimi_dirs, wds, make_config):
    from transformers import AutoProcessor

    directory = kimi_dirs["hub"]
    processor = AutoProcessor.from_pretrained(directory)
    counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    checked = 0
    for key, (conversation, parts) in samples_in(wds).items():
        ids = _reference(processor, conversation, parts)
        media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
        materialized = counter.materialize(conversation, media)
        assert materialized.input_ids == ids, key
        learned = [i for i, m in zip(ids, materialized.assistant_mask, strict=True) if m]
        assert processor.image_token_id not in learned and processor.video_token_id not in learned
        if key.startswith("edge"):  # one assistant turn: what the model generates after <think>
            assert processor.tokenizer.decode(learned) == f"</think>Answer {int(key[4:])}.<|im_end|>"
        checked += 1
    assert checked >= 20


def test_the_scan_counts_on_the_fast_path_without_the_processor(tmp_path, kimi_dirs):
    """No torchvision needed: one image of 640x480 is 414 <|media_pad|> (the real processor's count, .venv-ref)."""
    from vlmpack_offline.synthetic.shards import SyntheticSample, write_shard

    wds = tmp_path / "wds"
    wds.mkdir()
    user = [{"type": "image", "image": "a.jpg"}, {"type": "text", "text": "What is it?"}]
    messages = [{"role": "user", "content": user}, {"role": "assistant", "content": "A picture."}]
    text_only = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]
    write_shard(wds / "a.tar", [SyntheticSample(key="img", json={"messages": messages}, media={"a.jpg": image_bytes(640, 480)}),
                                SyntheticSample(key="txt", json={"messages": text_only}, media={})])  # fmt: skip
    rows = {row.key: row for row in _run_scan(tmp_path, wds, kimi_dirs["hub"], PATH_LINE)}
    assert rows["img"].status == rows["txt"].status == "ok"
    assert rows["img"].media_tokens == 414 and rows["txt"].media_tokens == 0
    # the image adds its 414 pads where the text has one
    assert rows["img"].token_len - 414 + 1 > rows["txt"].token_len


def test_settings_are_read_from_both_layouts_and_processor_kwargs(tmp_path, kimi_dirs, make_config):
    for directory in kimi_dirs.values():
        rules = load_model_rules(make_config(wds_dir="unused", processor_dir=directory).model)
        assert (rules.model_type, rules.fast, KIMI_K25.positions) == ("kimi_k25", True, "1d")
        assert (rules.patch_size, rules.merge_size, rules.max_patches, rules.max_side_patches) == (14, 2, 16384, 512)
        kwargs = {"pretrained_model_name_or_path": str(directory), "max_patches": 999, "patch_size": 16,
                  "size": {"max_height": 40, "max_width": 40}}  # fmt: skip
        rules = load_model_rules(make_config(wds_dir="unused", processor_dir=directory, model={"processor_kwargs": kwargs}).model)
        assert (rules.patch_size, rules.max_patches, rules.max_side_patches) == (16, 999, 40)
    directory = kimi_dirs["hub"]
    for bad, match in (({"size": {"height": 448, "width": 448}}, "max_height"),
                       ({"size": {"max_height": 10, "max_width": 20}}, "max_height"),
                       ({"do_resize": False}, "do_resize")):  # fmt: skip
        config = make_config(wds_dir="unused", processor_dir=directory, model={"processor_kwargs": {
            "pretrained_model_name_or_path": str(directory), **bad}})  # fmt: skip
        with pytest.raises(ConfigError, match=match):
            load_model_rules(config.model)


def test_a_remote_code_media_proc_cfg_folder_is_refused(tmp_path, kimi_dirs, make_config):
    directory = Path(shutil.copytree(kimi_dirs["hub"], tmp_path / "remote"))
    settings = {"media_proc_cfg": {"in_patch_limit": 16384, "patch_size": 14, "merge_kernel_size": 2,
                                   "patch_limit_on_one_side": 512}}  # fmt: skip
    (directory / "preprocessor_config.json").write_text(json.dumps(settings))
    with pytest.raises(ConfigError, match="media_proc_cfg"):
        load_model_rules(make_config(wds_dir="unused", processor_dir=directory).model)


def test_the_loader_says_in_one_line_that_it_needs_torchvision(kimi_dirs):
    from transformers.utils import is_torchvision_available

    if is_torchvision_available():
        pytest.skip("torchvision is installed: the loader works (test_loader_kimi_k25.py)")
    from vlmpack_offline.config import config_from_dict
    from vlmpack_offline.loader import EncoderOptions, PackEncoder

    directory = kimi_dirs["hub"]
    config = config_from_dict({"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(directory)}}}, source="test")
    with pytest.raises(ConfigError) as caught:
        PackEncoder(config, EncoderOptions(check_lengths=False))
    message = str(caught.value)
    assert "\n" not in message and "kimi_k25 image processor needs torchvision" in message, message
