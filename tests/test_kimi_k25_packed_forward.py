"""A packed Kimi-K2.5 forward equals each sub-sample run alone, for text and image packs.

Tiny random ``Kimi_K25ForConditionalGeneration`` built by transformers from a config (MoonViT with one
layer; a two-layer DeepSeek-V3 text model with MLA attention, one dense and one MoE layer of 4 routed
experts; CPU, fp32, sdpa), fed by the real loader from a Kimi-K2.5 processor folder. The pack runs with
the loader's block-causal mask and 1-D positions restarting per segment; the reference runs each
sub-sample alone with its ``input_ids``, its images' ``pixel_values`` / ``image_grid_thw``, and HF's own
causal mask. The MoE routes each token on its own (no capacity limit), so packing cannot move it.
The image processor needs torchvision (``.venv-ref``).

Videos: the pack's ``pixel_values_videos`` / ``video_grid_thw`` go to HF's own forward as they are (Kimi's
processor cuts a video into chunks of up to 4 frames, one grid row each; the tower pools a chunk's frames into
``h * w / merge**2`` features). The reference runs each sub-sample alone through another path: its video
chunks' features computed one tower call per chunk and handed in as ``mm_encoder_outputs``.
"""

from __future__ import annotations

import pytest
import torch
from _family_kit import IMAGE_TURNS, TEXT_TURNS, pack_of, text_item

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes, video_bytes

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
VIDEO_PACK = pack_of([([{"type": "video", "video": "v.mp4"}, text_item("What moves?")], "The gradient."),
                      IMAGE_TURNS[1], TEXT_TURNS[1]], capacity=8192)  # fmt: skip
MEDIA = {"m0.jpg": image_bytes(60, 44, seed=1), "m1.png": image_bytes(30, 90, fmt="PNG", seed=2),
         "m2.jpg": image_bytes(70, 70, seed=3),
         "v.mp4": video_bytes(41, 8, 64, 48, seed=4)}  # 10 sampled frames at 2 fps: chunks of 4, 4, 2  # fmt: skip


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


def _encoder_outputs(model, vision) -> dict:
    """The model's own image features, and its video features one chunk per tower call (vision tower +
    projector, as ``get_image_features`` runs them): each call's pooled rows are that chunk's ``h * w / merge**2``.
    HF's ``get_video_features`` runs all chunks in one call; this is the independent path."""
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    out = {}
    if "pixel_values" in vision:
        out["image"] = model.model.get_image_features(vision["pixel_values"], vision["image_grid_thw"], return_dict=True)
    if "pixel_values_videos" in vision:
        chunks, start = [], 0
        for row in vision["video_grid_thw"]:
            n = int(row.prod())
            tower = model.model.vision_tower(vision["pixel_values_videos"][start : start + n], grid_thw=row[None])
            chunks.append(model.model.mm_projector(tower.pooler_output).squeeze(1))
            start += n
        out["video"] = BaseModelOutputWithPooling(pooler_output=tuple(chunks))
    return out


def _video_alone(model, batch, video_token_id: int) -> torch.Tensor:
    """Each sub-sample alone: its ids, its images' and its video chunks' tensors (the chunks whose tokens its
    ids hold), HF's own causal mask."""
    bounds, out, image, patch, chunk, video_patch = batch.cu_seqlens.tolist(), [], 0, 0, 0, 0
    grids = batch.vision.get("video_grid_thw", torch.zeros(0, 3, dtype=torch.long))
    for index, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        ids = batch.input_ids[:, start:end]
        vision = {}
        if n := int(batch.n_images_per_sample[index]):
            image_grids = batch.vision["image_grid_thw"][image : image + n]
            patches = int(image_grids.prod(-1).sum())
            vision.update(pixel_values=batch.vision["pixel_values"][patch : patch + patches], image_grid_thw=image_grids)
            image, patch = image + n, patch + patches
        tokens, first = int((ids == video_token_id).sum()), chunk
        while tokens > 0:
            tokens -= int(grids[chunk, 1:].prod()) // 4
            chunk += 1
        if chunk > first:
            patches = int(grids[first:chunk].prod(-1).sum())
            vision.update(pixel_values_videos=batch.vision["pixel_values_videos"][video_patch : video_patch + patches],
                          video_grid_thw=grids[first:chunk])  # fmt: skip
            video_patch += patches
        out.append(model(input_ids=ids, mm_encoder_outputs=_encoder_outputs(model, vision), use_cache=False).logits)
    assert chunk == len(grids)
    return torch.cat(out, dim=1)


def test_a_packed_video_forward_equals_each_sub_sample_alone(setup):
    model, encoder = setup
    batch = encoder.encode(VIDEO_PACK, MEDIA)
    assert batch.n_videos_per_sample.tolist() == [1, 0, 0] and batch.n_images_per_sample.tolist() == [0, 1, 0]
    video_token_id = model.config.video_token_id
    assert int((batch.input_ids == video_token_id).sum()) == 3 * int(batch.vision["video_grid_thw"][0, 1:].prod()) // 4
    assert batch.vision["video_grid_thw"][:, 0].tolist() == [4, 4, 2]  # chunks of 4, 4 and 2 frames
    kwargs = batch.model_kwargs("sdpa")
    assert {"pixel_values_videos", "video_grid_thw", "pixel_values", "image_grid_thw"} <= set(kwargs)
    with torch.no_grad():
        packed = model(**kwargs)
        alone = _video_alone(model, batch, video_token_id)
        unmasked = {k: v for k, v in kwargs.items() if k not in ("attention_mask", "position_ids")}
        no_mask = model(**unmasked).logits
    assert packed.logits.shape == alone.shape
    assert (packed.logits - alone).abs().max() < TOL
    assert (no_mask - alone).abs().max() > 1e-3  # the segments would see each other without the loader's mask
    # the summed loss over the pack equals that of each sub-sample's own logits and labels
    shifted = torch.nn.functional.cross_entropy(alone[0, :-1], batch.labels[0, 1:], ignore_index=-100, reduction="sum")
    n = int((batch.labels[0, 1:] != -100).sum())
    assert n > 0 and abs(float(packed.loss) * n - float(shifted)) < 1e-3 * n
