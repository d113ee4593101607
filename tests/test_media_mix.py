"""A model whose forward takes images or videos in one call never meets a pack or sample holding both.

Oracle: transformers' own modeling sources. Every ``forward`` in the installed release that raises when
``pixel_values`` and ``pixel_values_videos`` are both given is found by reading the code (an ``if`` testing
both ``is not None``, whose body raises), and ``families.media_mix.ONE_MEDIA_KIND`` must list exactly those
model types. For Molmo2 (the one in 5.24) the scan drops a sample with an image and a video, naming the rule,
keeps the others, and ``packing.group_by: none`` is refused at scan and at bucket, before anything is read.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import transformers
import yaml
from _family_kit import scan_config
from click.testing import CliRunner

from vlmpack_offline.cli import cli
from vlmpack_offline.config import load_config
from vlmpack_offline.families.media_mix import ONE_MEDIA_KIND
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, video_bytes, write_shard


def _not_none(term: ast.expr) -> str:
    """``name`` for a term ``name is not None``, else ""."""
    if isinstance(term, ast.Compare) and isinstance(term.left, ast.Name) and isinstance(term.ops[0], ast.IsNot):
        return term.left.id
    return ""


def _refuses_both(source: str) -> bool:
    """An ``if pixel_values is not None and pixel_values_videos is not None: raise ...`` in the source (both
    terms of the ``and`` itself: ``(a or b) and c`` is another rule)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and isinstance(node.test, ast.BoolOp) and isinstance(node.test.op, ast.And):
            both = {"pixel_values", "pixel_values_videos"} <= {_not_none(term) for term in node.test.values}
            if both and any(isinstance(statement, ast.Raise) for statement in node.body):
                return True
    return False


def test_the_table_lists_every_forward_that_refuses_images_and_videos_together():
    models = Path(transformers.__file__).parent / "models"
    found = {path.parent.name for path in models.glob("*/modeling_*.py") if _refuses_both(path.read_text("utf-8"))}
    assert found == set(ONE_MEDIA_KIND)


def _message(kinds: list[str]) -> dict:
    content = [{"type": kind, kind: f"{kind}{i}.{'jpg' if kind == 'image' else 'mp4'}"} for i, kind in enumerate(kinds)]
    return {"messages": [{"role": "user", "content": [*content, {"type": "text", "text": "What do you see?"}]},
                         {"role": "assistant", "content": [{"type": "text", "text": "A grey pattern."}]}]}  # fmt: skip


def _media(kinds: list[str]) -> dict[str, bytes]:
    return {f"{kind}{i}.{'jpg' if kind == 'image' else 'mp4'}":
            image_bytes(96, 64, seed=i) if kind == "image" else video_bytes(20, 8, 64, 48, seed=i)
            for i, kind in enumerate(kinds)}  # fmt: skip


@pytest.fixture(scope="module")
def molmo2(tmp_path_factory) -> Path:
    return build_processor_dir(tmp_path_factory.mktemp("molmo2") / "molmo2", "molmo2", layout="transformers5", video=True)


def test_molmo2_drops_a_sample_with_an_image_and_a_video_and_keeps_the_rest(tmp_path, molmo2):
    samples = {"both": ["image", "video"], "images": ["image", "image"], "video": ["video"]}
    write_shard(tmp_path / "wds" / "s.tar",
                [SyntheticSample(key=key, json=_message(kinds), media=_media(kinds)) for key, kinds in samples.items()])
    config = scan_config(tmp_path, tmp_path / "wds", molmo2, sections={"loss": {"train_on": "all"}})
    result = CliRunner().invoke(cli, ["scan", "--config", str(config)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    with Manifest(manifest_path(load_config(config).data.work_dir)) as manifest:
        rows = {row.key: row for row in manifest.iter_samples()}
    assert rows["images"].status == rows["video"].status == "ok"
    assert rows["both"].status == "unsupported_media"
    assert "images and videos" in rows["both"].error and "Molmo2Model.forward" in rows["both"].error


def test_molmo2_refuses_packs_of_any_media_mix_before_reading(tmp_path, molmo2):
    write_shard(tmp_path / "wds" / "s.tar", [SyntheticSample(key="t", json=_message([]))])
    config = scan_config(tmp_path, tmp_path / "wds", molmo2, sections={
        "loss": {"train_on": "all"}, "packing": {"group_by": "none"}, "sample": {"sample_type": "vlmpack_packed"}})
    result = CliRunner().invoke(cli, ["scan", "--config", str(config)])
    said = f"{result.output}{result.exception}"
    assert result.exit_code != 0 and "packing.group_by: none" in said and "group_by: media_type" in said, said
    assert not manifest_path(load_config(config).data.work_dir).exists()
    # scanned with packs of one media type, then the grouping changed: bucket refuses it too
    raw = yaml.safe_load(config.read_text())
    raw["packing"]["group_by"] = "media_type"
    config.write_text(yaml.safe_dump(raw))
    assert CliRunner().invoke(cli, ["scan", "--config", str(config)]).exit_code == 0
    raw["packing"]["group_by"] = "none"
    config.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(cli, ["bucket", "--config", str(config)])
    said = f"{result.output}{result.exception}"
    assert result.exit_code != 0 and "packing.group_by: none" in said and "Molmo2Model.forward" in said, said
