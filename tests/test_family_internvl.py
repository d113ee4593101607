"""InternVL on the fast path: counts equal the real ``InternVLProcessor``, sample by sample.

The reference is transformers' own ``InternVLProcessor`` loaded by its own ``from_pretrained`` from
the folder, with the real ``GotOcr2ImageProcessorPil`` and the folder's tokenizer, run on the
decoded images. Without torchvision ``AutoProcessor`` cannot build it: InternVL's video processor
module imports torchvision, and ``ProcessorMixin`` checks the ``video_processor`` argument against a
mapping that is a torchvision stub. So the reference is the real class restricted to its image
processor and tokenizer (``_ImagesOnly``, the same restriction ``processor_dir`` uses to save the
transformers-5 layout); its ``__call__``, image token expansion and tiling are transformers' code.

Its ``input_ids`` are compared by length with the scan's ``token_len`` (the whole ``vlmpack scan``
stage), token by token with ``materialize``, and its ``<IMG_CONTEXT>`` ids with ``media_tokens``, for
text, one-image and multi-image samples with many sizes and aspect ratios, in both folder layouts.
Video samples are counted too (``ok`` here); their counts are checked against the real processor with
its video processor in ``tests/test_internvl_video.py``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from _family_kit import edge_dataset, images_only, samples_in, scan_config
from click.testing import CliRunner
from PIL import Image
from transformers import InternVLProcessor

from vlmpack_offline.cli import cli
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens import load_model_rules, make_counter

LAYOUTS = ("hub", "transformers5")

# (width, height): square, tile-sized, just over a tile, tie-breaks between grids of the same aspect
# ratio (896 and 1344 squares), wide / tall, and extreme ratios up to 5000:1.
SIZES = [
    (1, 1), (100, 100), (448, 448), (449, 300), (896, 896), (1344, 1344), (1000, 300), (300, 1000),
    (896, 448), (448, 1344), (2000, 10), (10, 2000), (5000, 1), (1, 5000), (1920, 1080), (777, 333),
]  # fmt: skip


_ImagesOnly = images_only(InternVLProcessor)


@pytest.fixture(scope="module")
def internvl_dirs(tmp_path_factory) -> dict[str, Path]:
    return {layout: build_processor_dir(tmp_path_factory.mktemp(f"internvl_{layout}"), "internvl", layout=layout)
            for layout in LAYOUTS}  # fmt: skip


@pytest.fixture(scope="module")
def wds(tmp_path_factory) -> Path:
    """A generated dataset (text, one image, multi-image, tiny and 4000x3000 images, videos) plus
    one image per size of ``SIZES`` with a second image after the text."""
    root = tmp_path_factory.mktemp("internvl_wds")
    return edge_dataset(root, seed=7, samples_per_shard=12, sizes=SIZES, second_image=(640, 480))



def _reference(processor, conversation, parts) -> list[int]:
    text = processor.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
    images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media]
    return list(processor(text=[text], images=images or None)["input_ids"][0])


def _scan_matches_reference(tmp_path: Path, wds: Path, directory: Path, processor, path_line: str, **kwargs) -> dict:
    """Run ``vlmpack scan`` (it prints ``path_line``); every row's counts equal the reference's; the kinds seen."""
    context = processor.image_token_id
    result = CliRunner().invoke(cli, ["scan", "--config", str(scan_config(tmp_path, wds, directory, **kwargs))])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert path_line in result.output
    samples = samples_in(wds)
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        rows = list(manifest.iter_samples())
    assert len(rows) == len(samples)
    seen = {"text": 0, "image": 0, "multi": 0, "video": 0, "tiles>1": 0}
    for row in rows:
        conversation, parts = samples[row.key]
        kinds = [m.kind for m in conversation.media]
        if "video" in kinds:  # counted against the processor's video path in test_internvl_video.py
            assert row.status == "ok", (row.key, row.status, row.error)
            seen["video"] += 1
            continue
        assert row.status == "ok", (row.key, row.status, row.error)
        ids = _reference(processor, conversation, parts)
        assert (row.token_len, row.media_tokens) == (len(ids), ids.count(context)), row.key
        seen["text" if not kinds else "image" if len(kinds) == 1 else "multi"] += 1
        seen["tiles>1"] += ids.count(context) > processor.image_seq_length * len(kinds)
    return seen


@pytest.mark.parametrize("layout", LAYOUTS)
def test_scan_counts_equal_the_real_internvl_processor(tmp_path, layout, internvl_dirs, wds):
    directory = internvl_dirs[layout]
    assert (directory / "preprocessor_config.json").exists() == (layout == "hub")
    processor = _ImagesOnly.from_pretrained(directory)
    assert type(processor.image_processor).__name__ == "GotOcr2ImageProcessorPil"
    assert processor.image_seq_length == 256 and processor.image_processor.max_patches == 12
    path_line = "internvl: fast path (256 tokens per 448x448 tile, 1..12 tiles + thumbnail)"
    seen = _scan_matches_reference(tmp_path, wds, directory, processor, path_line)
    assert seen["text"] >= 2 and seen["image"] >= 4 and seen["multi"] >= len(SIZES) and seen["video"] >= 2, seen
    assert seen["tiles>1"] >= 10, seen


def test_processor_kwargs_change_the_tiles_as_in_the_processor(tmp_path, internvl_dirs, wds):
    """min/max patches, the tile size and image_seq_length from model.processor_kwargs, as ``from_pretrained``
    takes them."""
    directory = internvl_dirs["hub"]
    kwargs = {"min_patches": 2, "max_patches": 6, "size": {"height": 224, "width": 224}, "image_seq_length": 64}
    processor = _ImagesOnly.from_pretrained(directory, **kwargs)
    assert (processor.image_processor.min_patches, processor.image_processor.max_patches) == (2, 6)
    assert processor.image_seq_length == 64
    path_line = "internvl: fast path (64 tokens per 224x224 tile, 2..6 tiles + thumbnail)"
    seen = _scan_matches_reference(tmp_path, wds, directory, processor, path_line, **kwargs)
    assert seen["multi"] >= len(SIZES) and seen["tiles>1"] >= len(SIZES), seen


def test_crop_to_patches_false_in_processor_kwargs_gives_one_tile_as_in_the_processor(tmp_path, internvl_dirs, wds):
    """The folder's crop_to_patches: false is overridden by the processor's call default (the main test tiles);
    the same key in model.processor_kwargs reaches the processor call and turns tiling off."""
    directory = internvl_dirs["transformers5"]
    processor = _ImagesOnly.from_pretrained(directory, crop_to_patches=False)
    path_line = "internvl: fast path (256 tokens per image, one 448x448 tile)"
    seen = _scan_matches_reference(tmp_path, wds, directory, processor, path_line, crop_to_patches=False)
    assert seen["multi"] >= len(SIZES) and seen["tiles>1"] == 0, seen


def test_materialize_gives_the_processor_input_ids(internvl_dirs, wds, make_config):
    directory = internvl_dirs["transformers5"]
    processor = _ImagesOnly.from_pretrained(directory)
    counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    checked = 0
    for key, (conversation, parts) in samples_in(wds).items():
        if any(m.kind == "video" for m in conversation.media):
            continue
        media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
        materialized = counter.materialize(conversation, media)
        ids = _reference(processor, conversation, parts)
        assert materialized.input_ids == ids, key
        learned = [i for i, m in zip(ids, materialized.assistant_mask, strict=True) if m]
        assert processor.image_token_id not in learned
        if key.startswith("edge"):  # one assistant turn: its text and <|im_end|>, nothing else
            assert processor.tokenizer.decode(learned) == f"Answer {int(key[4:])}.<|im_end|>"
        checked += 1
    assert checked >= 20


def test_settings_are_read_from_both_layouts(tmp_path, internvl_dirs, make_config):
    for directory in internvl_dirs.values():
        rules = load_model_rules(make_config(wds_dir="unused", processor_dir=directory).model)
        assert (rules.model_type, rules.fast, rules.tokens_per_image) == ("internvl", True, 256)
        assert (rules.tile_size, rules.min_tiles, rules.max_tiles) == ((448, 448), 1, 12)
    custom = build_processor_dir(tmp_path / "custom", "internvl")
    (custom / "processor_config.json").write_text(json.dumps({"image_seq_length": 64, "processor_class": "InternVLProcessor"}))
    rules = load_model_rules(make_config(wds_dir="unused", processor_dir=custom).model)
    assert rules.tokens_per_image == _ImagesOnly.from_pretrained(custom).image_seq_length == 64
    config = make_config(wds_dir="unused", processor_dir=custom, model={"processor_kwargs": {
        "pretrained_model_name_or_path": str(custom), "size": {"shortest_edge": 448}}})  # fmt: skip
    with pytest.raises(ConfigError, match="counts tiles of"):
        load_model_rules(config.model)
