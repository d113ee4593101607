"""A packed Mistral3 forward equals each sub-sample run alone, for text and image packs.

Tiny random ``Mistral3ForConditionalGeneration`` (Mistral text model hidden 64, 2 layers, no sliding
window as in Mistral-Small-3.1; Pixtral vision tower patch 14, 1 layer; spatial merge 2), CPU, fp32, sdpa.
The pack is built by the real loader from the offline Mistral3 folder (without torchvision the images go
through ``PixtralImages``, the PIL image processor as PixtralProcessor drives it); the packed forward takes
``PackBatch.model_kwargs``: block-causal mask, positions restarting per sub-sample, every image of the pack
in ``pixel_values`` zero-padded to the largest (HF's batch padding) with the real sizes in ``image_sizes``.
The reference runs each sub-sample alone with its ``input_ids`` and its own images, cropped to their
``image_sizes`` and padded only among themselves, as the processor gives them for that sub-sample alone;
the model builds its own positions and mask.
"""

from __future__ import annotations

import pytest
import torch
from _family_kit import IMAGE_TURNS, TEXT_TURNS, pack_of
from transformers import AutoTokenizer, Mistral3Config, Mistral3ForConditionalGeneration

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes

TOL = 1e-4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = build_processor_dir(tmp_path_factory.mktemp("mistral3_fwd"), "mistral3")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = Mistral3Config(
        text_config=dict(model_type="mistral", vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         sliding_window=None, max_position_embeddings=8192),
        vision_config=dict(model_type="pixtral", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2, head_dim=16, patch_size=14, image_size=1540),
        spatial_merge_size=2, image_token_index=tokenizer.convert_tokens_to_ids("[IMG]"), vision_feature_layer=-1,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = Mistral3ForConditionalGeneration(config).eval()
    config.save_pretrained(folder)  # a checkpoint folder: the loader reads the model's own config.json
    loader_config = config_from_dict(
        {"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}}}, source="test"
    )
    return model, PackEncoder(loader_config, EncoderOptions(check_lengths=False))


TEXT_PACK = pack_of(TEXT_TURNS, capacity=16384)
IMAGE_PACK = pack_of(IMAGE_TURNS, capacity=16384)
MEDIA = {"m0.jpg": image_bytes(100, 60, seed=1), "m1.png": image_bytes(40, 90, fmt="PNG", seed=2),
         "m2.jpg": image_bytes(130, 30, seed=3)}  # fmt: skip


def _alone(model, batch) -> torch.Tensor:
    """Each sub-sample run alone: its ids and its own images (cropped to their sizes, padded among themselves)."""
    bounds, out, image = batch.cu_seqlens.tolist(), [], 0
    for index, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        kwargs = {"input_ids": batch.input_ids[:, start:end]}
        if n := int(batch.n_images_per_sample[index]):
            sizes = batch.vision["image_sizes"][image : image + n]
            height, width = (int(x) for x in sizes.max(dim=0).values)
            kwargs["pixel_values"] = batch.vision["pixel_values"][image : image + n, :, :height, :width]
            kwargs["image_sizes"] = sizes
            image += n
        out.append(model(**kwargs, use_cache=False).logits)
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("pack", [TEXT_PACK, IMAGE_PACK], ids=["text", "images"])
def test_a_packed_forward_equals_each_sub_sample_alone(setup, pack):
    model, encoder = setup
    batch = encoder.encode(pack, MEDIA)
    if pack is IMAGE_PACK:
        sizes = batch.vision["image_sizes"].tolist()
        assert len(sizes) == 3 and len({tuple(s) for s in sizes}) == 3  # three shapes: the pack pads them
        assert tuple(batch.vision["pixel_values"].shape[-2:]) == tuple(max(s) for s in zip(*sizes, strict=True))
        n_img = int((batch.input_ids == model.config.image_token_index).sum())
        assert n_img == sum(h * w for h, w in sizes) // 28**2  # one [IMG] per merged 28 px patch
    kwargs = batch.model_kwargs("sdpa", with_labels=False)
    assert "attention_mask" in kwargs and kwargs["position_ids"].shape[-1] == batch.seq_len
    with torch.no_grad():
        packed = model(**kwargs).logits
        alone = _alone(model, batch)
        plain = {k: v for k, v in kwargs.items() if k not in ("attention_mask", "position_ids")}
        unmasked = model(**plain).logits
    assert packed.shape == alone.shape
    assert (packed - alone).abs().max() < TOL
    assert (unmasked - alone).abs().max() > 1e-3  # the packing is visible: without its mask the logits differ
