"""A packed InternVL forward equals each sub-sample run alone, for text and image packs.

Tiny random ``InternVLForConditionalGeneration`` (Qwen2 text model, hidden 64, 2 layers; InternVL
vision tower at 448 px tiles, patch 14, 0.5 pixel shuffle: 256 tokens per tile), CPU, fp32, sdpa.
The pack is built by the real loader from an InternVL processor folder (images cut into tiles plus
a thumbnail by the real ``GotOcr2ImageProcessorPil``); the packed forward takes
``PackBatch.model_kwargs`` (block-causal mask, 1-D positions restarting per sub-sample, every tile of
the pack in ``pixel_values``). The reference runs each sub-sample alone with its ``input_ids`` and
its own tiles, and HF builds its causal mask. Compared: the last hidden state at every position and
the logits at every position but the image tokens (``hidden_and_text_logits``).
"""

from __future__ import annotations

import pytest
import torch
from _family_kit import IMAGE_TURNS, TEXT_TURNS, hidden_and_text_logits, pack_of, tiny_internvl
from transformers import AutoTokenizer

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes

TOL = 1e-4
TOKENS_PER_TILE = 256  # (448 / 14) ** 2 patches * 0.5 ** 2 after the pixel shuffle


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = build_processor_dir(tmp_path_factory.mktemp("internvl_fwd"), "internvl")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = tiny_internvl(tokenizer)
    model.config.save_pretrained(folder)  # a checkpoint folder: the loader reads the model's own config.json
    loader_config = config_from_dict(
        {"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}}}, source="test"
    )
    return model, PackEncoder(loader_config, EncoderOptions(check_lengths=False))


TEXT_PACK = pack_of(TEXT_TURNS, capacity=16384)
IMAGE_PACK = pack_of(IMAGE_TURNS, capacity=16384)
# 448 x 448: one tile; 300 x 900 (w x h): a 1 x 3 grid + thumbnail; 900 x 450: 2 x 1 + thumbnail
MEDIA = {"m0.jpg": image_bytes(448, 448, seed=1), "m1.png": image_bytes(300, 900, fmt="PNG", seed=2),
         "m2.jpg": image_bytes(900, 450, seed=3)}  # fmt: skip


def _alone(model, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Each sub-sample run alone: its ids and its own tiles; HF builds its own mask."""
    bounds, hidden, logits, tile = batch.cu_seqlens.tolist(), [], [], 0
    for start, end in zip(bounds[:-1], bounds[1:], strict=True):
        ids = batch.input_ids[:, start:end]
        kwargs = {"input_ids": ids}
        if n := int((ids == model.config.image_token_id).sum()) // TOKENS_PER_TILE:  # this sub-sample's tiles
            kwargs["pixel_values"] = batch.vision["pixel_values"][tile : tile + n]
            tile += n
        for out, alone in zip((hidden, logits), hidden_and_text_logits(model, model.config.image_token_id, **kwargs),
                              strict=True):  # fmt: skip
            out.append(alone)
    assert tile == len(batch.vision.get("pixel_values", ()))
    return torch.cat(hidden), torch.cat(logits)


@pytest.mark.parametrize("pack", [TEXT_PACK, IMAGE_PACK], ids=["text", "images"])
def test_a_packed_forward_equals_each_sub_sample_alone(setup, pack):
    model, encoder = setup
    batch = encoder.encode(pack, MEDIA)
    if pack is IMAGE_PACK:
        assert batch.vision["pixel_values"].shape == (1 + 4 + 3, 3, 448, 448)
    kwargs = batch.model_kwargs("sdpa", with_labels=False)

    def forward(**overrides):
        return hidden_and_text_logits(model, model.config.image_token_id, **{**kwargs, **overrides})

    hidden, logits = _alone(model, batch)
    packed_hidden, packed = forward()
    assert packed_hidden.shape == hidden.shape and packed.shape == logits.shape
    assert (packed_hidden - hidden).abs().max() < TOL
    assert (packed - logits).abs().max() < TOL
    _, unmasked = hidden_and_text_logits(
        model, model.config.image_token_id,
        **{k: v for k, v in kwargs.items() if k not in ("attention_mask", "position_ids")},
    )  # fmt: skip
    assert (unmasked - logits).abs().max() > 1e-3  # the packing is visible: without its mask the logits differ
    if pack is IMAGE_PACK:  # and the tiles are: the same pack with its tiles in reverse order differs
        _, flipped = forward(pixel_values=kwargs["pixel_values"].flip(0))
        assert (flipped - logits).abs().max() > 1e-3
