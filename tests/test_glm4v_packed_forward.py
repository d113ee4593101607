"""A packed GLM-4.1V forward equals each sub-sample run alone, for text and image packs.

Tiny random ``Glm4vForConditionalGeneration`` (hidden 64, 2 layers, partial rotary 0.5 with an mRoPE
section of 2 + 1 + 1; vision tower patch 14, merge 2, 1 layer), CPU, fp32, sdpa. The pack is built by
the real loader from a GLM-4V processor folder (images resized and patchified by the real
``Glm4vImageProcessorPil``); the packed forward takes ``PackBatch.model_kwargs`` (block-causal mask,
text row + mRoPE positions restarting per sub-sample, every image of the pack in ``pixel_values`` /
``image_grid_thw``). The reference runs each sub-sample alone with its ``input_ids``, its own images
and the ``mm_token_type_ids`` the processor would give: the model computes its own positions and mask.
"""

from __future__ import annotations

import pytest
import torch
from _family_kit import IMAGE_TURNS, TEXT_TURNS, pack_of
from transformers import AutoTokenizer, Glm4vConfig, Glm4vForConditionalGeneration

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes

TOL = 1e-4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = build_processor_dir(tmp_path_factory.mktemp("glm4v_fwd"), "glm4v")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = {f"{name}_token_id": tokenizer.convert_tokens_to_ids(f"<|{token}|>") for name, token in (
        ("image", "image"), ("video", "video"), ("image_start", "begin_of_image"), ("image_end", "end_of_image"),
        ("video_start", "begin_of_video"), ("video_end", "end_of_video"))}  # fmt: skip
    config = Glm4vConfig(
        text_config=dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1],
                                          "partial_rotary_factor": 0.5}),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
        **ids,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = Glm4vForConditionalGeneration(config).eval()
    config.save_pretrained(folder)  # a checkpoint folder: the loader reads the model's own config.json
    loader_config = config_from_dict(
        {"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}}}, source="test"
    )
    return model, PackEncoder(loader_config, EncoderOptions(check_lengths=False))


TEXT_PACK = pack_of(TEXT_TURNS, capacity=16384)
IMAGE_PACK = pack_of(IMAGE_TURNS, capacity=16384)
MEDIA = {"m0.jpg": image_bytes(224, 224, seed=1), "m1.png": image_bytes(120, 300, fmt="PNG", seed=2),
         "m2.jpg": image_bytes(400, 150, seed=3)}  # fmt: skip


def _alone(model, batch) -> torch.Tensor:
    """Each sub-sample run alone: its ids, its own images (patches and grids); the model's own positions."""
    bounds, out, image, row = batch.cu_seqlens.tolist(), [], 0, 0
    grids = batch.vision.get("image_grid_thw")
    merge = model.config.vision_config.spatial_merge_size
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        ids = batch.input_ids[:, start:end]
        is_image = ids == model.config.image_token_id
        kwargs = {"input_ids": ids, "mm_token_type_ids": is_image.int()}
        tokens, first = int(is_image.sum()), image
        while tokens > 0:  # this sub-sample's images, in order
            tokens -= int(grids[image].prod()) // merge**2
            image += 1
        if image > first:
            n_rows = int(grids[first:image].prod(-1).sum())
            kwargs["pixel_values"] = batch.vision["pixel_values"][row : row + n_rows]
            kwargs["image_grid_thw"] = grids[first:image]
            row += n_rows
        out.append(model(**kwargs, use_cache=False).logits)
    assert row == len(batch.vision.get("pixel_values", ()))
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("pack", [TEXT_PACK, IMAGE_PACK], ids=["text", "images"])
def test_a_packed_forward_equals_each_sub_sample_alone(setup, pack):
    model, encoder = setup
    batch = encoder.encode(pack, MEDIA)
    if pack is IMAGE_PACK:
        assert len(batch.vision["image_grid_thw"]) == 3
    kwargs = batch.model_kwargs("sdpa", with_labels=False)
    with torch.no_grad():
        packed = model(**kwargs).logits
        alone = _alone(model, batch)
        plain = {k: v for k, v in kwargs.items() if k not in ("attention_mask", "position_ids")}
        plain["mm_token_type_ids"] = (batch.input_ids == model.config.image_token_id).int()  # the model's own rope
        unmasked = model(**plain).logits
    assert packed.shape == alone.shape
    assert (packed - alone).abs().max() < TOL
    assert (unmasked - alone).abs().max() > 1e-3  # the packing is visible: without its mask the logits differ
    if pack is IMAGE_PACK:  # the mRoPE rows matter: the text row in their place changes the logits
        positions = kwargs["position_ids"]
        assert positions.shape == (4, 1, batch.seq_len)
        with torch.no_grad():
            flat = model(**{**kwargs, "position_ids": positions[:1].expand(4, -1, -1)}).logits
        assert (flat - alone).abs().max() > 1e-3
