"""InternVL: what only InternVL has, beyond the conformance table's checks.

Counts against the real ``InternVLProcessor`` on the whole scan (both layouts, every edge size, tiles,
materialize, the tile and ``crop_to_patches`` variants, the settings read from both layouts) are the
``internvl`` row of ``tests/_families_table.py``; videos are ``tests/test_internvl_video.py``. Here, with the
same oracle (the real class restricted to its image processor and tokenizer: InternVL's video processor
imports torchvision): an ``image_seq_length`` in ``processor_config.json`` is read as the processor reads it,
and a ``size`` that is not a tile is refused.
"""

from __future__ import annotations

import json

import pytest
from _families_table import row

from vlmpack_offline.errors import ConfigError
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens import load_model_rules

ORACLE = row("internvl").oracle  # the real InternVLProcessor, images and text


def test_image_seq_length_is_read_as_the_processor_reads_it_and_a_non_tile_size_is_refused(tmp_path, make_config):
    custom = build_processor_dir(tmp_path / "custom", "internvl")
    (custom / "processor_config.json").write_text(json.dumps({"image_seq_length": 64, "processor_class": "InternVLProcessor"}))
    rules = load_model_rules(make_config(wds_dir="unused", processor_dir=custom).model)
    assert rules.tokens_per_image == ORACLE(custom).image_seq_length == 64
    config = make_config(wds_dir="unused", processor_dir=custom, model={"processor_kwargs": {
        "pretrained_model_name_or_path": str(custom), "size": {"shortest_edge": 448}}})  # fmt: skip
    with pytest.raises(ConfigError, match="counts tiles of"):
        load_model_rules(config.model)
