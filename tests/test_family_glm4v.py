"""GLM-4.1V / 4.5V / 4.6V images: what only GLM has, beyond the conformance table's checks.

Counts against the real ``Glm4vProcessor`` / ``Glm46VProcessor`` on the whole scan (both layouts, every edge
size, the two 5000:1 images the processor refuses, materialize, the ``size`` variant, the settings read from
both layouts) are the ``glm4v``, ``glm4v_moe`` and ``glm46v`` rows of ``tests/_families_table.py``; videos are
``tests/test_family_glm4v_video.py``. Here, with the same oracle (the real class restricted to its image
processor and tokenizer: GLM's video processor imports torchvision): a folder without ``size`` takes the image
processor's own default, a ``size`` of another shape is refused, and Qwen's top-level ``min_pixels`` /
``max_pixels`` are ignored, as ``Glm4vImageProcessorPil`` ignores them.
"""

from __future__ import annotations

import io
import json

import pytest
from _families_table import row
from PIL import Image

from vlmpack_offline.errors import ConfigError
from vlmpack_offline.families.glm4v import GLM4V
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.tokens import load_model_rules, make_counter

ORACLE = row("glm4v").oracle  # the real Glm4vProcessor, images and text


def test_a_folder_without_size_takes_the_image_processors_default(tmp_path, make_config):
    custom = build_processor_dir(tmp_path / "custom", "glm4v")
    settings = json.loads((custom / "preprocessor_config.json").read_text())
    del settings["size"]  # the image processor's own default size then applies
    (custom / "preprocessor_config.json").write_text(json.dumps(settings))
    size = ORACLE(custom).image_processor.size
    rules = load_model_rules(make_config(wds_dir="unused", processor_dir=custom).model)
    assert (rules.min_pixels, rules.max_pixels) == (size["shortest_edge"], size["longest_edge"])
    config = make_config(wds_dir="unused", processor_dir=custom, model={"processor_kwargs": {
        "pretrained_model_name_or_path": str(custom), "size": {"height": 448, "width": 448}}})  # fmt: skip
    with pytest.raises(ConfigError, match="shortest_edge"):
        load_model_rules(config.model)


def test_top_level_min_max_pixels_are_ignored_as_by_the_processor(tmp_path, make_config):
    """Qwen's image processors take min_pixels / max_pixels; Glm4vImageProcessorPil reads size only."""
    directory = build_processor_dir(tmp_path / "glm4v", "glm4v")
    kwargs = {"min_pixels": 100, "max_pixels": 2 * 28 * 28 * 16}
    processor = ORACLE(directory, **kwargs)
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

