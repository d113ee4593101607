"""A packed Kimi-K2.5 forward equals each sub-sample run alone, for text and image packs.

Tiny random ``Kimi_K25ForConditionalGeneration`` built by transformers from a config (MoonViT with one
layer; a two-layer DeepSeek-V3 text model with MLA attention, one dense and one MoE layer of 4 routed
experts; CPU, fp32, sdpa), fed by the real loader from a Kimi-K2.5 processor folder. The pack runs with
the loader's block-causal mask and 1-D positions restarting per segment; the reference runs each
sub-sample alone with its ``input_ids``, its images' ``pixel_values`` / ``image_grid_thw``, and HF's own
causal mask. The MoE routes each token on its own (no capacity limit), so packing cannot move it.
The image processor needs torchvision (``.venv-ref``).
"""

from __future__ import annotations

import pytest
import torch
from _family_kit import IMAGE_TURNS, TEXT_TURNS, pack_of

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes

pytestmark = pytest.mark.torchvision

TOL = 1e-4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from transformers import AutoConfig, AutoTokenizer, Kimi_K25Config, Kimi_K25ForConditionalGeneration

    folder = build_processor_dir(tmp_path_factory.mktemp("kimi_fwd"), "kimi_k25", layout="transformers5")
    ids = AutoConfig.from_pretrained(folder)  # the folder's config.json: this tokenizer's media ids
    config = Kimi_K25Config(
        text_config=dict(model_type="deepseek_v3", vocab_size=len(AutoTokenizer.from_pretrained(folder)),
                         hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1, n_routed_experts=4,
                         num_experts_per_tok=2, first_k_dense_replace=1, n_group=1, topk_group=1, kv_lora_rank=16,
                         q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16,
                         max_position_embeddings=4096),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                           patch_size=14, pos_emb_height=16, pos_emb_width=16),
        projection_hidden_size=32, image_token_id=ids.image_token_id, video_token_id=ids.video_token_id,
        vision_start_token_id=ids.vision_start_token_id, vision_end_token_id=ids.vision_end_token_id,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    config.text_config._attn_implementation = config.vision_config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = Kimi_K25ForConditionalGeneration(config).eval()
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
    """Each sub-sample run alone: its ids and its images' pixels and grids; HF builds its own mask."""
    bounds, out, image, patch = batch.cu_seqlens.tolist(), [], 0, 0
    for index, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        kwargs = {"input_ids": batch.input_ids[:, start:end]}
        if n := int(batch.n_images_per_sample[index]):
            grids = batch.vision["image_grid_thw"][image : image + n]
            patches = int(grids.prod(-1).sum())
            kwargs.update(pixel_values=batch.vision["pixel_values"][patch : patch + patches], image_grid_thw=grids)
            image, patch = image + n, patch + patches
        out.append(model(**kwargs, use_cache=False).logits)
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("pack", [TEXT_PACK, IMAGE_PACK], ids=["text", "images"])
def test_a_packed_forward_equals_each_sub_sample_alone(setup, pack):
    model, encoder = setup
    batch = encoder.encode(pack, MEDIA)
    kwargs = batch.model_kwargs("sdpa", with_labels=False)
    assert kwargs["position_ids"].shape == (1, batch.seq_len)  # 1-D, restarting per segment
    assert int(batch.n_images_per_sample.sum()) == (3 if pack is IMAGE_PACK else 0) == len(batch.vision.get("image_grid_thw", []))
    with torch.no_grad():
        packed = model(**kwargs).logits
        alone = _alone(model, batch)
        no_mask = model(**{k: v for k, v in kwargs.items() if k not in ("attention_mask", "position_ids")}).logits
    assert packed.shape == alone.shape
    assert (packed - alone).abs().max() < TOL
    assert (no_mask - alone).abs().max() > 1e-3  # the segments would see each other without the loader's mask
