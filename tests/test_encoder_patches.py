"""What the vision encoder runs for each media item: ``Count.encoder_patches`` and ``Count.encoder_attention``.

The plan's compute cost model reads, per sample, how many patches its vision encoder processes (before any
spatial merge or pooling) and the sum over the encoder's independent attention blocks of (tokens in the
block)**2. For every family both must equal what the real HF processor hands the model and what the
model's own code attends within::

    family             patches: the real processor's output            blocks: the model's own rule
    Qwen-VL, GLM-4V    rows of pixel_values(_videos)                    get_vision_cu_seqlens(grid_thw): one per
                                                                        temporal patch (t blocks of h * w)
    Kimi-K2.5          rows of pixel_values(_videos)                    get_vision_cu_seqlens(grid_thw,
                                                                        merge_temporal=True): one per chunk row
    InternVL           tiles of pixel_values x its tower's patches      one per tile: a tiny InternVLVisionModel's
                                                                        sequence (its patches + a class token)
    Gemma3             crops of pixel_values x its tower's patches      one per crop: a tiny SiglipVisionModel's
    LLaVA-OneVision    tiles of pixel_values x 729                      one per tile (or video frame)
    Mistral3           image_sizes / patch_size, per image              one per image

The tiny towers are transformers' own classes with random weights (hidden size 32, one layer): only the
length of the sequence they attend over is read. Tests marked ``torchvision`` use processors that need it
(videos, Kimi-K2.5, Pixtral); ``make test`` runs them in ``.venv-ref``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch
from _family_kit import images_only
from PIL import Image
from transformers import InternVLProcessor, LlavaOnevisionProcessor
from transformers.vision_utils import get_vision_cu_seqlens

from vlmpack_offline.conversation import Conversation, MediaRef
from vlmpack_offline.errors import ConfigError
from vlmpack_offline.media import decode_frames
from vlmpack_offline.media.video import VideoSampling
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import image_bytes, video_bytes
from vlmpack_offline.tokens import VideoMedia, make_counter

# (width, height): tiny, square, wide, tall, large
SIZES = [(1, 1), (448, 448), (1000, 300), (300, 1000), (1920, 1080)]


def _conversation(kinds: list[str]) -> Conversation:
    parts = [f"m{i}.{'mp4' if kind == 'video' else 'png'}" for i, kind in enumerate(kinds)]
    content = [{"type": kind, kind: part} for kind, part in zip(kinds, parts, strict=True)]
    messages = ({"role": "user", "content": [*content, {"type": "text", "text": "What is it?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Something."}]})  # fmt: skip
    return Conversation(messages=messages, media=tuple(MediaRef(kind=k, part=p) for k, p in zip(kinds, parts, strict=True)))


def _count(counter, items: list[tuple[str, bytes]]):
    """The counter's Count of one sample holding ``items`` (kind, bytes) in order."""
    media = [counter.probe(kind, data, part=f"m{i}") for i, (kind, data) in enumerate(items)]
    return counter.count(_conversation([kind for kind, _ in items]), media)


def _blocks(cu_seqlens: torch.Tensor) -> tuple[int, int]:
    """(tokens, sum of squared block lengths) of the model's ``cu_seqlens``."""
    lengths = (cu_seqlens[1:] - cu_seqlens[:-1]).tolist()
    return sum(lengths), sum(n * n for n in lengths)


def _counter(make_config, folder: Path, **video):
    return make_counter(make_config(wds_dir="unused", processor_dir=folder, **({"video": video} if video else {})))


def _png(width: int, height: int) -> bytes:
    return image_bytes(width, height, fmt="PNG", seed=width + height)


def _opened(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data))


# -- Qwen-VL: the grid, one block per temporal patch ---------------------------------------------------------------


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_a_qwen_image_is_its_pixel_values_rows_in_one_block(tmp_path, make_config, family):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    folder = build_processor_dir(tmp_path, family)
    counter, image_processor = _counter(make_config, folder), Qwen2VLImageProcessorPil.from_pretrained(folder)
    for size in SIZES:
        data = _png(*size)
        out = image_processor(images=[_opened(data)], return_tensors="pt")
        patches, attention = _blocks(get_vision_cu_seqlens(out["image_grid_thw"]))
        count = _count(counter, [("image", data)])
        assert count.encoder_patches == out["pixel_values"].shape[0] == patches, size
        assert count.encoder_attention == attention == patches**2, size  # an image is one frame: one block


@pytest.mark.parametrize(("family", "side"), [("qwen2_5_vl", 14), ("qwen3_vl", 16)])
def test_a_qwen_video_is_one_block_of_h_times_w_per_temporal_patch(make_config, qwen25_processor_dir,
                                                                   qwen3_processor_dir, family, side):  # fmt: skip
    """Hand-checked: 8 frames at 20 x 30 patches, temporal patch 2 -> grid (4, 20, 30): 2400 patches in 4
    blocks of 600 (``cu_seqlens`` repeats h * w once per temporal patch)."""
    folder = {"qwen2_5_vl": qwen25_processor_dir, "qwen3_vl": qwen3_processor_dir}[family]
    counter = _counter(make_config, folder)
    sampling = VideoSampling(frame_indices=tuple(range(8)), resized_height=20 * side, resized_width=30 * side,
                             native_fps=4.0, total_frames=8)  # fmt: skip
    count = counter.count(_conversation(["video"]), [VideoMedia(sampling=sampling)])
    assert (count.encoder_patches, count.encoder_attention) == (2400, 4 * 600**2)
    assert (count.encoder_patches, count.encoder_attention) == _blocks(get_vision_cu_seqlens(torch.tensor([[4, 20, 30]])))


def test_a_sample_sums_the_encoder_work_of_its_items(make_config, qwen25_processor_dir):
    counter = _counter(make_config, qwen25_processor_dir)
    image, wide, video = ("image", _png(640, 480)), ("image", _png(1000, 300)), ("video", video_bytes(20, 10, 96, 64))
    alone = [_count(counter, [item]) for item in (image, video, wide)]
    together = _count(counter, [image, video, wide])
    assert together.encoder_patches == sum(c.encoder_patches for c in alone) > 0
    assert together.encoder_attention == sum(c.encoder_attention for c in alone)
    assert _count(counter, []).encoder_patches == _count(counter, []).encoder_attention == 0  # text only


@pytest.mark.torchvision
@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_a_qwen_video_is_the_real_video_processors_rows_and_grid(tmp_path, make_config, family):
    from transformers import AutoVideoProcessor
    from transformers.video_utils import VideoMetadata

    folder = build_processor_dir(tmp_path, family, video=True)
    counter, video_processor = _counter(make_config, folder), AutoVideoProcessor.from_pretrained(folder)
    kwargs = {} if family == "qwen2_5_vl" else {"do_sample_frames": False}  # Qwen2-VL's samples none by default
    for clip in [(30, 10, 96, 64), (9, 3, 320, 240), (20, 10, 640, 360)]:
        data = video_bytes(*clip)
        sampling = counter.probe("video", data).sampling
        metadata = VideoMetadata(total_num_frames=sampling.total_frames, fps=sampling.native_fps,
                                 frames_indices=list(sampling.frame_indices))  # fmt: skip
        out = video_processor(videos=[decode_frames(data, sampling, resize=False)], video_metadata=[metadata],
                              return_tensors="pt", **kwargs)  # fmt: skip
        count = _count(counter, [("video", data)])
        assert out["video_grid_thw"][0, 0] > 1, clip  # several temporal patches: several blocks
        assert count.encoder_patches == out["pixel_values_videos"].shape[0], clip
        assert (count.encoder_patches, count.encoder_attention) == _blocks(get_vision_cu_seqlens(out["video_grid_thw"]))


# -- GLM-4V: as Qwen-VL ---------------------------------------------------------------------------------------------


def test_a_glm4v_image_is_its_pixel_values_rows_in_one_block(tmp_path, make_config):
    from transformers.models.glm4v.image_processing_pil_glm4v import Glm4vImageProcessorPil

    folder = build_processor_dir(tmp_path, "glm4v")
    counter, image_processor = _counter(make_config, folder), Glm4vImageProcessorPil.from_pretrained(folder)
    for size in SIZES:
        data = _png(*size)
        out = image_processor(images=[_opened(data)], return_tensors="pt")
        count = _count(counter, [("image", data)])
        assert count.encoder_patches == out["pixel_values"].shape[0], size
        assert (count.encoder_patches, count.encoder_attention) == _blocks(get_vision_cu_seqlens(out["image_grid_thw"]))


@pytest.mark.torchvision
@pytest.mark.parametrize("family", ["glm4v", "glm46v"])
def test_a_glm4v_video_is_the_real_video_processors_rows_in_one_block_per_temporal_patch(tmp_path, make_config, family):
    from transformers import AutoVideoProcessor
    from transformers.video_utils import VideoMetadata

    folder = build_processor_dir(tmp_path, family, video=True)
    counter, video_processor = _counter(make_config, folder), AutoVideoProcessor.from_pretrained(folder)
    for clip in [(50, 10, 96, 64), (37, 12, 64, 48), (45, 15, 300, 40)]:
        data = video_bytes(*clip)
        sampling = counter.probe("video", data).sampling
        metadata = VideoMetadata(total_num_frames=sampling.total_frames, fps=sampling.native_fps,
                                 duration=sampling.total_frames / sampling.native_fps,
                                 frames_indices=list(sampling.frame_indices))  # fmt: skip
        out = video_processor(videos=[decode_frames(data, sampling, resize=False)], video_metadata=[metadata],
                              do_sample_frames=False, return_tensors="pt")  # fmt: skip
        count = _count(counter, [("video", data)])
        assert out["video_grid_thw"][0, 0] > 1, clip
        assert count.encoder_patches == out["pixel_values_videos"].shape[0], clip
        assert (count.encoder_patches, count.encoder_attention) == _blocks(get_vision_cu_seqlens(out["video_grid_thw"]))


# -- InternVL: one block per tile, with the class token --------------------------------------------------------------


def _tiny_internvit():
    from transformers import InternVLVisionConfig, InternVLVisionModel

    torch.manual_seed(0)
    config = InternVLVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                  image_size=[448, 448], patch_size=[14, 14])  # fmt: skip
    return InternVLVisionModel(config).eval()


def _tower_blocks(tower, pixel_values: torch.Tensor) -> tuple[int, int, int]:
    """(batch items, tokens per item, patches per item) of a tower that attends within each batch item."""
    with torch.no_grad():
        hidden = tower(pixel_values=pixel_values).last_hidden_state
    embeddings = tower.embeddings  # InternViT keeps num_patches on its patch embeddings, SigLIP on the embeddings
    patches = getattr(embeddings, "patch_embeddings", embeddings).num_patches
    return hidden.shape[0], hidden.shape[1], patches


def test_each_internvl_tile_is_one_block_of_its_patches_and_class_token(tmp_path, make_config):
    folder = build_processor_dir(tmp_path, "internvl")
    counter, processor = _counter(make_config, folder), images_only(InternVLProcessor).from_pretrained(folder)
    tower = _tiny_internvit()
    tiles_seen = set()
    for size in SIZES:
        data = _png(*size)
        pixel_values = processor(text=[processor.image_token], images=[_opened(data)], return_tensors="pt")["pixel_values"]
        tiles, tokens, patches = _tower_blocks(tower, pixel_values)
        count = _count(counter, [("image", data)])
        assert (patches, tokens) == ((448 // 14) ** 2, (448 // 14) ** 2 + 1)  # InternViT prepends a class token
        assert count.encoder_patches == tiles * patches, size
        assert count.encoder_attention == tiles * tokens**2, size
        tiles_seen.add(tiles)
    assert len(tiles_seen) >= 3, tiles_seen  # one tile, and grids of several tiles + thumbnail


@pytest.mark.torchvision
def test_each_internvl_video_frame_is_one_tile(tmp_path, make_config):
    from transformers import AutoProcessor
    from transformers.video_utils import VideoMetadata

    folder = build_processor_dir(tmp_path, "internvl", video=True)
    counter = _counter(make_config, folder)
    processor = AutoProcessor.from_pretrained(folder)
    data = video_bytes(30, 10, 96, 64)
    sampling = counter.probe("video", data).sampling
    metadata = VideoMetadata(total_num_frames=sampling.total_frames, fps=sampling.native_fps,
                             frames_indices=list(sampling.frame_indices))  # fmt: skip
    out = processor(text=[processor.video_token], videos=[decode_frames(data, sampling, resize=False)],
                    video_metadata=[metadata], do_sample_frames=False, return_tensors="pt")  # fmt: skip
    tiles, tokens, patches = _tower_blocks(_tiny_internvit(), out["pixel_values"])
    count = _count(counter, [("video", data)])
    assert tiles == sampling.n_frames > 1
    assert (count.encoder_patches, count.encoder_attention) == (tiles * patches, tiles * tokens**2)


# -- Gemma3: one crop per image ------------------------------------------------------------------------------------


def _tiny_siglip(image_size: int, patch: int):
    from transformers import SiglipVisionConfig, SiglipVisionModel

    torch.manual_seed(0)
    config = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                image_size=image_size, patch_size=patch)  # fmt: skip
    return SiglipVisionModel(config).eval()


def _with_vision_patch(folder: Path, patch) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vision_config": {"model_type": "siglip_vision_model",
                                                                                 "patch_size": patch}}))  # fmt: skip


def test_a_gemma3_image_is_one_crop_of_its_towers_patches(tmp_path, make_config):
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil

    folder = build_processor_dir(tmp_path / "published", "gemma3")
    image_processor = Gemma3ImageProcessorPil.from_pretrained(folder)
    counter = _counter(make_config, folder)
    data = _png(1000, 300)
    pixel_values = image_processor(images=[_opened(data)], return_tensors="pt")["pixel_values"]
    crops, tokens, patches = _tower_blocks(_tiny_siglip(896, 14), pixel_values)
    count = _count(counter, [("image", data)])
    assert (crops, tokens, patches) == (1, 4096, 4096)  # 896 / 14 = 64 patches a side, no class token
    assert (count.encoder_patches, count.encoder_attention) == (4096, 4096**2)
    # a model folder's config.json names its tower's patch: 896 / 16 = 56 a side
    other = build_processor_dir(tmp_path / "patch16", "gemma3")
    _with_vision_patch(other, 16)
    crops, tokens, patches = _tower_blocks(_tiny_siglip(896, 16), pixel_values)
    assert (_count(_counter(make_config, other), [("image", data)]).encoder_patches, tokens) == (patches, patches) == (3136, 3136)


def test_a_vision_patch_that_is_not_one_square_edge_is_refused(tmp_path, make_config):
    folder = build_processor_dir(tmp_path, "gemma3")
    _with_vision_patch(folder, [14, 16])
    with pytest.raises(ConfigError, match=r"vision_config.patch_size is \[14, 16\]"):
        _counter(make_config, folder)


# -- LLaVA-OneVision: one block per tile the model takes -------------------------------------------------------------


def test_llava_onevision_runs_729_patches_per_tile_a_lone_image_tiled(tmp_path, make_config):
    """A sample's only image: every anyres tile + the base image; each image of a multi-image sample: one tile.
    SigLIP at 384 / 14: 27 * 27 = 729 patches a tile, no class token."""
    folder = build_processor_dir(tmp_path, "llava_onevision")
    counter, processor = _counter(make_config, folder), images_only(LlavaOnevisionProcessor).from_pretrained(folder)
    assert (_tiny_siglip(384, 14).embeddings.num_patches, processor.num_image_tokens) == (729, 729)
    samples = [[(1000, 300)], [(2000, 3000)], [(384, 384)], [(1000, 300), (2000, 3000)]]
    for sizes in samples:
        datas = [_png(*size) for size in sizes]
        out = processor(text=[processor.image_token * len(datas)], images=[[_opened(d) for d in datas]])
        tiles = [len(pixels) for pixels in out["pixel_values"]]
        count = _count(counter, [("image", d) for d in datas])
        assert count.encoder_patches == sum(tiles) * 729, (sizes, tiles)
        assert count.encoder_attention == sum(tiles) * 729**2, (sizes, tiles)
        assert (len(sizes) > 1) == (sum(tiles) == len(sizes)), (sizes, tiles)


@pytest.mark.torchvision
def test_llava_onevision_runs_each_video_frame_as_one_tile(tmp_path, make_config):
    from transformers import AutoProcessor

    folder = build_processor_dir(tmp_path, "llava_onevision", video=True)
    counter, processor = _counter(make_config, folder, max_frames=5, min_frames=5), AutoProcessor.from_pretrained(folder)
    data = video_bytes(30, 10, 96, 64)
    sampling = counter.probe("video", data).sampling
    out = processor.video_processor(videos=[decode_frames(data, sampling, resize=False)], return_tensors="pt")
    frames = out["pixel_values_videos"].shape[1]
    count = _count(counter, [("video", data)])
    assert frames == 5 and out["pixel_values_videos"].shape[-2:] == (384, 384)
    assert (count.encoder_patches, count.encoder_attention) == (frames * 729, frames * 729**2)


# -- Mistral3 (Pixtral): the resized image's patches, one block per image ---------------------------------------------


@pytest.mark.torchvision
def test_a_pixtral_image_is_one_block_of_its_resized_patches(tmp_path, make_config):
    from transformers import AutoProcessor

    folder = build_processor_dir(tmp_path, "mistral3")
    counter, processor = _counter(make_config, folder), AutoProcessor.from_pretrained(folder)
    patch = json.loads((folder / "config.json").read_text())["vision_config"]["patch_size"]
    for size in SIZES[1:]:  # 1 x 1 is refused by the processor
        data = _png(*size)
        out = processor(text=["[IMG]"], images=[_opened(data)], return_tensors="pt")
        height, width = out["image_sizes"][0].tolist()
        count = _count(counter, [("image", data)])
        assert count.encoder_patches == (height // patch) * (width // patch), size
        assert count.encoder_attention == count.encoder_patches**2, size


# -- Kimi-K2.5: one block per image, one per chunk of frames ---------------------------------------------------------


@pytest.mark.torchvision
def test_kimi_images_and_video_chunks_are_the_real_processors_rows_and_blocks(tmp_path, make_config):
    from transformers import AutoProcessor
    from transformers.video_utils import VideoMetadata

    folder = build_processor_dir(tmp_path, "kimi_k25", video=True)
    counter, processor = _counter(make_config, folder), AutoProcessor.from_pretrained(folder)
    for size in SIZES:
        data = _png(*size)
        out = processor.image_processor(images=[_opened(data)], return_tensors="pt")
        count = _count(counter, [("image", data)])
        assert count.encoder_patches == out["pixel_values"].shape[0], size
        assert (count.encoder_patches, count.encoder_attention) == _blocks(
            get_vision_cu_seqlens(out["image_grid_thw"], merge_temporal=True))  # fmt: skip
    data = video_bytes(35, 10, 96, 64)  # 3.5 s at 2 fps: 7 frames, chunks of 4 and 3
    sampling = counter.probe("video", data).sampling
    metadata = VideoMetadata(total_num_frames=sampling.total_frames, fps=sampling.native_fps,
                             duration=sampling.total_frames / sampling.native_fps,
                             frames_indices=list(sampling.frame_indices))  # fmt: skip
    out = processor.video_processor(videos=[decode_frames(data, sampling, resize=False)], video_metadata=[metadata],
                                    do_sample_frames=False, return_tensors="pt")  # fmt: skip
    count = _count(counter, [("video", data)])
    assert out["video_grid_thw"][:, 0].tolist() == [4, 3]
    assert count.encoder_patches == out["pixel_values_videos"].shape[0]
    assert (count.encoder_patches, count.encoder_attention) == _blocks(
        get_vision_cu_seqlens(out["video_grid_thw"], merge_temporal=True))  # fmt: skip
