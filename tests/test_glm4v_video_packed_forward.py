"""GLM-4.1V / 4.5V / 4.6V video (and image) packs: the loader equals the real processor per sub-sample, and a packed
forward of a tiny random model equals each sub-sample run alone (< 1e-4, fp32, CPU, sdpa).

Needs torchvision (``.venv-ref``): the loader hands the sampled frames and their ``VideoMetadata`` to the
family's real video processor (``ProcessorImages.frames``). The oracle is ``AutoProcessor`` of the folder
given EVERY decoded frame of each video (it samples them itself) and ``VideoMetadata(total_num_frames,
fps, duration)``: ``input_ids``, ``pixel_values_videos`` and ``video_grid_thw`` must be equal (the same
frames through the same video processor: exactly equal), and each segment's mRoPE positions must equal
the tiny model's own ``get_rope_index`` on the oracle's ``input_ids`` / ``mm_token_type_ids`` / grid.
Then the packed forward (block-causal mask, positions restarting per sub-sample, all videos of the pack
in one ``pixel_values_videos``) equals each sub-sample alone with its own video and the oracle's
``mm_token_type_ids`` (the model computes its own positions). Tiny models: hidden 64, 2 layers (the MoE
one with 4 experts, 2 per token), vision tower patch 14, merge 2, 1 layer.

HF's GLM-4V forward takes the image tokens as the video placeholders too (``get_placeholder_mask``), so
one forward cannot take images and videos together; packs group by media type by default
(``packing.group_by: media_type``), so a pack holds videos or images, not both.
"""

from __future__ import annotations

import io

import pytest
import torch
from _family_kit import IMAGE_TURNS, TEXT_TURNS, pack_of, text_item

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.loader import EncoderOptions, PackEncoder
from vlmpack_offline.media import decode_frames
from vlmpack_offline.media.video import VideoSampling
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes, video_bytes

pytestmark = [pytest.mark.torchvision, pytest.mark.slow]

TOL = 1e-4
VIDEO_PACK = pack_of([
    TEXT_TURNS[0],
    ([{"type": "video", "video": "v0.mp4"}, text_item("What moves?")], "A gradient."),
    ([text_item("Look:"), {"type": "video", "video": "v1.mp4"}], "It shifts to the right, slowly."),
], capacity=16384)  # fmt: skip
MEDIA = {"v0.mp4": video_bytes(40, 10, 96, 64, seed=1), "v1.mp4": video_bytes(25, 8, 60, 84, seed=2)}


def _config(family: str, tokenizer):
    from transformers import Glm4vConfig, Glm4vMoeConfig, Glm46VConfig

    ids = {f"{name}_token_id": tokenizer.convert_tokens_to_ids(f"<|{token}|>") for name, token in (
        ("image", "image"), ("video", "video"), ("image_start", "begin_of_image"), ("image_end", "end_of_image"),
        ("video_start", "begin_of_video"), ("video_end", "end_of_video"))}  # fmt: skip
    text = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1],
                                 "partial_rotary_factor": 0.5})  # fmt: skip
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                  patch_size=14, spatial_merge_size=2, temporal_patch_size=2)  # fmt: skip
    if family == "glm4v_moe":
        text.update(n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_shared_experts=1,
                    first_k_dense_replace=1, n_group=1, topk_group=1, head_dim=16)  # fmt: skip
        return Glm4vMoeConfig(text_config=text, vision_config=vision, **ids)
    return (Glm46VConfig if family == "glm46v" else Glm4vConfig)(text_config=text, vision_config=vision, **ids)


@pytest.fixture(scope="module", params=["glm4v", "glm4v_moe", "glm46v"])
def setup(request, tmp_path_factory):
    from transformers import AutoModelForImageTextToText, AutoProcessor, AutoTokenizer

    family = request.param
    folder = build_processor_dir(tmp_path_factory.mktemp(f"{family}_video"), family, layout="transformers5", video=True)
    config = _config(family, AutoTokenizer.from_pretrained(folder))
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config).eval()
    config.save_pretrained(folder)  # a checkpoint folder: the loader reads the model's own config.json
    loader_config = config_from_dict(
        {"model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}}}, source="test"
    )
    encoder = PackEncoder(loader_config, EncoderOptions(check_lengths=False))
    return model, encoder, AutoProcessor.from_pretrained(folder)


def _parts(sub, kind: str) -> list[str]:
    return [item[kind] for m in sub.messages for item in m["content"] if isinstance(item, dict) and item.get("type") == kind]


def _oracle(processor, sub, media: dict[str, bytes]) -> dict:
    """The real processor on this sub-sample alone, given every frame of its videos (it samples them)."""
    from PIL import Image
    from transformers.video_utils import VideoMetadata

    from vlmpack_offline.media import probe_video

    parts = _parts(sub, "video")
    images = [Image.open(io.BytesIO(media[part])) for part in _parts(sub, "image")]
    videos, metadata = [], []
    for part in parts:
        info = probe_video(media[part])
        every = VideoSampling(frame_indices=tuple(range(info.n_frames)), resized_height=0, resized_width=0,
                              native_fps=info.native_fps, total_frames=info.n_frames)  # fmt: skip
        videos.append(decode_frames(media[part], every, resize=False))
        metadata.append(VideoMetadata(total_num_frames=info.n_frames, fps=info.native_fps,
                                      duration=info.n_frames / info.native_fps))  # fmt: skip
    text = processor.apply_chat_template(list(sub.messages), tokenize=False)
    return processor(text=[text], images=images or None, videos=videos or None, video_metadata=metadata or None,
                     return_tensors="pt")  # fmt: skip


def test_the_loader_equals_the_real_processor_and_the_packed_forward_each_sub_sample_alone(setup):
    model, encoder, processor = setup
    batch = encoder.encode(VIDEO_PACK, MEDIA)
    bounds, alone, pixels, grids = batch.cu_seqlens.tolist(), [], [], []
    for index, sub in enumerate(VIDEO_PACK.samples):
        expected = _oracle(processor, sub, MEDIA)
        start, end = bounds[index], bounds[index + 1]
        assert torch.equal(batch.input_ids[0, start:end], expected["input_ids"][0])
        kwargs = {"input_ids": expected["input_ids"], "mm_token_type_ids": expected["mm_token_type_ids"]}
        if "video_grid_thw" in expected:
            pixels.append(expected["pixel_values_videos"])
            grids.append(expected["video_grid_thw"])
            kwargs |= {"pixel_values_videos": expected["pixel_values_videos"], "video_grid_thw": expected["video_grid_thw"]}
        with torch.no_grad():
            positions, _ = model.model.get_rope_index(
                expected["input_ids"], mm_token_type_ids=expected["mm_token_type_ids"],
                video_grid_thw=expected.get("video_grid_thw"),
            )  # fmt: skip
            alone.append(model(**kwargs, use_cache=False).logits)
        assert torch.equal(batch.position_ids[..., start:end], positions)
        # the loader's modality ids (video frames are <|image|> tokens typed as video) are the processor's
        assert torch.equal(encoder.rope.mm_token_type_ids(batch.input_ids[:, start:end]), expected["mm_token_type_ids"].int())
        if "video_grid_thw" in expected:  # frame rows and columns: real 3-D positions, not a text ramp
            assert not torch.equal(positions[1], positions[2])
    assert int(batch.n_videos_per_sample.sum()) == 2 == len(grids)
    assert set(batch.vision) == {"pixel_values_videos", "video_grid_thw"}
    assert torch.equal(batch.vision["video_grid_thw"], torch.cat(grids))
    assert torch.equal(batch.vision["pixel_values_videos"], torch.cat(pixels))
    with torch.no_grad():
        packed = model(**batch.model_kwargs("sdpa", with_labels=False)).logits
    alone = torch.cat(alone, dim=1)
    assert packed.shape == alone.shape
    assert (packed - alone).abs().max() < TOL


IMAGE_MEDIA = {"m0.jpg": image_bytes(224, 224, seed=1), "m1.png": image_bytes(120, 300, fmt="PNG", seed=2),
               "m2.jpg": image_bytes(400, 150, seed=3)}  # fmt: skip


def test_an_image_pack_equals_the_real_processor_and_each_sub_sample_alone(setup):
    """GLM-4.5V / 4.6V (and 4.1V again): image packs, the same oracle with the sub-sample's decoded images."""
    model, encoder, processor = setup
    pack = pack_of(IMAGE_TURNS, capacity=16384)
    batch = encoder.encode(pack, IMAGE_MEDIA)
    bounds, alone, pixels = batch.cu_seqlens.tolist(), [], []
    for index, sub in enumerate(pack.samples):
        expected = _oracle(processor, sub, IMAGE_MEDIA)
        start, end = bounds[index], bounds[index + 1]
        assert torch.equal(batch.input_ids[0, start:end], expected["input_ids"][0])
        kwargs = {k: v for k, v in expected.items() if k in ("input_ids", "mm_token_type_ids", "pixel_values", "image_grid_thw")}
        with torch.no_grad():
            positions, _ = model.model.get_rope_index(
                expected["input_ids"], mm_token_type_ids=expected["mm_token_type_ids"],
                image_grid_thw=expected.get("image_grid_thw"),
            )  # fmt: skip
            alone.append(model(**kwargs, use_cache=False).logits)
        assert torch.equal(batch.position_ids[..., start:end], positions)
        pixels += [expected["pixel_values"]] if "pixel_values" in expected else []
    assert torch.equal(batch.vision["pixel_values"], torch.cat(pixels)) and len(batch.vision["image_grid_thw"]) == 3
    with torch.no_grad():
        packed = model(**batch.model_kwargs("sdpa", with_labels=False)).logits
    alone = torch.cat(alone, dim=1)
    assert packed.shape == alone.shape
    assert (packed - alone).abs().max() < TOL
