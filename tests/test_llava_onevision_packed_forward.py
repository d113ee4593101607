"""A packed LLaVA-OneVision forward equals each sub-sample run alone, for a text pack and a pack that mixes
a one-image sub-sample (tiled: anyres) with a two-image one (one square per image).

Tiny random ``LlavaOnevisionForConditionalGeneration`` (Qwen2 text model, hidden 64, 2 layers; SigLIP vision
tower at 56 px, patch 14: 16 tokens per tile, 4 per pooled video frame), CPU, fp32, sdpa. The processor
folder is the offline LLaVA-OneVision one, set to the tiny tower through ``model.processor_kwargs``
(``size`` 56 x 56, ``num_image_tokens`` 16, grids of 1..3 x 1..3 tiles), so scan, loader and model agree.
The packed forward takes ``PackBatch.model_kwargs`` (block-causal mask, 1-D positions restarting per
sub-sample, every image of the pack in ``pixel_values`` / ``image_sizes``, and ``batch_num_images`` with
one entry per sub-sample that has images). The reference runs each sub-sample alone with its own images
(its ``batch_num_images`` = [its image count]) and HF builds its causal mask.
"""

from __future__ import annotations

import pytest
import torch
from _family_kit import IMAGE_TURNS, TEXT_TURNS, pack_of
from transformers import AutoTokenizer, LlavaOnevisionConfig, LlavaOnevisionForConditionalGeneration
from transformers.models.llava_onevision.modeling_llava_onevision import image_size_to_num_patches

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes

TOL = 1e-4
TILE = 56
PINPOINTS = [[TILE * h, TILE * w] for h in (1, 2, 3) for w in (1, 2, 3)]
KWARGS = {"size": {"height": TILE, "width": TILE}, "image_grid_pinpoints": PINPOINTS, "num_image_tokens": 16}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = build_processor_dir(tmp_path_factory.mktemp("ov_fwd"), "llava_onevision")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    config = LlavaOnevisionConfig(
        text_config=dict(model_type="qwen2", vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=8192),
        vision_config=dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                           num_attention_heads=2, image_size=TILE, patch_size=14, vision_use_head=False),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        video_token_index=tokenizer.convert_tokens_to_ids("<video>"),
        image_grid_pinpoints=PINPOINTS, vision_feature_select_strategy="full", vision_feature_layer=-1,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = LlavaOnevisionForConditionalGeneration(config).eval()
    config.save_pretrained(folder)  # a checkpoint folder: the loader reads the model's own config.json
    loader_config = config_from_dict(
        {"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder), **KWARGS}}}, source="test"
    )
    return model, PackEncoder(loader_config, EncoderOptions(check_lengths=False))


TEXT_PACK = pack_of(TEXT_TURNS, capacity=16384)
IMAGE_PACK = pack_of(IMAGE_TURNS, capacity=16384)  # text, one image (m0), two images (m1, m2)
# 60 x 140 (w x h): alone it is tiled (+ base); 150 x 50 and 56 x 56: one square each (two images)
MEDIA = {"m0.jpg": image_bytes(60, 140, seed=1), "m1.png": image_bytes(150, 50, fmt="PNG", seed=2),
         "m2.jpg": image_bytes(56, 56, seed=3)}  # fmt: skip


def _alone(model, batch) -> torch.Tensor:
    """Each sub-sample run alone: its ids and its own images; HF builds its own mask."""
    bounds, out, row = batch.cu_seqlens.tolist(), [], 0
    for index, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
        kwargs = {"input_ids": batch.input_ids[:, start:end]}
        if n := int(batch.n_images_per_sample[index]):
            kwargs.update(pixel_values=batch.vision["pixel_values"][row : row + n],
                          image_sizes=batch.vision["image_sizes"][row : row + n], batch_num_images=torch.tensor([n]))  # fmt: skip
            row += n
        out.append(model(**kwargs, use_cache=False).logits)
    assert row == len(batch.vision.get("pixel_values", ()))
    return torch.cat(out, dim=1)


@pytest.mark.parametrize("pack", [TEXT_PACK, IMAGE_PACK], ids=["text", "images"])
def test_a_packed_forward_equals_each_sub_sample_alone(setup, pack):
    model, encoder = setup
    batch = encoder.encode(pack, MEDIA)
    if pack is IMAGE_PACK:  # m0 alone: base + its tiles (the model's own count); m1, m2: one square each, zero-padded
        tiles = image_size_to_num_patches((140, 60), PINPOINTS, TILE)
        assert tiles > 2 and batch.vision["pixel_values"].shape == (3, tiles, 3, TILE, TILE)
        assert batch.vision["batch_num_images"].tolist() == [1, 2]
    kwargs = batch.model_kwargs("sdpa", with_labels=False)
    with torch.no_grad():
        packed = model(**kwargs).logits
        alone = _alone(model, batch)
        unmasked = model(**{k: v for k, v in kwargs.items() if k not in ("attention_mask", "position_ids")}).logits
    assert packed.shape == alone.shape
    assert (packed - alone).abs().max() < TOL
    assert (unmasked - alone).abs().max() > 1e-3  # the packing is visible: without its mask the logits differ
    if pack is IMAGE_PACK:  # and batch_num_images is needed: without it every image is tiled, too many features
        with torch.no_grad(), pytest.raises(Exception, match="Image features and image tokens do not match"):
            model(**{k: v for k, v in kwargs.items() if k != "batch_num_images"})


@pytest.mark.torchvision
def test_a_pack_with_a_video_equals_each_sub_sample_alone(setup, tmp_path):
    """A text, a one-image and a video sub-sample (the family's own video processor: torchvision). The model
    stacks a forward's videos in one ``[videos, frames, ...]`` tensor, so a pack holds one video here."""
    from vlmpack_offline.synthetic.shards import video_bytes

    model, _ = setup
    folder = build_processor_dir(tmp_path / "ov_video", "llava_onevision", video=True)
    model.config.save_pretrained(folder)
    config = config_from_dict({"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder), **KWARGS}},
                               "video": {"fps": 2.0, "max_frames": 6}}, source="test")  # fmt: skip
    encoder = PackEncoder(config, EncoderOptions(check_lengths=False))
    video_turn = ([{"type": "video", "video": "v0.mp4"}, {"type": "text", "text": "What happens?"}], "It moves.")
    pack = pack_of([TEXT_TURNS[0], IMAGE_TURNS[1], video_turn], capacity=16384)
    batch = encoder.encode(pack, {**MEDIA, "v0.mp4": video_bytes(16, 8, 96, 64, seed=4)})
    videos = batch.vision["pixel_values_videos"]
    assert videos.shape[0] == 1 and videos.shape[2:] == (3, TILE, TILE)
    kwargs = batch.model_kwargs("sdpa", with_labels=False)
    with torch.no_grad():
        packed = model(**kwargs).logits
        bounds = batch.cu_seqlens.tolist()
        alone = [model(input_ids=batch.input_ids[:, bounds[0] : bounds[1]], use_cache=False).logits,
                 model(input_ids=batch.input_ids[:, bounds[1] : bounds[2]], pixel_values=batch.vision["pixel_values"],
                       image_sizes=batch.vision["image_sizes"], batch_num_images=torch.tensor([1]), use_cache=False).logits,
                 model(input_ids=batch.input_ids[:, bounds[2] : bounds[3]], pixel_values_videos=videos, use_cache=False).logits]  # fmt: skip
    assert (packed - torch.cat(alone, dim=1)).abs().max() < TOL


@pytest.mark.torchvision
def test_videos_of_different_lengths_share_the_recipes_32_frames_and_pack_together(setup, tmp_path):
    """No ``video:`` section: LLaVA-OneVision's own recipe samples 32 frames from a 9 s and a 1.6 s (16-frame,
    some repeated) video alike, so both fit the model's one ``[videos, frames, ...]`` tensor, and the packed
    forward equals each alone."""
    from vlmpack_offline.synthetic.shards import video_bytes

    model, _ = setup
    folder = build_processor_dir(tmp_path / "ov_video", "llava_onevision", video=True)
    model.config.save_pretrained(folder)
    config = config_from_dict({"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder), **KWARGS}}},
                              source="test")  # fmt: skip
    encoder = PackEncoder(config, EncoderOptions(check_lengths=False))
    turns = [([{"type": "video", "video": f"v{i}.mp4"}, {"type": "text", "text": "What happens?"}], f"It moves {i}.")
             for i in range(2)]  # fmt: skip
    media = {"v0.mp4": video_bytes(16, 10, 96, 64, seed=5), "v1.mp4": video_bytes(90, 10, 64, 96, seed=6)}
    batch = encoder.encode(pack_of(turns, capacity=16384), media)
    videos = batch.vision["pixel_values_videos"]
    assert videos.shape[:3] == (2, 32, 3)
    with torch.no_grad():
        packed = model(**batch.model_kwargs("sdpa", with_labels=False)).logits
        bounds = batch.cu_seqlens.tolist()
        alone = [model(input_ids=batch.input_ids[:, bounds[i] : bounds[i + 1]], pixel_values_videos=videos[i : i + 1],
                       use_cache=False).logits for i in range(2)]  # fmt: skip
    assert (packed - torch.cat(alone, dim=1)).abs().max() < TOL


def test_videos_of_different_frame_counts_are_refused_not_padded():
    """Nothing tells the model which padded frames are real: a pack of unequal videos is one clear error."""
    from vlmpack_offline.loader.vision_inputs import concat_vision_inputs

    with pytest.raises(ValueError, match="set video.min_frames = video.max_frames"):
        concat_vision_inputs([{"pixel_values_videos": torch.zeros(1, 8, 3, 4, 4)},
                              {"pixel_values_videos": torch.zeros(1, 6, 3, 4, 4)}])  # fmt: skip
    images = concat_vision_inputs([{"pixel_values": torch.ones(1, 3, 2, 4)}, {"pixel_values": torch.ones(1, 3, 5, 1)}])
    assert images["pixel_values"].shape == (2, 3, 5, 4) and images["pixel_values"].sum() == 3 * (8 + 5)
