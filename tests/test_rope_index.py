"""Positions from the model's own rope index, for every vision-language type transformers 5.24 ships.

The oracle is not our code: the model's own ``forward`` (its image-text-to-text class, built on the
meta device from the type's config: no weights) run without pixels on hand-made ids and grids. It
computes its positions itself (``compute_3d_position_ids`` -> ``get_rope_index``, with the arguments the
forward passes) and hands them to its text model, where a hook takes them and stops the forward. The
loader's ``RopeIndex`` must give the same tensors from the same fields, for images and videos (the
omni models' ``video_second_per_grid`` reaches their ``second_per_grids`` positionally; a wrong
mapping moves the video's temporal positions). Configs are transformers' defaults for the type plus
the values a published checkpoint's config.json carries where the defaults lack them (Qwen-Omni's
``vision_start_token_id``, HunYuan-VL's ``mrope_section``: 4 axes here, so N-axis positions are
checked too).

Which class holds the function is a table (the survey of issue 39), and a sweep over every
image-text-to-text type checks that any type whose modeling module defines ``get_rope_index`` (read
from its source file) gets it: no such model falls back to 1-D positions. Building the rope class on
the meta device costs about 0.1 s even for Qwen3-Omni's 30B default thinker (measured:
``RopeIndex(AutoConfig.for_model('qwen3_omni_moe'))`` 0.07-0.16 s on this 2-core machine).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from transformers import AutoConfig
from transformers.models.auto.configuration_auto import model_type_to_module_name
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES,
)

from vlmpack_offline.loader.model_classes import find_class
from vlmpack_offline.loader.rope import RopeError, RopeIndex, recurrent_layer_types

# type -> (the class whose instance computes positions, the sub-config it is built from)
WHERE = {
    "ernie4_5_vl_moe": ("Ernie4_5_VLMoeModel", ""),
    "paddleocr_vl": ("PaddleOCRVLModel", ""),
    "hunyuan_vl": ("HunYuanVLModel", ""),
    "minicpmv4_7": ("MiniCPMV4_7Model", ""),
    "qwen3_omni_moe": ("Qwen3OmniMoeThinkerModel", "thinker_config"),
    "qwen2_5_omni": ("Qwen2_5OmniThinkerModel", "thinker_config"),
    "qwen2_5_vl": ("Qwen2_5_VLModel", ""),
    "qwen3_vl": ("Qwen3VLModel", ""),
    "glm4v": ("Glm4vModel", ""),
}
ONE_D = ["gemma4", "glm5_next", "molmo2", "lfm3_vl", "llama4", "phi4_multimodal"]

# type -> (the class the model is trained as, its sub-config): the forward the oracle runs
FORWARD = {
    "qwen2_5_vl": ("Qwen2_5_VLForConditionalGeneration", ""),
    "qwen3_vl": ("Qwen3VLForConditionalGeneration", ""),
    "glm4v": ("Glm4vForConditionalGeneration", ""),
    "ernie4_5_vl_moe": ("Ernie4_5_VLMoeForConditionalGeneration", ""),
    "paddleocr_vl": ("PaddleOCRVLForConditionalGeneration", ""),
    "qwen3_omni_moe": ("Qwen3OmniMoeThinkerForConditionalGeneration", "thinker_config"),
    "qwen2_5_omni": ("Qwen2_5OmniThinkerForConditionalGeneration", "thinker_config"),
    "hunyuan_vl": ("HunYuanVLForConditionalGeneration", ""),
}


def checkpoint_config(model_type: str):
    """transformers' defaults for the type, with what a published config.json adds where they lack it."""
    config = AutoConfig.for_model(model_type)
    if model_type in ("qwen3_omni_moe", "qwen2_5_omni"):  # Qwen/Qwen3-Omni-*: thinker_config.vision_start_token_id
        config.thinker_config.vision_start_token_id = 151652
    if model_type == "hunyuan_vl":  # tencent/HunYuanOCR: 4 rope axes over head_dim 128
        config.text_config.head_dim = 128
        config.text_config.rope_parameters = {"rope_type": "default", "rope_theta": 10000.0,
                                              "mrope_section": [16, 16, 16, 16]}  # fmt: skip
    return config


class _Stop(Exception):
    pass


def forward_positions(model_type: str, **inputs) -> torch.Tensor:
    """The positions the model's own forward hands its text model (module doc)."""
    config = checkpoint_config(model_type)
    name, sub = FORWARD[model_type]
    with torch.device("meta"):
        model = getattr(transformers, name)(getattr(config, sub) if sub else config)
    seen = {}

    def take(module, args, kwargs):
        seen["position_ids"] = kwargs["position_ids"]
        raise _Stop

    model.get_decoder().register_forward_pre_hook(take, with_kwargs=True)
    with pytest.raises(_Stop), torch.no_grad():
        model(**inputs)
    positions = seen["position_ids"]
    return positions[1:] if positions.shape[0] == len_axes(model_type) + 1 else positions  # a leading text row


def len_axes(model_type: str) -> int:
    return 4 if model_type == "hunyuan_vl" else 3


def _ids(config, model_type: str, kind: str, grid: list[int]) -> torch.Tensor:
    """Text, one media item of ``grid`` (t, h, w patches; merge 2) as the type's processor writes it, text."""
    main = getattr(config, "thinker_config", None) or config
    t, h, w = grid
    per_frame = h * w // 4
    if model_type == "hunyuan_vl":  # start + (h/2) rows of (w/2 + 1) + end, all the image token (HunYuanVLProcessor)
        span = [main.image_token_id] * ((h // 2) * (w // 2 + 1) + 2)
    elif kind == "image":
        start = getattr(main, "vision_start_token_id", None)
        span = ([start] if start is not None else []) + [main.image_token_id] * per_frame
    elif model_type == "qwen3_vl":  # each frame: <t seconds> <|vision_start|> pads <|vision_end|>
        span = [x for _ in range(t) for x in (99, main.vision_start_token_id, *[main.video_token_id] * per_frame,
                                               main.vision_end_token_id)]  # fmt: skip
    elif model_type == "glm4v":  # each temporal patch as an image between the video's markers, then its time
        frames = [x for _ in range(t) for x in (main.image_start_token_id, *[main.image_token_id] * per_frame,
                                                  main.image_end_token_id, 99)]  # fmt: skip
        span = [main.video_start_token_id, *frames, main.video_end_token_id]
    elif model_type == "ernie4_5_vl_moe":  # two frames merge into one temporal patch
        span = [main.video_token_id] * (t * per_frame // 2)
    else:
        span = [main.vision_start_token_id] + [main.video_token_id] * (t * per_frame)
    return torch.tensor([[11, 12, *span, 13, 14]])


CASES = [(t, "image") for t in FORWARD] + [(t, "video") for t in FORWARD if t not in ("paddleocr_vl", "hunyuan_vl")]


@pytest.mark.parametrize(("model_type", "kind"), CASES)
def test_positions_equal_the_models_own_forward(model_type, kind):
    config = checkpoint_config(model_type)
    main = getattr(config, "thinker_config", None) or config
    grid = [1, 4, 6] if kind == "image" else [2, 4, 6]
    ids = _ids(config, model_type, kind, grid)
    mm = torch.zeros_like(ids, dtype=torch.int32)  # what the processor marks (GLM's frames are image tokens)
    mm[ids == (main.image_token_id if kind == "image" or model_type == "glm4v" else main.video_token_id)] = \
        1 if kind == "image" else 2  # fmt: skip
    grid = torch.tensor([grid])
    fields = {f"{kind}_grid_thw": grid}
    if kind == "video":  # seconds per temporal patch, by each forward's own name for it
        if model_type == "qwen2_5_vl":
            fields["second_per_grid_ts"] = torch.tensor([0.5])
        if "omni" in model_type:
            fields["video_second_per_grid"] = torch.tensor([0.5])
    expected = forward_positions(model_type, input_ids=ids, attention_mask=torch.ones_like(ids),
                                 mm_token_type_ids=mm, **fields)  # fmt: skip
    ours = RopeIndex(config).positions(ids, mm_token_type_ids=mm, **fields)
    assert ours.shape == (len_axes(model_type), 1, ids.shape[1])
    assert torch.equal(ours, expected.to(ours.dtype))
    assert not torch.equal(ours[0], ours[1])  # the media span has its own 2-D / 3-D positions: a real check


def test_video_seconds_move_the_omni_models_temporal_positions():
    """The mapping of ``video_second_per_grid`` is checked by the test above only if it matters: it does."""
    config = checkpoint_config("qwen3_omni_moe")
    ids = _ids(config, "qwen3_omni_moe", "video", [2, 4, 6])
    rope = RopeIndex(config)
    half = rope.positions(ids, video_grid_thw=torch.tensor([[2, 4, 6]]), video_second_per_grid=torch.tensor([0.5]))
    two = rope.positions(ids, video_grid_thw=torch.tensor([[2, 4, 6]]), video_second_per_grid=torch.tensor([2.0]))
    assert not torch.equal(half[0], two[0])


@pytest.mark.parametrize("model_type", sorted(WHERE))
def test_the_rope_index_is_found_where_the_model_defines_it(model_type):
    source = RopeIndex(checkpoint_config(model_type)).source
    assert (source.cls.__name__, source.path) == WHERE[model_type]


@pytest.mark.parametrize("model_type", ONE_D)
def test_models_without_a_rope_index_get_1d_positions(model_type):
    rope = RopeIndex(AutoConfig.for_model(model_type))
    assert not rope.is_mrope
    assert torch.equal(rope.positions(torch.tensor([[5, 6, 7]])), torch.tensor([[0, 1, 2]]))


def _defines_rope_index(model_type: str) -> bool:
    module = model_type_to_module_name(model_type)
    source = Path(transformers.__file__).parent / "models" / module / f"modeling_{module}.py"
    return source.is_file() and "def get_rope_index" in source.read_text()


def test_no_vision_language_model_with_a_rope_index_gets_1d_positions():
    """Every image-text-to-text / multimodal-LM type whose modeling module defines get_rope_index (by its source
    text) has the function found, whatever mapping names it or sub-config holds it."""
    types = sorted(t for t in {*MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES, *MODEL_FOR_MULTIMODAL_LM_MAPPING_NAMES}
                   if _defines_rope_index(t))  # fmt: skip
    assert len(types) >= 20  # the sweep has something to sweep (22 in transformers 5.24)
    missing = [t for t in types if find_class(AutoConfig.for_model(t), "get_rope_index") is None]
    assert missing == []


def test_a_config_the_model_cannot_be_built_from_is_refused_with_the_reason():
    with pytest.raises(RopeError, match=r"hunyuan_vl: the model's rope index \(HunYuanVLModel.get_rope_index\).*config.json"):
        RopeIndex(AutoConfig.for_model("hunyuan_vl"))  # transformers' defaults: no rope_parameters to build from


@pytest.mark.parametrize(("model_type", "recurrent"), [
    ("qwen3_5", True), ("glm5_next", True), ("minicpmv4_7", True), ("lfm3_vl", True),
    ("gemma4", False), ("qwen2_5_vl", False), ("ernie4_5_vl_moe", False),
])  # fmt: skip
def test_recurrent_layers_are_found_in_every_text_config(model_type, recurrent):
    """Linear attention (Qwen3.5, GLM-5-Next's KDA, MiniCPM-V 4.7's Qwen3.5 text) and LFM3's short convolutions
    carry state across tokens: packs of such models must pass the boundaries (PackBatch.linear_attention)."""
    assert {"linear_attention", "conv"} <= recurrent_layer_types()
    assert RopeIndex(AutoConfig.for_model(model_type)).has_linear_attention is recurrent
