"""An InternVL pack that mixes videos with images and text, made by our pipeline, trains as each sub-sample alone.

How InternVL takes video (transformers 5.23, ``models/internvl``): ``InternVLForConditionalGeneration.forward``
has no ``pixel_values_videos``; ``InternVLProcessor.__call__`` flattens its video processor's frames and
merges them with the image tiles into ONE ``pixel_values`` in the order the sample names its media, each frame
one tile behind its ``Frame{i}: <img><IMG_CONTEXT>*256</img>``; the model scatters every tile's 256 features
into the ``<IMG_CONTEXT>`` tokens in order. The loader makes each video's frames with that same processor call
(``ProcessorImages.frames``), so a pack's ``pixel_values`` is every sub-sample's tiles and frames in order.

The dataset (a text, a one-tile image, a two-image 4 + 3 tile, a 4-frame video, and a sub-sample with a
6-frame video followed by a one-tile image) goes through scan -> bucket -> plan -> write with
``packing.group_by: none`` into one pack, read back with tarfile and encoded by ``PackEncoder.from_packed_dir``.
Oracle: the real ``AutoProcessor`` (``InternVLVideoProcessor``: torchvision, ``.venv-ref``) run on each
sub-sample alone (its chat template, its decoded images, and its videos' frames decoded by PyAV at the
sampler's indices, ``do_sample_frames=False`` as the InternVL-hf folders say): the loader's ``input_ids`` and
``pixel_values`` (rows in order) equal its output exactly, and the packed logits of a tiny random
``InternVLForConditionalGeneration`` (``tiny_internvl`` of the family kit: Qwen2 text, hidden 64,
2 layers; 448 px tiles, patch 14, pixel shuffle 0.5) equal each sub-sample's logits alone with the
processor's inputs (< 1e-4, fp32, CPU, sdpa), and differ without the pack's mask and positions, or with the
pack's vision rows in another order.
"""

from __future__ import annotations

import io

import av
import numpy as np
import pytest
import torch
from _family_kit import hidden_and_text_logits, read_packs, sub_sample_images, text_item, tiny_internvl

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import SyntheticSample, image_bytes, video_bytes, write_shard

pytestmark = [pytest.mark.torchvision, pytest.mark.slow]

TOL = 1e-4
TOKENS_PER_TILE = 256  # (448 / 14) ** 2 patches * 0.5 ** 2 after the pixel shuffle
# tiles per image (448 px tiles, 1..12 + thumbnail) and frames per video (2 fps, at least 4)
TILES = {"one.jpg": 1, "tall.png": 4, "wide.jpg": 3}
FRAMES = {"short.mp4": 4, "long.mp4": 6}


def _sample(key: str, user: list[dict], answer: str, media: dict[str, bytes]) -> SyntheticSample:
    messages = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    return SyntheticSample(key=key, json={"messages": messages}, media=media)


def _dataset(root):
    samples = [
        _sample("a_text", [text_item("Say hello to everyone in this room, please.")], "Hello, everyone!", {}),
        _sample("b_image", [{"type": "image", "image": "one.jpg"}, text_item("What is it?")], "A square.",
                {"one.jpg": image_bytes(448, 448, seed=1)}),
        _sample("c_images", [{"type": "image", "image": "tall.png"}, text_item("and"),
                             {"type": "image", "image": "wide.jpg"}], "Two.",
                {"tall.png": image_bytes(300, 900, fmt="PNG", seed=2), "wide.jpg": image_bytes(900, 450, seed=3)}),
        _sample("d_video", [{"type": "video", "video": "short.mp4"}, text_item("What moves?")], "A gradient.",
                {"short.mp4": video_bytes(10, 5, 64, 48, seed=4)}),  # 2 s: the recipe's minimum of 4 frames
        _sample("e_video_image", [text_item("Look:"), {"type": "video", "video": "long.mp4"},
                                  {"type": "image", "image": "after.jpg"}, text_item("Same?")], "No, it is not.",
                {"long.mp4": video_bytes(15, 5, 96, 64, seed=5), "after.jpg": image_bytes(448, 448, seed=6)}),
    ]  # fmt: skip
    write_shard(root / "mixed.tar", samples)
    return root


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from transformers import AutoProcessor

    from vlmpack_offline.loader import PackEncoder
    from vlmpack_offline.stages import bucket, plan, scan, write

    root = tmp_path_factory.mktemp("internvl_video_fwd")
    folder = build_processor_dir(root / "processor", "internvl", layout="transformers5", video=True)
    processor = AutoProcessor.from_pretrained(folder)
    tokenizer = processor.tokenizer
    model = tiny_internvl(tokenizer)
    model.config.save_pretrained(folder)  # a checkpoint folder: scan and loader read the model's own config.json
    run = config_from_dict({
        "data": {"wds_dir": str(_dataset(root / "src")), "work_dir": str(root / "work"),
                 "packed_wds_dir": str(root / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(folder)}},
        "sample": {"max_token_len": 16384},
        "packing": {"group_by": "none"},  # videos, images and text in one pack
    }, source="test")  # fmt: skip
    for stage in (scan, bucket, plan, write):
        stage.run(run)
    (root / "src" / "mixed.tar").unlink()  # the loader reads the pack alone
    packs = list(read_packs(root / "packed"))
    encoder = PackEncoder.from_packed_dir(root / "packed", folder)
    return model, encoder, processor, run, packs


def _frames(data: bytes, indices) -> np.ndarray:
    """The frames at ``indices``, decoded by PyAV alone."""
    with av.open(io.BytesIO(data)) as container:
        every = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    return np.stack([every[i] for i in indices])


def _oracle(processor, counter, sub, media: dict[str, bytes]) -> dict:
    """The real processor on one sub-sample alone: its template, its images, its videos' sampled frames."""
    parts = [item["video"] for m in sub.messages for item in m["content"]
             if isinstance(item, dict) and item.get("type") == "video"]  # fmt: skip
    videos = [_frames(media[p], counter.probe("video", media[p], part=p).sampling.frame_indices) for p in parts]
    images = sub_sample_images(sub, media)
    text = processor.apply_chat_template(list(sub.messages), tokenize=False)
    return processor(text=[text], images=images or None, videos=videos or None, do_sample_frames=False,
                     return_tensors="pt")  # fmt: skip


def test_one_pack_holds_every_sub_sample_with_its_tiles_and_frames(setup):
    *_, packs = setup
    assert len(packs) == 1
    pack, media = packs[0]
    assert len(pack.samples) == 5
    media_tokens = {sub.id: sub.media_tokens for sub in pack.samples}
    assert sorted(media_tokens.values()) == sorted(
        TOKENS_PER_TILE * n for n in (0, TILES["one.jpg"], TILES["tall.png"] + TILES["wide.jpg"],
                                      FRAMES["short.mp4"], FRAMES["long.mp4"] + TILES["one.jpg"])
    )  # fmt: skip


def test_the_packed_forward_equals_each_sub_sample_alone_with_the_real_processors_inputs(setup):
    from vlmpack_offline.tokens import make_counter

    model, encoder, processor, run, packs = setup
    pack, media = packs[0]
    counter = make_counter(run)

    def forward(**kwargs):
        return hidden_and_text_logits(model, model.config.image_token_id, **kwargs)

    batch = encoder.encode(pack, media)
    bounds, hidden, logits, rows = batch.cu_seqlens.tolist(), [], [], []
    for index, sub in enumerate(pack.samples):
        expected = _oracle(processor, counter, sub, media)
        start, end = bounds[index], bounds[index + 1]
        assert end - start == sub.token_len
        assert torch.equal(batch.input_ids[0, start:end], expected["input_ids"][0]), sub.id
        assert torch.equal(batch.position_ids[..., start:end].flatten(), torch.arange(end - start)), sub.id
        kwargs = {"input_ids": expected["input_ids"]}
        if "pixel_values" in expected:
            kwargs["pixel_values"] = expected["pixel_values"]
            rows.append(expected["pixel_values"])
            assert len(expected["pixel_values"]) * TOKENS_PER_TILE == sub.media_tokens
        for out, alone in zip((hidden, logits), forward(**kwargs), strict=True):
            out.append(alone)
    # every sub-sample's vision rows (image tiles, thumbnails, video frames) in the pack's order, bit-equal
    assert set(batch.vision) == {"pixel_values"}
    assert batch.vision["pixel_values"].shape == (sum(TILES.values()) + TILES["one.jpg"] + sum(FRAMES.values()),
                                                  3, 448, 448)  # fmt: skip
    assert torch.equal(batch.vision["pixel_values"], torch.cat(rows))
    hidden, logits = torch.cat(hidden), torch.cat(logits)
    kwargs = batch.model_kwargs("sdpa", with_labels=False)
    packed_hidden, packed = forward(**kwargs)
    assert packed_hidden.shape == hidden.shape and packed.shape == logits.shape
    assert (packed_hidden - hidden).abs().max() < TOL
    assert (packed - logits).abs().max() < TOL
    _, unmasked = forward(**{k: v for k, v in kwargs.items() if k not in ("attention_mask", "position_ids")})
    _, reordered = forward(**{**kwargs, "pixel_values": kwargs["pixel_values"].flip(0)})
    assert (unmasked - logits).abs().max() > 1e-3  # the packing is visible: without its mask the logits differ
    assert (reordered - logits).abs().max() > 1e-3  # and the order of the rows is
