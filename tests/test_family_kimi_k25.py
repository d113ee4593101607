"""Kimi-K2.5 (``kimi_k25``): what only Kimi has, beyond the conformance table's checks.

Counts against the real ``Kimi_K25Processor`` on the whole scan (both layouts, images and videos,
materialize, the ``processor_kwargs`` variant, the settings read from both layouts) are the ``kimi_k25`` row of
``tests/_families_table.py``. Here: ``navit_resize`` (written out here: transformers' lives in a torchvision
module) equals transformers' own over a grid of sizes and settings; without torchvision the scan still counts
on the fast path, and the loader says in one line that it needs torchvision; the rules follow
``processor_kwargs``, refuse what the count cannot follow and a remote-code ``media_proc_cfg`` folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _families_table import row
from _family_kit import scan_config
from click.testing import CliRunner

from vlmpack_offline.cli import cli
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.families.kimi_k25 import KIMI_K25, navit_resize
from vlmpack_offline.manifest import Manifest, manifest_path
from vlmpack_offline.synthetic.shards import image_bytes
from vlmpack_offline.tokens import load_model_rules

PATH_LINE = row("kimi_k25").path_line


@pytest.fixture(scope="module")
def kimi_dirs(tmp_path_factory) -> dict[str, Path]:
    return row("kimi_k25").folders(tmp_path_factory.mktemp("kimi_k25"))


def _run_scan(tmp_path: Path, wds: Path, directory: Path, path_line: str, **kwargs) -> list:
    result = CliRunner().invoke(cli, ["scan", "--config", str(scan_config(tmp_path, wds, directory, **kwargs))])
    assert result.exit_code == 0, result.output + repr(result.exception)
    assert path_line in result.output, result.output
    with Manifest(manifest_path(tmp_path / "work")) as manifest:
        return list(manifest.iter_samples())


@pytest.mark.torchvision
def test_navit_resize_equals_transformers():
    from transformers.models.kimi_k25 import image_processing_kimi_k25 as real

    settings = [(14, 2, 16384, 512), (14, 2, 1024, 64), (16, 2, 4096, 100), (14, 3, 333, 17)]
    sizes = [(h, w) for h in (1, 2, 13, 14, 15, 27, 28, 29, 55, 97, 448, 511, 1000, 1023, 2047, 4999, 7168, 7169,
                               9000, 20000) for w in (1, 5, 14, 28, 30, 300, 640, 1280, 3001, 7170, 12345)]  # fmt: skip
    for patch, merge, budget, side in settings:
        for height, width in sizes:
            expected = real.navit_resize(height, width, patch, merge, budget, side)
            assert navit_resize(height, width, patch, merge, budget, side) == expected, (height, width, patch)


def test_the_scan_counts_on_the_fast_path_without_the_processor(tmp_path, kimi_dirs):
    """No torchvision needed: one image of 640x480 is 414 <|media_pad|> (the real processor's count, .venv-ref)."""
    from vlmpack_offline.synthetic.shards import SyntheticSample, write_shard

    wds = tmp_path / "wds"
    wds.mkdir()
    user = [{"type": "image", "image": "a.jpg"}, {"type": "text", "text": "What is it?"}]
    messages = [{"role": "user", "content": user}, {"role": "assistant", "content": "A picture."}]
    text_only = [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]
    write_shard(wds / "a.tar", [SyntheticSample(key="img", json={"messages": messages}, media={"a.jpg": image_bytes(640, 480)}),
                                SyntheticSample(key="txt", json={"messages": text_only}, media={})])  # fmt: skip
    rows = {row.key: row for row in _run_scan(tmp_path, wds, kimi_dirs["hub"], PATH_LINE)}
    assert rows["img"].status == rows["txt"].status == "ok"
    assert rows["img"].media_tokens == 414 and rows["txt"].media_tokens == 0
    # the image adds its 414 pads where the text has one
    assert rows["img"].token_len - 414 + 1 > rows["txt"].token_len


def test_processor_kwargs_reach_the_rules_and_positions_are_1d(tmp_path, kimi_dirs, make_config):
    assert KIMI_K25.positions == "1d"
    for directory in kimi_dirs.values():
        kwargs = {"pretrained_model_name_or_path": str(directory), "max_patches": 999, "patch_size": 16,
                  "size": {"max_height": 40, "max_width": 40}}  # fmt: skip
        rules = load_model_rules(make_config(wds_dir="unused", processor_dir=directory, model={"processor_kwargs": kwargs}).model)
        assert (rules.patch_size, rules.max_patches, rules.max_side_patches) == (16, 999, 40)
    directory = kimi_dirs["hub"]
    for bad, match in (({"size": {"height": 448, "width": 448}}, "max_height"),
                       ({"size": {"max_height": 10, "max_width": 20}}, "max_height"),
                       ({"do_resize": False}, "do_resize")):  # fmt: skip
        config = make_config(wds_dir="unused", processor_dir=directory, model={"processor_kwargs": {
            "pretrained_model_name_or_path": str(directory), **bad}})  # fmt: skip
        with pytest.raises(ConfigError, match=match):
            load_model_rules(config.model)


def test_a_remote_code_media_proc_cfg_folder_is_refused(tmp_path, kimi_dirs, make_config):
    directory = Path(shutil.copytree(kimi_dirs["hub"], tmp_path / "remote"))
    settings = {"media_proc_cfg": {"in_patch_limit": 16384, "patch_size": 14, "merge_kernel_size": 2,
                                   "patch_limit_on_one_side": 512}}  # fmt: skip
    (directory / "preprocessor_config.json").write_text(json.dumps(settings))
    with pytest.raises(ConfigError, match="media_proc_cfg"):
        load_model_rules(make_config(wds_dir="unused", processor_dir=directory).model)


def test_the_loader_says_in_one_line_that_it_needs_torchvision(kimi_dirs):
    from transformers.utils import is_torchvision_available

    if is_torchvision_available():
        pytest.skip("torchvision is installed: the loader works (test_conformance_loader.py)")
    from vlmpack_offline.config import config_from_dict
    from vlmpack_offline.loader import EncoderOptions, PackEncoder

    directory = kimi_dirs["hub"]
    config = config_from_dict({"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(directory)}}}, source="test")
    with pytest.raises(ConfigError) as caught:
        PackEncoder(config, EncoderOptions(check_lengths=False))
    message = str(caught.value)
    assert "\n" not in message and "kimi_k25 image processor needs torchvision" in message, message
