"""docs/config.md is generated from the config dataclasses and cannot go stale or miss a field."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from vlmpack_offline.config import Config
from vlmpack_offline.config_reference import UndocumentedField, field_comments, render_config_reference

DOC = Path(__file__).parents[1] / "docs" / "config.md"


def test_docs_config_md_is_what_the_dataclasses_render():
    assert DOC.read_text() == render_config_reference(), "docs/config.md is stale: run `make config-doc`"


def test_every_key_of_every_section_is_in_the_reference():
    text = render_config_reference()
    for section in dataclasses.fields(Config):
        if section.name not in ("source", "notices"):
            for field in dataclasses.fields(getattr(Config(), section.name)):
                assert f"| `{section.name}.{field.name}` |" in text


@dataclasses.dataclass(frozen=True)
class _Documented:
    # the comment lines above a field document it
    # when its own line has none
    above: int = 1
    beside: str = "x"  # the comment beside a field documents it


@dataclasses.dataclass(frozen=True)
class _Undocumented:
    fine: int = 1  # documented
    bare: int = 2


def test_a_field_is_documented_by_the_comment_beside_or_above_it():
    assert field_comments(_Documented) == {
        "above": "the comment lines above a field document it when its own line has none",
        "beside": "the comment beside a field documents it",
    }


def test_a_field_without_a_comment_fails_rendering_and_names_itself():
    with pytest.raises(UndocumentedField, match=r"_Undocumented\.bare.*config\.py"):
        field_comments(_Undocumented)
