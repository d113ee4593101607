"""Gemma3's own settings: what only Gemma3 has, beyond the conformance table's checks.

Counts against the real ``Gemma3Processor`` (both layouts, materialize, the dropped video, the settings
read from both layouts) are the ``gemma3`` row of ``tests/_families_table.py``. Here: an
``image_seq_length`` in ``processor_config.json`` is read as ``AutoProcessor`` reads it (the oracle), and
``do_pan_and_scan`` (crops the fast path does not count) is refused at load.
"""

from __future__ import annotations

import json

import pytest
from transformers import AutoProcessor

from vlmpack_offline.errors import ConfigError
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens import load_model_rules


def test_image_seq_length_is_read_as_the_processor_reads_it_and_pan_and_scan_is_refused(tmp_path, make_config):
    custom = build_processor_dir(tmp_path / "custom", "gemma3")
    (custom / "processor_config.json").write_text(json.dumps({"image_seq_length": 64, "processor_class": "Gemma3Processor"}))
    rules = load_model_rules(make_config(wds_dir="unused", processor_dir=custom).model)
    assert rules.tokens_per_image == AutoProcessor.from_pretrained(custom).image_seq_length == 64
    config = make_config(wds_dir="unused", processor_dir=custom, model={"processor_kwargs": {
        "pretrained_model_name_or_path": str(custom), "do_pan_and_scan": True}})  # fmt: skip
    with pytest.raises(ConfigError, match="do_pan_and_scan is on"):
        load_model_rules(config.model)
