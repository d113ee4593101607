"""Mistral3 (``mistral3``, Pixtral vision) on the fast path: counts equal the real ``PixtralProcessor``, sample by sample.

The reference is transformers' own ``PixtralProcessor`` built by ``AutoProcessor.from_pretrained`` from the
offline folder (``synthetic/folder_mistral3.py``), run on the decoded images. Its module imports
torchvision, so those tests are marked ``torchvision`` and run in ``.venv-ref`` (``make test``).

Its ``input_ids`` are compared by length with the scan's ``token_len`` (the whole ``vlmpack scan`` stage),
token by token with ``materialize``, and its ``[IMG]`` / ``[IMG_BREAK]`` / ``[IMG_END]`` ids (its
``image_token_ids``) with ``media_tokens``, for text, one-image and multi-image samples with tiny, 1-pixel,
huge and extreme-aspect images, in both folder layouts. An image the processor refuses (a side floored
to 0 pixels) must be dropped as ``unsupported_aspect``; a video sample as ``unsupported_media``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from _family_kit import edge_dataset, samples_in, scan_config
from click.testing import CliRunner
from PIL import Image
from transformers import AutoImageProcessor

from vlmpack_offline.cli import cli
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens import load_model_rules, make_counter

LAYOUTS = ("hub", "transformers5")

# (width, height): tiny (padded up to one 28 px patch), 1 x N and N x 1 (kept, and past the point where a
# side floors to 0 px: refused), around the patch, at and just past longest_edge, huge, odd aspects.
SIZES = [
    (1, 1), (1, 40), (40, 1), (27, 27), (28, 28), (29, 57), (100, 100), (1540, 1540), (1541, 1540),
    (1000, 300), (300, 1000), (3000, 3), (3, 3000), (5000, 1), (1, 5000), (1920, 1080), (777, 333),
    (4500, 3000), (8000, 60),
]  # fmt: skip
PATH_LINE = "mistral3: fast path ([IMG] rows from headers: longest edge 1540, patch 14 x merge 2, [IMG_BREAK] / [IMG_END] per row)"


@pytest.fixture(scope="module")
def mistral_dirs(tmp_path_factory) -> dict[str, Path]:
    return {layout: build_processor_dir(tmp_path_factory.mktemp(f"mistral3_{layout}"), "mistral3", layout=layout)
            for layout in LAYOUTS}  # fmt: skip


@pytest.fixture(scope="module")
def wds(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mistral3_wds")
    return edge_dataset(root, seed=13, samples_per_shard=12, sizes=SIZES, second_image=(640, 480))



def _processor(directory: Path, **kwargs):
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(directory, **kwargs)
    assert type(processor).__name__ == "PixtralProcessor"
    return processor


def _reference(processor, conversation, parts) -> list[int]:
    """The processor's input_ids; ValueError where the processor refuses an image."""
    text = processor.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
    images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media]
    return [int(i) for i in processor(text=[text], images=images or None)["input_ids"][0]]


def _edge_counts_match(root: Path, counter, processor) -> int:
    """``counter`` counts and materializes every sample under ``root`` as ``processor`` does (or drops the
    ones it refuses as ``unsupported_aspect``); how many it counted."""
    media_ids = set(processor.image_token_ids)
    checked = 0
    for key, (conversation, parts) in samples_in(root).items():
        try:
            ids = _reference(processor, conversation, parts)
        except ValueError:
            with pytest.raises(DropError) as caught:
                [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
            assert caught.value.reason == Reason.UNSUPPORTED_ASPECT, key
            continue
        media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
        count = counter.count(conversation, media)
        assert (count.token_len, count.media_tokens) == (len(ids), sum(i in media_ids for i in ids)), key
        assert counter.materialize(conversation, media).input_ids == ids, key
        checked += 1
    return checked


def _scan_matches_reference(tmp_path: Path, wds: Path, directory: Path, processor, counter) -> dict:
    """Run ``vlmpack scan``; every row's counts equal the reference's, and so do ``counter``'s materialized
    ids (the loader's) and labels; the kinds seen."""
    media_ids = set(processor.image_token_ids)
    assert len(media_ids) == 3
    result = CliRunner().invoke(cli, ["scan", "--config", str(scan_config(tmp_path, wds, directory))])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert PATH_LINE in result.output, result.output
    samples = samples_in(wds)
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        rows = list(manifest.iter_samples())
    assert len(rows) == len(samples)
    seen = {"text": 0, "image": 0, "multi": 0, "video": 0, "refused": 0, "resized": 0}
    longest = processor.image_processor.size["longest_edge"]
    for row in rows:
        conversation, parts = samples[row.key]
        kinds = [m.kind for m in conversation.media]
        if "video" in kinds:
            assert row.status == Reason.UNSUPPORTED_MEDIA, (row.key, row.status, row.error)
            seen["video"] += 1
            continue
        try:
            ids = _reference(processor, conversation, parts)
        except ValueError as exc:
            assert "height" in str(exc) and "width" in str(exc), exc  # the resize to a 0-pixel side
            assert row.status == Reason.UNSUPPORTED_ASPECT, (row.key, row.status, row.error)
            seen["refused"] += 1
            continue
        assert row.status == "ok", (row.key, row.status, row.error)
        assert (row.token_len, row.media_tokens) == (len(ids), sum(i in media_ids for i in ids)), row.key
        media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
        materialized = counter.materialize(conversation, media)
        assert materialized.input_ids == ids, row.key
        learned = [i for i, m in zip(ids, materialized.assistant_mask, strict=True) if m]
        assert not media_ids & set(learned)
        if row.key.startswith("edge"):  # one assistant turn, the template's last text: the answer and </s>
            assert processor.tokenizer.decode(learned) == f"Answer {int(row.key[4:])}.</s>"
        seen["text" if not kinds else "image" if len(kinds) == 1 else "multi"] += 1
        sizes = [Image.open(io.BytesIO(parts[m.part])).size for m in conversation.media]
        seen["resized"] += any(max(w, h) > longest for w, h in sizes)
    return seen


@pytest.mark.slow
@pytest.mark.torchvision
@pytest.mark.parametrize("layout", LAYOUTS)
def test_scan_counts_and_ids_equal_the_real_pixtral_processor(tmp_path, layout, mistral_dirs, wds, make_config):
    directory = mistral_dirs[layout]
    assert (directory / "preprocessor_config.json").exists() == (layout == "hub")
    processor = _processor(directory)
    assert (processor.patch_size, processor.spatial_merge_size, processor.image_processor.size["longest_edge"]) == (14, 2, 1540)
    counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    seen = _scan_matches_reference(tmp_path, wds, directory, processor, counter)
    assert seen["text"] >= 2 and seen["image"] >= 3 and seen["multi"] >= len(SIZES) - 2, seen
    assert seen["video"] >= 2 and seen["refused"] == 2 and seen["resized"] >= 4, seen


@pytest.fixture(scope="module")
def edge_only(tmp_path_factory) -> Path:
    """The edge-size samples up to 1000 px, alone in one shard (the variants below count these)."""
    root = tmp_path_factory.mktemp("mistral3_edges")
    kept = [size for size in SIZES if max(size) <= 1000]  # small: the defaults (patch 16, no merge) make ~4x the tokens
    edge_dataset(root, seed=13, samples_per_shard=1, sizes=kept, second_image=(64, 48))
    for path in root.glob("*.tar"):
        if path.name != "edges.tar":
            path.unlink()
    return root


@pytest.mark.torchvision
def test_processor_kwargs_change_the_rows_as_in_the_processor(edge_only, mistral_dirs, make_config):
    """patch_size and size from model.processor_kwargs, as ``from_pretrained`` hands them to the processor."""
    directory = mistral_dirs["transformers5"]
    kwargs = {"patch_size": 16, "size": {"longest_edge": 512}}
    processor = _processor(directory, **kwargs)
    assert (processor.patch_size, processor.image_processor.size["longest_edge"]) == (16, 512)
    config = make_config(wds_dir="unused", processor_dir=directory, model={"processor_kwargs": {
        "pretrained_model_name_or_path": str(directory), **kwargs}})  # fmt: skip
    counter = make_counter(config)
    assert (counter.rules.patch_size, counter.rules.max_size) == (16, (512, 512))
    assert _edge_counts_match(edge_only, counter, processor) >= 10


@pytest.mark.torchvision
def test_processor_defaults_apply_where_the_folder_is_silent(tmp_path, edge_only, make_config):
    """A processor_config.json without patch_size / spatial_merge_size: PixtralProcessor's own defaults."""
    directory = build_processor_dir(tmp_path / "silent", "mistral3", layout="hub")
    settings = json.loads((directory / "processor_config.json").read_text())
    for name in ("patch_size", "spatial_merge_size"):
        del settings[name]
    (directory / "processor_config.json").write_text(json.dumps(settings))
    processor = _processor(directory)
    counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    assert (counter.rules.patch_size, counter.rules.merge_size) == (processor.patch_size, processor.spatial_merge_size)
    assert _edge_counts_match(edge_only, counter, processor) >= 10


@pytest.mark.torchvision
def test_the_transformers5_layout_is_what_save_pretrained_writes(tmp_path, mistral_dirs):
    """The hand-written transformers5 processor_config.json equals the real PixtralProcessor.save_pretrained's."""
    saved = tmp_path / "saved"
    _processor(mistral_dirs["hub"]).save_pretrained(saved)
    ours = json.loads((mistral_dirs["transformers5"] / "processor_config.json").read_text())
    assert ours == json.loads((saved / "processor_config.json").read_text())
    assert not (mistral_dirs["transformers5"] / "preprocessor_config.json").exists()


def test_a_video_item_is_dropped_as_unsupported_media(mistral_dirs, make_config):
    counter = make_counter(make_config(wds_dir="unused", processor_dir=mistral_dirs["hub"]))
    with pytest.raises(DropError) as caught:
        counter.probe("video", b"not even read", part="clip.mp4")
    assert caught.value.reason == Reason.UNSUPPORTED_MEDIA
    assert "mistral3 takes no video (PixtralProcessor has no video processor)" in str(caught.value)


def test_settings_are_read_from_both_layouts(tmp_path, mistral_dirs, make_config):
    for directory in mistral_dirs.values():
        rules = load_model_rules(make_config(wds_dir="unused", processor_dir=directory).model)
        size = AutoImageProcessor.from_pretrained(directory).size  # transformers' own reading of the folder
        assert (rules.model_type, rules.fast) == ("mistral3", True)
        assert (rules.patch_size, rules.merge_size) == (14, 2)
        assert rules.max_size == (size["longest_edge"], size["longest_edge"]) == (1540, 1540)
    custom = build_processor_dir(tmp_path / "custom", "mistral3")
    settings = json.loads((custom / "preprocessor_config.json").read_text())
    del settings["size"]  # the image processor's own default size then applies
    (custom / "preprocessor_config.json").write_text(json.dumps(settings))
    size = AutoImageProcessor.from_pretrained(custom).size
    rules = load_model_rules(make_config(wds_dir="unused", processor_dir=custom).model)
    assert rules.max_size == (size["longest_edge"], size["longest_edge"])
    for bad, match in (({"size": {"shortest_edge": 448}}, "longest_edge"), ({"do_resize": False}, "do_resize"),
                       ({"image_token": "<image>"}, "image_token"), ({"spatial_merge_size": "2"}, "spatial_merge_size")):  # fmt: skip
        config = make_config(wds_dir="unused", processor_dir=custom, model={"processor_kwargs": {
            "pretrained_model_name_or_path": str(custom), **bad}})  # fmt: skip
        with pytest.raises(ConfigError, match=match):
            load_model_rules(config.model)
