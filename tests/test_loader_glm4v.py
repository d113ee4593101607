"""The loader on a GLM-4.1V packed dataset: every sub-sample as the real ``Glm4vProcessor`` makes it alone.

The pipeline runs for real (scan -> bucket -> plan -> write) on a generated dataset with a GLM-4V
processor folder built offline (both layouts); the loader (``PackEncoder.from_packed_dir``) then
turns every pack into a ``PackBatch``. The oracle is transformers' ``Glm4vProcessor`` loaded by its own
``from_pretrained`` from the folder without its video processor (which needs torchvision; see
``tests/test_family_glm4v.py``), run on each sub-sample alone with its decoded images: ``input_ids``,
``pixel_values`` and ``image_grid_thw`` must be equal (the same PIL image processor runs on both sides,
so exactly equal), and the mRoPE positions of each segment must equal what a tiny random
``Glm4vModel`` built from the folder's config computes with its own ``get_rope_index`` from the
oracle's ``input_ids``, ``mm_token_type_ids`` and ``image_grid_thw``. Every segment has its planned
length, and the labelled tokens decode to the assistant answers (an earlier turn's with the ``<|user|>`` that ends it). Video packs (GLM videos are counted)
need the video processor, hence torchvision: without it encoding one raises a clear error; with it they
are checked in ``tests/test_glm4v_video_packed_forward.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _family_kit import images_only, packed_dataset, processor_on, read_packs
from transformers import AutoConfig, Glm4vModel, Glm4vProcessor
from transformers.utils import is_torchvision_available

from vlmpack_offline.loader import PackEncoder

pytestmark = pytest.mark.slow


_ImagesOnly = images_only(Glm4vProcessor)


@pytest.fixture(scope="module", params=["transformers5"])  # the hub layout: counted in test_family_*; loaded here once
def packed(request, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp(f"glm4v_loader_{request.param}")
    return packed_dataset(root, "glm4v", request.param, seed=7, max_token_len=8192)


def _tiny_model(processor_dir: Path) -> Glm4vModel:
    """A random Glm4vModel of the folder's config (its token ids), shrunk: only get_rope_index is used."""
    config = AutoConfig.from_pretrained(str(processor_dir))
    text, vision = config.text_config, config.vision_config
    text.hidden_size, text.intermediate_size, text.num_hidden_layers = 64, 64, 1
    text.num_attention_heads, text.num_key_value_heads, text.vocab_size = 2, 1, 151680
    vision.hidden_size, vision.intermediate_size, vision.depth, vision.num_heads, vision.out_hidden_size = 32, 32, 1, 2, 64
    return Glm4vModel(config).eval()


def test_every_glm4v_pack_equals_the_real_processor_on_each_sub_sample(packed):
    packed_dir, processor_dir = packed
    encoder = PackEncoder.from_packed_dir(packed_dir, processor_dir)
    oracle = _ImagesOnly.from_pretrained(str(processor_dir))
    model = _tiny_model(processor_dir)
    n_images = n_packs_with_images = n_2d_positions = 0
    n_video_packs = 0
    for pack, media in read_packs(packed_dir):
        if any(item.get("type") == "video" for sub in pack.samples for m in sub.messages for item in m["content"]
               if isinstance(item, dict)):  # fmt: skip
            n_video_packs += 1  # counted since GLM videos are; their tensors: test_glm4v_video_packed_forward.py
            if not is_torchvision_available():  # the video processor needs it: a clear error, not wrong tensors
                with pytest.raises(ValueError, match="needs torchvision"):
                    encoder.encode(pack, media)
            continue
        batch = encoder.encode(pack, media)
        bounds = batch.cu_seqlens.tolist()
        pixels, grids = [], []
        for index, sub in enumerate(pack.samples):
            images, expected = processor_on(oracle, sub, media)
            start, end = bounds[index], bounds[index + 1]
            assert end - start == sub.token_len  # the plan's length
            assert torch.equal(batch.input_ids[0, start:end], expected["input_ids"][0])
            with torch.no_grad():
                positions, _ = model.get_rope_index(
                    expected["input_ids"], mm_token_type_ids=expected["mm_token_type_ids"],
                    image_grid_thw=expected.get("image_grid_thw"),
                )  # fmt: skip
            assert positions.shape == (3, 1, end - start)
            assert torch.equal(batch.position_ids[..., start:end], positions)
            n_2d_positions += not torch.equal(positions[1], positions[2])  # image tokens: rows != columns
            if images:
                pixels.append(expected["pixel_values"])
                grids.append(expected["image_grid_thw"])
                n_images += len(images)
            labels = batch.labels[0, start:end]
            learned = oracle.tokenizer.decode(batch.input_ids[0, start:end][labels != -100])
            answers = [m["content"] if isinstance(m["content"], str) else "".join(i["text"] for i in m["content"])
                       for m in sub.messages if m["role"] == "assistant"]  # fmt: skip
            assert learned == "<|user|>".join(answers)  # GLM ends a turn by emitting the next <|user|>
        if pixels:
            n_packs_with_images += 1
            assert set(batch.vision) == {"pixel_values", "image_grid_thw"}
            assert torch.equal(batch.vision["pixel_values"], torch.cat(pixels))
            assert torch.equal(batch.vision["image_grid_thw"], torch.cat(grids))
        else:
            assert len(batch.vision) == 0
        assert batch.token_type_ids is None  # GLM-4V takes mm_token_type_ids, not token_type_ids
    assert n_images >= 5 and n_packs_with_images >= 2 and n_2d_positions >= 5, (n_images, n_packs_with_images, n_2d_positions)
    assert n_video_packs >= 1
