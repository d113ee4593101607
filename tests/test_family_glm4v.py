"""GLM-4.1V / 4.5V / 4.6V images on the fast path: counts equal the real ``Glm4vProcessor`` / ``Glm46VProcessor``.

The reference is transformers' own ``Glm4vProcessor`` loaded by its own ``from_pretrained`` from the
folder, with the real ``Glm4vImageProcessorPil`` and the folder's tokenizer, run on the decoded images.
Without torchvision ``AutoProcessor`` cannot build it (GLM's video processor imports torchvision), so
the reference is the real class restricted to its image processor and tokenizer (``_ImagesOnly``, the
same restriction ``processor_dir`` uses to save the transformers-5 layout); its ``__call__``, image
token expansion and resize are transformers' code.

Its ``input_ids`` are compared by length with the scan's ``token_len`` (the whole ``vlmpack scan``
stage), token by token with ``materialize``, and its ``<|image|>`` ids with ``media_tokens``, for text,
one-image and multi-image samples with many sizes and aspect ratios, in both folder layouts. An image
the processor refuses (aspect ratio over 200 after its upscaling) must be dropped as
``unsupported_aspect``. GLM-4.5V (``glm4v_moe``) takes ``Glm4vProcessor``; GLM-4.6V (``glm46v``) its own
``Glm46VProcessor`` + ``Glm46VImageProcessorPil``: their scans are checked the same way. Videos are
counted (see ``tests/test_family_glm4v_video.py``); here their rows must be ``ok``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from _family_kit import edge_dataset, images_only, samples_in, scan_config
from click.testing import CliRunner
from PIL import Image
from transformers import Glm4vProcessor, Glm46VProcessor

from vlmpack_offline.cli import cli
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.families.glm4v import GLM4V
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.reasons import Reason
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens import load_model_rules, make_counter

LAYOUTS = ("hub", "transformers5")

# (width, height): tiny (scaled up to the factor), square, around the factor, wide / tall, at and past the
# 200:1 limit (2000x10 becomes 5600x28: exactly 200, kept; 5000x1 and 1x5000: refused), large (max_pixels).
SIZES = [
    (1, 1), (27, 27), (28, 28), (29, 57), (100, 100), (448, 448), (1000, 300), (300, 1000), (2000, 10),
    (10, 2000), (5000, 1), (1, 5000), (1920, 1080), (777, 333), (4000, 3000), (3000, 4000), (6000, 40),
]  # fmt: skip


_ImagesOnly = images_only(Glm4vProcessor)
_ORACLES = {"glm4v": _ImagesOnly, "glm4v_moe": _ImagesOnly, "glm46v": images_only(Glm46VProcessor)}


@pytest.fixture(scope="module")
def glm_dirs(tmp_path_factory) -> dict[str, Path]:
    return {layout: build_processor_dir(tmp_path_factory.mktemp(f"glm4v_{layout}"), "glm4v", layout=layout)
            for layout in LAYOUTS}  # fmt: skip


@pytest.fixture(scope="module")
def wds(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("glm4v_wds")
    return edge_dataset(root, seed=11, samples_per_shard=12, sizes=SIZES, second_image=(640, 480))



def _reference(processor, conversation, parts) -> list[int]:
    """The processor's input_ids; ValueError where the processor refuses an image."""
    text = processor.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
    images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media]
    return list(processor(text=[text], images=images or None)["input_ids"][0])


def _scan_matches_reference(tmp_path: Path, wds: Path, directory: Path, processor, path_line: str, **kwargs) -> dict:
    """Run ``vlmpack scan`` (it prints ``path_line``); every row's counts equal the reference's; the kinds seen."""
    image = processor.image_token_id
    result = CliRunner().invoke(cli, ["scan", "--config", str(scan_config(tmp_path, wds, directory, **kwargs))])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert path_line in result.output, result.output
    samples = samples_in(wds)
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        rows = list(manifest.iter_samples())
    assert len(rows) == len(samples)
    seen = {"text": 0, "image": 0, "multi": 0, "video": 0, "refused": 0, "max_pixels": 0}
    for row in rows:
        conversation, parts = samples[row.key]
        kinds = [m.kind for m in conversation.media]
        if "video" in kinds:  # counted exactly against the video processor in test_family_glm4v_video.py
            assert row.status == "ok", (row.key, row.status, row.error)
            seen["video"] += 1
            continue
        try:
            ids = _reference(processor, conversation, parts)
        except ValueError as exc:
            assert "aspect ratio" in str(exc)
            assert row.status == Reason.UNSUPPORTED_ASPECT, (row.key, row.status, row.error)
            seen["refused"] += 1
            continue
        assert row.status == "ok", (row.key, row.status, row.error)
        assert (row.token_len, row.media_tokens) == (len(ids), ids.count(image)), row.key
        seen["text" if not kinds else "image" if len(kinds) == 1 else "multi"] += 1
        sizes = [Image.open(io.BytesIO(parts[m.part])).size for m in conversation.media]
        seen["max_pixels"] += any(2 * w * h > processor.image_processor.size["longest_edge"] for w, h in sizes)
    return seen


@pytest.mark.parametrize("layout", LAYOUTS)
def test_scan_counts_equal_the_real_glm4v_processor(tmp_path, layout, glm_dirs, wds):
    directory = glm_dirs[layout]
    assert (directory / "preprocessor_config.json").exists() == (layout == "hub")
    processor = _ImagesOnly.from_pretrained(directory)
    assert type(processor.image_processor).__name__ == "Glm4vImageProcessorPil"
    assert processor.image_processor.size["longest_edge"] == 9633792
    path_line = "glm4v: fast path (patch grid from headers: patch 14, merge 2, 2 * pixels in 12544..9633792)"
    seen = _scan_matches_reference(tmp_path, wds, directory, processor, path_line)
    assert seen["text"] >= 2 and seen["image"] >= 4 and seen["multi"] >= len(SIZES) - 2, seen
    assert seen["video"] >= 2 and seen["refused"] == 2 and seen["max_pixels"] >= 2, seen


def test_processor_kwargs_change_the_grid_as_in_the_processor(tmp_path, glm_dirs, wds):
    """size and patch settings from model.processor_kwargs, as ``from_pretrained`` takes them."""
    directory = glm_dirs["transformers5"]
    kwargs = {"size": {"shortest_edge": 56 * 56, "longest_edge": 2 * 28 * 28 * 64}}
    processor = _ImagesOnly.from_pretrained(directory, **kwargs)
    assert processor.image_processor.size["longest_edge"] == 2 * 28 * 28 * 64
    path_line = "glm4v: fast path (patch grid from headers: patch 14, merge 2, 2 * pixels in 3136..100352)"
    seen = _scan_matches_reference(tmp_path, wds, directory, processor, path_line, **kwargs)
    assert seen["multi"] >= len(SIZES) - 2 and seen["max_pixels"] >= len(SIZES) - 2, seen


def test_materialize_gives_the_processor_input_ids(glm_dirs, wds, make_config):
    directory = glm_dirs["hub"]
    processor = _ImagesOnly.from_pretrained(directory)
    counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    checked = 0
    for key, (conversation, parts) in samples_in(wds).items():
        if any(m.kind == "video" for m in conversation.media):
            continue
        try:
            ids = _reference(processor, conversation, parts)
        except ValueError:  # the 5000:1 images (see the scan test)
            continue
        media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
        materialized = counter.materialize(conversation, media)
        assert materialized.input_ids == ids, key
        learned = [i for i, m in zip(ids, materialized.assistant_mask, strict=True) if m]
        assert processor.image_token_id not in learned
        if key.startswith("edge"):  # one assistant turn, the template's last text: the answer alone
            assert processor.tokenizer.decode(learned) == f"Answer {int(key[4:])}."
        checked += 1
    assert checked >= 20


def test_settings_are_read_from_both_layouts(tmp_path, glm_dirs, make_config):
    for directory in glm_dirs.values():
        rules = load_model_rules(make_config(wds_dir="unused", processor_dir=directory).model)
        assert (rules.model_type, rules.fast) == ("glm4v", True)
        assert (rules.patch_size, rules.merge_size, rules.temporal_patch_size) == (14, 2, 2)
        assert (rules.min_pixels, rules.max_pixels) == (12544, 9633792)
    custom = build_processor_dir(tmp_path / "custom", "glm4v")
    settings = json.loads((custom / "preprocessor_config.json").read_text())
    del settings["size"]  # the image processor's own default size then applies
    (custom / "preprocessor_config.json").write_text(json.dumps(settings))
    size = _ImagesOnly.from_pretrained(custom).image_processor.size
    rules = load_model_rules(make_config(wds_dir="unused", processor_dir=custom).model)
    assert (rules.min_pixels, rules.max_pixels) == (size["shortest_edge"], size["longest_edge"])
    config = make_config(wds_dir="unused", processor_dir=custom, model={"processor_kwargs": {
        "pretrained_model_name_or_path": str(custom), "size": {"height": 448, "width": 448}}})  # fmt: skip
    with pytest.raises(ConfigError, match="shortest_edge"):
        load_model_rules(config.model)


def test_top_level_min_max_pixels_are_ignored_as_by_the_processor(glm_dirs, make_config):
    """Qwen's image processors take min_pixels / max_pixels; Glm4vImageProcessorPil reads size only."""
    directory = glm_dirs["hub"]
    kwargs = {"min_pixels": 100, "max_pixels": 2 * 28 * 28 * 16}
    processor = _ImagesOnly.from_pretrained(directory, **kwargs)
    config = make_config(wds_dir="unused", processor_dir=directory, model={"processor_kwargs": {
        "pretrained_model_name_or_path": str(directory), **kwargs}})  # fmt: skip
    rules = load_model_rules(config.model)
    size = processor.image_processor.size
    assert (rules.min_pixels, rules.max_pixels) == (size["shortest_edge"], size["longest_edge"]) == (12544, 9633792)
    counter = make_counter(config)
    image = io.BytesIO()
    Image.new("RGB", (640, 480)).save(image, format="PNG")
    grid = processor.image_processor(images=[Image.open(io.BytesIO(image.getvalue()))])["image_grid_thw"][0]
    text_ids = processor(text=["<|image|>"], images=[Image.open(io.BytesIO(image.getvalue()))])["input_ids"][0]
    expected = list(text_ids).count(processor.image_token_id)
    assert expected == int(grid.prod()) // 4 > 16  # the folder's size, not max_pixels' 16 tokens
    media = counter.probe("image", image.getvalue(), part="a.png")
    assert GLM4V.replacement_size(rules, media, len).media_tokens == expected


@pytest.mark.slow
@pytest.mark.parametrize("family", ["glm4v_moe", "glm46v"])
def test_glm45v_and_glm46v_scans_equal_their_real_processors(tmp_path, family, wds):
    directory = build_processor_dir(tmp_path / "processor", family, layout="transformers5")
    processor = _ORACLES[family].from_pretrained(directory)
    assert type(processor).__name__.startswith("Glm46VProcessor" if family == "glm46v" else "Glm4vProcessor")
    assert type(processor.image_processor).__name__ == ("Glm46VImageProcessorPil" if family == "glm46v" else "Glm4vImageProcessorPil")
    path_line = f"{family}: fast path (patch grid from headers: patch 14, merge 2, 2 * pixels in 12544..9633792)"
    seen = _scan_matches_reference(tmp_path, wds, directory, processor, path_line)
    assert seen["multi"] >= len(SIZES) - 2 and seen["refused"] == 2 and seen["video"] >= 2, seen
