"""Gemma3 on the fast path: counts equal the real ``Gemma3Processor``, sample by sample.

The reference is the real ``Gemma3Processor`` that ``AutoProcessor`` builds from the folder,
with the real ``Gemma3ImageProcessorPil`` (no torchvision needed), on the decoded images: its
``input_ids`` are compared by length with the scan's ``token_len`` (the whole ``vlmpack scan``
stage), token by token with ``materialize``, and its ``<image_soft_token>`` ids with
``media_tokens``. The folder is the Qwen BPE plus Gemma3's special tokens, the public
preprocessor settings and a Gemma3-style template, in both layouts. Gemma3 takes no video,
so a video sample is dropped as ``unsupported_media``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from _family_kit import edge_dataset, samples_in, scan_config
from click.testing import CliRunner
from PIL import Image
from transformers import AutoProcessor

from vlmpack_offline.cli import cli
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens import load_model_rules, make_counter

LAYOUTS = ("hub", "transformers5")


@pytest.fixture(scope="module")
def gemma3_dirs(tmp_path_factory) -> dict[str, Path]:
    return {layout: build_processor_dir(tmp_path_factory.mktemp(f"gemma3_{layout}"), "gemma3", layout=layout)
            for layout in LAYOUTS}  # fmt: skip


@pytest.fixture(scope="module")
def wds(tmp_path_factory) -> Path:
    """A generated dataset (text, one image, multi-image, tiny and 4000x3000 images, videos) plus
    samples with extreme aspect ratios and images placed before, between and after text."""
    root = tmp_path_factory.mktemp("gemma3_wds")
    return edge_dataset(root, seed=5, samples_per_shard=14, sizes=[(1, 1), (2000, 10), (10, 2000), (896, 896), (897, 300)], second_image=(300, 200))



def _reference(processor, conversation, parts) -> list[int]:
    text = processor.tokenizer.apply_chat_template(list(conversation.messages), tokenize=False)
    images = [Image.open(io.BytesIO(parts[m.part])) for m in conversation.media]
    return list(processor(text=[text], images=images or None)["input_ids"][0])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_scan_counts_equal_the_real_gemma3_processor(tmp_path, layout, gemma3_dirs, wds):
    directory = gemma3_dirs[layout]
    assert (directory / "preprocessor_config.json").exists() == (layout == "hub")
    processor = AutoProcessor.from_pretrained(directory)
    assert type(processor).__name__ == "Gemma3Processor" and processor.image_seq_length == 256
    soft = processor.tokenizer.image_token_id
    result = CliRunner().invoke(cli, ["scan", "--config", str(scan_config(tmp_path, wds, directory, max_token_len=16384))])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert "gemma3: fast path (256 tokens per image)" in result.output
    samples = samples_in(wds)
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        rows = list(manifest.iter_samples())
    assert len(rows) == len(samples)
    seen = {"text": 0, "image": 0, "multi": 0, "video": 0}
    for row in rows:
        conversation, parts = samples[row.key]
        kinds = [m.kind for m in conversation.media]
        if "video" in kinds:
            assert row.status == Reason.UNSUPPORTED_MEDIA, (row.key, row.status, row.error)
            seen["video"] += 1
            continue
        assert row.status == "ok", (row.key, row.status, row.error)
        ids = _reference(processor, conversation, parts)
        assert (row.token_len, row.media_tokens) == (len(ids), ids.count(soft)), row.key
        assert ids.count(soft) == 256 * len(kinds)
        seen["text" if not kinds else "image" if len(kinds) == 1 else "multi"] += 1
    assert seen["text"] >= 3 and seen["image"] >= 5 and seen["multi"] >= 8 and seen["video"] >= 2, seen


def test_materialize_gives_the_processor_input_ids(gemma3_dirs, wds, make_config):
    directory = gemma3_dirs["hub"]
    processor = AutoProcessor.from_pretrained(directory)
    counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    checked = 0
    for key, (conversation, parts) in samples_in(wds).items():
        if conversation.media_type == "video" or any(m.kind == "video" for m in conversation.media):
            continue
        media = [counter.probe(m.kind, parts[m.part], part=m.part) for m in conversation.media]
        materialized = counter.materialize(conversation, media)
        ids = _reference(processor, conversation, parts)
        assert materialized.input_ids == ids
        learned = [i for i, m in zip(ids, materialized.assistant_mask, strict=True) if m]
        assert processor.tokenizer.image_token_id not in learned
        if key.startswith("edge"):  # one assistant turn: its text and <end_of_turn>, nothing else
            assert processor.tokenizer.decode(learned) == f"Answer {int(key[4:])}.<end_of_turn>"
        checked += 1
    assert checked >= 15


def test_a_video_item_is_dropped_as_unsupported_media(gemma3_dirs, make_config):
    counter = make_counter(make_config(wds_dir="unused", processor_dir=gemma3_dirs["hub"]))
    with pytest.raises(DropError) as caught:
        counter.probe("video", b"not even read", part="clip.mp4")
    assert caught.value.reason == Reason.UNSUPPORTED_MEDIA and "gemma3 takes no video" in str(caught.value)


def test_settings_are_read_from_both_layouts_and_pan_and_scan_is_refused(tmp_path, gemma3_dirs, make_config):
    for directory in gemma3_dirs.values():
        rules = load_model_rules(make_config(wds_dir="unused", processor_dir=directory).model)
        assert (rules.model_type, rules.fast, rules.tokens_per_image) == ("gemma3", True, 256)
    custom = build_processor_dir(tmp_path / "custom", "gemma3")
    (custom / "processor_config.json").write_text(json.dumps({"image_seq_length": 64, "processor_class": "Gemma3Processor"}))
    rules = load_model_rules(make_config(wds_dir="unused", processor_dir=custom).model)
    assert rules.tokens_per_image == AutoProcessor.from_pretrained(custom).image_seq_length == 64
    config = make_config(wds_dir="unused", processor_dir=custom, model={"processor_kwargs": {
        "pretrained_model_name_or_path": str(custom), "do_pan_and_scan": True}})  # fmt: skip
    with pytest.raises(ConfigError, match="do_pan_and_scan is on"):
        load_model_rules(config.model)
