"""docs/format.md stays true: its example parses, and it names every field and file the writer emits."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from vlmpack_offline.output.energon_meta import META_DIR
from vlmpack_offline.packed_format import IDS_PART, PACK_FORMAT, PackedSample, PackedSubSample, pack_key
from vlmpack_offline.packed_settings import SETTINGS_NAME

DOC = (Path(__file__).parents[1] / "docs" / "format.md").read_text()


def test_the_example_pack_parses_and_round_trips():
    raw = json.loads(re.search(r"```json\n(.*?)```", DOC, re.S).group(1))
    pack = PackedSample.from_json(raw)
    assert pack.to_json() == raw and raw["format"] == PACK_FORMAT
    assert f"`{pack_key(pack.pack_id)}.json`" in DOC


def test_every_field_and_file_is_documented():
    for field in dataclasses.fields(PackedSample):
        assert f"`{field.name}`" in DOC, field.name
    for field in dataclasses.fields(PackedSubSample):
        assert f"`samples[].{field.name}`" in DOC, field.name
    for name in (IDS_PART, META_DIR, SETTINGS_NAME, "dataset.yaml", "split.yaml", ".info.json", ".tar.idx", "`format`"):
        assert name in DOC, name


def test_the_settings_keys_are_documented(tmp_path):
    from vlmpack_offline.config import config_from_dict
    from vlmpack_offline.packed_settings import packed_settings
    from vlmpack_offline.synthetic.processor_dir import build_processor_dir

    proc = build_processor_dir(tmp_path / "proc")
    config = config_from_dict({"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(proc)}}})
    for key in packed_settings(config, "plan-fp"):
        assert f"`{key}`" in DOC, key
