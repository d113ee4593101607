"""The loader on an InternVL packed dataset: every sub-sample as the real ``InternVLProcessor`` makes it alone.

The pipeline runs for real (scan -> bucket -> plan -> write) on a generated dataset with an
InternVL processor folder built offline (both layouts); the loader (``PackEncoder.from_packed_dir``)
then turns every pack into a ``PackBatch``. The oracle is transformers' ``InternVLProcessor`` loaded
by its own ``from_pretrained`` from the folder without its video processor (which needs torchvision;
see ``tests/test_family_internvl.py``), run on each sub-sample alone with its decoded images:
``input_ids`` and ``pixel_values`` (every tile and thumbnail, in order) must be equal (the same PIL
image processor runs on both sides, so exactly equal), every segment must have its planned length,
and the labelled tokens must decode to the assistant answers, each with its ``<|im_end|>``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _family_kit import images_only, packed_dataset, processor_on, read_packs
from transformers import InternVLProcessor

from vlmpack_offline.loader import PackEncoder

pytestmark = pytest.mark.slow


_ImagesOnly = images_only(InternVLProcessor)


@pytest.fixture(scope="module", params=["transformers5"])  # the hub layout: counted in test_family_*; loaded here once
def packed(request, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp(f"internvl_loader_{request.param}")
    # image packs: InternVL video tensors need torchvision (tests/test_internvl_video.py loads video packs)
    return packed_dataset(root, "internvl", request.param, seed=7, max_token_len=16384, videos=False)


def test_every_internvl_pack_equals_the_real_processor_on_each_sub_sample(packed):
    packed_dir, processor_dir = packed
    encoder = PackEncoder.from_packed_dir(packed_dir, processor_dir)
    oracle = _ImagesOnly.from_pretrained(str(processor_dir))
    n_images = n_tiles = n_multi_tile = 0
    for pack, media in read_packs(packed_dir):
        batch = encoder.encode(pack, media)
        bounds = batch.cu_seqlens.tolist()
        pixels = []
        for index, sub in enumerate(pack.samples):
            images, expected = processor_on(oracle, sub, media)
            start, end = bounds[index], bounds[index + 1]
            assert end - start == sub.token_len  # the plan's length
            assert torch.equal(batch.input_ids[0, start:end], expected["input_ids"][0])
            if images:
                pixels.append(expected["pixel_values"])
                n_images += len(images)
                n_tiles += len(expected["pixel_values"])
                n_multi_tile += len(expected["pixel_values"]) > len(images)
            labels = batch.labels[0, start:end]
            learned = oracle.tokenizer.decode(batch.input_ids[0, start:end][labels != -100])
            answers = [m["content"] if isinstance(m["content"], str) else "".join(i["text"] for i in m["content"])
                       for m in sub.messages if m["role"] == "assistant"]  # fmt: skip
            assert learned == "".join(answer + "<|im_end|>" for answer in answers)
        if pixels:
            assert set(batch.vision) == {"pixel_values"}
            assert torch.equal(batch.vision["pixel_values"], torch.cat(pixels))
            assert batch.vision["pixel_values"].shape[1:] == (3, 448, 448)
        else:
            assert len(batch.vision) == 0
        assert batch.token_type_ids is None  # InternVL takes no token_type_ids
        assert batch.position_ids.shape == (1, batch.seq_len)  # 1-D positions, restarting per segment
        assert torch.equal(batch.position_ids, batch.text_position_ids())
    assert n_images >= 5 and n_tiles > n_images and n_multi_tile >= 3, (n_images, n_tiles, n_multi_tile)
