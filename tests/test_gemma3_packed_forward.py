"""A packed Gemma3 forward equals each sub-sample run alone, for text and image packs.

Gemma3's text model alternates sliding-window and full attention layers, and the tokens of
one image attend to each other both ways (``token_type_ids``). One block-causal 4D mask would
widen the sliding layers, and HF's own packed-sequence masks read the image blocks at the
wrong places in the sliding layers; ``PackBatch.model_kwargs`` passes one mask per layer
type (``attention.layer_type_masks``). Tiny random Gemma3 (hidden 64, window 8, SigLIP at
896 px, CPU, fp32, sdpa), built by the real loader from a Gemma3 processor folder; the
reference runs each sub-sample alone with its ``input_ids``, ``token_type_ids`` and pixels,
and HF builds its masks.
"""

from __future__ import annotations

import pytest
import torch
from _family_kit import IMAGE_TURNS, TEXT_TURNS, pack_of
from transformers import Gemma3ForConditionalGeneration

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.loader.attention import block_causal_mask
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes
from vlmpack_offline.synthetic.tiny_models import tiny_gemma3_config

TOL = 1e-4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = build_processor_dir(tmp_path_factory.mktemp("gemma3_fwd"), "gemma3")
    config = tiny_gemma3_config(folder)
    torch.manual_seed(0)
    model = Gemma3ForConditionalGeneration(config).eval()
    config.save_pretrained(folder)  # a checkpoint folder: the loader reads the model's own config.json
    loader_config = config_from_dict(
        {"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}}}, source="test"
    )
    return model, PackEncoder(loader_config, EncoderOptions(check_lengths=False))


TEXT_PACK = pack_of(TEXT_TURNS, capacity=8192)
IMAGE_PACK = pack_of(IMAGE_TURNS, capacity=8192)
MEDIA = {"m0.jpg": image_bytes(60, 44, seed=1), "m1.png": image_bytes(30, 90, fmt="PNG", seed=2),
         "m2.jpg": image_bytes(70, 70, seed=3)}  # fmt: skip


def _alone(model, batch) -> torch.Tensor:
    """Each sub-sample run alone: its ids, token_type_ids and pixels; HF builds its own masks."""
    bounds, out, image = batch.cu_seqlens.tolist(), [], 0
    for index, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        kwargs = {"input_ids": batch.input_ids[:, start:end], "token_type_ids": batch.token_type_ids[:, start:end]}
        if n := int(batch.n_images_per_sample[index]):
            kwargs["pixel_values"] = batch.vision["pixel_values"][image : image + n]
            image += n
        out.append(model(**kwargs, use_cache=False).logits)
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("pack", [TEXT_PACK, IMAGE_PACK], ids=["text", "images"])
def test_a_packed_forward_equals_each_sub_sample_alone(setup, pack):
    model, encoder = setup
    batch = encoder.encode(pack, MEDIA)
    assert batch.sliding_window == 8 and min(torch.diff(batch.cu_seqlens).tolist()) > 8  # longer than the window
    kwargs = batch.model_kwargs("sdpa", with_labels=False)
    with torch.no_grad():
        packed = model(**kwargs).logits
        alone = _alone(model, batch)
        one_mask = model(**{**kwargs, "attention_mask": block_causal_mask(batch.cu_seqlens)}).logits
    assert (packed - alone).abs().max() < TOL
    assert (one_mask - alone).abs().max() > 1e-3  # why one block-causal mask is not enough here
