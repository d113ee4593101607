"""Mistral3 (Pixtral) settings: what only Mistral3 has, beyond the conformance table's checks.

Counts against the real ``PixtralProcessor`` on the whole scan (both layouts, materialize, refused and
dropped samples, the settings read from both layouts) are the ``mistral3`` row of ``tests/_families_table.py``.
Here, with the real processor (``AutoProcessor``; its module imports torchvision, so those tests are marked
``torchvision`` and run in ``.venv-ref``) as the oracle on the row's edge images up to 1000 px:

- ``patch_size`` / ``size`` from ``model.processor_kwargs`` and the processor's own defaults where the folder
  is silent change the rows as in the processor (``count`` and ``materialize``; refused images dropped as
  ``unsupported_aspect``);
- the hand-written transformers5 ``processor_config.json`` equals the real ``save_pretrained``'s, and the
  processor's media ids are its three tokens (``[IMG]``, ``[IMG_BREAK]``, ``[IMG_END]``);
- the image processor's default ``size`` (the folder without one) is what the rules read, and settings the
  count cannot follow are refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _families_table import MISTRAL3_SIZES, row
from _family_kit import edge_dataset, samples_in
from transformers import AutoImageProcessor

from vlmpack_offline.errors import ConfigError
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens import load_model_rules, make_counter

MISTRAL3 = row("mistral3")


@pytest.fixture(scope="module")
def mistral_dirs(tmp_path_factory) -> dict[str, Path]:
    return MISTRAL3.folders(tmp_path_factory.mktemp("mistral3"))


@pytest.fixture(scope="module")
def edge_only(tmp_path_factory) -> Path:
    """The edge-size samples up to 1000 px, alone in one shard (the variants below count these)."""
    root = tmp_path_factory.mktemp("mistral3_edges")
    kept = [size for size in MISTRAL3_SIZES if max(size) <= 1000]  # small: the defaults (patch 16, no merge) make ~4x the tokens
    edge_dataset(root, seed=13, samples_per_shard=1, sizes=kept, second_image=(64, 48))
    for path in root.glob("*.tar"):
        if path.name != "edges.tar":
            path.unlink()
    return root


def _edge_counts_match(root: Path, counter, processor) -> int:
    """``counter`` counts and materializes every sample under ``root`` as ``processor`` does (or drops the
    ones it refuses as ``unsupported_aspect``); how many it counted."""
    media_ids = MISTRAL3.media_ids(processor)
    checked = 0
    for key, (conversation, parts) in samples_in(root).items():
        try:
            ids = MISTRAL3.reference_ids(processor, conversation, parts, counter)
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


@pytest.mark.torchvision
def test_processor_kwargs_change_the_rows_as_in_the_processor(edge_only, mistral_dirs, make_config):
    """patch_size and size from model.processor_kwargs, as ``from_pretrained`` hands them to the processor."""
    directory = mistral_dirs["transformers5"]
    kwargs = {"patch_size": 16, "size": {"longest_edge": 512}}
    processor = MISTRAL3.oracle(directory, **kwargs)
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
    processor = MISTRAL3.oracle(directory)
    counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    assert (counter.rules.patch_size, counter.rules.merge_size) == (processor.patch_size, processor.spatial_merge_size)
    assert _edge_counts_match(edge_only, counter, processor) >= 10


@pytest.mark.torchvision
def test_the_transformers5_layout_is_what_save_pretrained_writes(tmp_path, mistral_dirs):
    """The hand-written transformers5 processor_config.json equals the real PixtralProcessor.save_pretrained's."""
    saved = tmp_path / "saved"
    processor = MISTRAL3.oracle(mistral_dirs["hub"])
    assert len(MISTRAL3.media_ids(processor)) == 3  # [IMG], [IMG_BREAK], [IMG_END]: what media_tokens counts
    processor.save_pretrained(saved)
    ours = json.loads((mistral_dirs["transformers5"] / "processor_config.json").read_text())
    assert ours == json.loads((saved / "processor_config.json").read_text())
    assert not (mistral_dirs["transformers5"] / "preprocessor_config.json").exists()


def test_the_size_is_read_as_the_image_processor_reads_it(tmp_path, mistral_dirs, make_config):
    for directory in mistral_dirs.values():
        rules = load_model_rules(make_config(wds_dir="unused", processor_dir=directory).model)
        size = AutoImageProcessor.from_pretrained(directory).size  # transformers' own reading of the folder
        assert rules.max_size == (size["longest_edge"], size["longest_edge"])
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
