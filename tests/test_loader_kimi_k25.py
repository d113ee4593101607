"""The loader on a Kimi-K2.5 packed dataset: every sub-sample as the real ``Kimi_K25Processor`` makes it alone.

The pipeline runs for real (scan -> bucket -> plan -> write) on a generated dataset with a Kimi-K2.5
processor folder built offline; the loader (``PackEncoder.from_packed_dir``) then turns every pack into a
``PackBatch``. The oracle is the real processor ``AutoProcessor`` builds from the folder (its image
processor needs torchvision: ``.venv-ref``), run on each sub-sample alone with its decoded images:
``input_ids``, ``pixel_values`` (``[patches, 3, 14, 14]``) and ``image_grid_thw`` must be exactly equal
(the same processor runs on both sides), every segment has its planned length, positions restart at 0
per segment (Kimi-K2.5's text model takes 1-D positions), and the labelled tokens decode to what the
model generates after the ``<think>`` of the generation prompt: ``</think>`` + the answer + ``<|im_end|>``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _family_kit import packed_dataset, processor_on, read_packs

from vlmpack_offline.loader import PackEncoder

pytestmark = [pytest.mark.slow, pytest.mark.torchvision]


@pytest.fixture(scope="module", params=["transformers5"])  # the hub layout: counted in test_family_*; loaded here once
def packed(request, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp(f"kimi_loader_{request.param}")
    return packed_dataset(root, "kimi_k25", request.param, seed=9, max_token_len=4096)


def test_every_kimi_pack_equals_the_real_processor_on_each_sub_sample(packed):
    from transformers import AutoProcessor

    packed_dir, processor_dir = packed
    encoder = PackEncoder.from_packed_dir(packed_dir, processor_dir)
    oracle = AutoProcessor.from_pretrained(str(processor_dir))
    n_images = n_packs_with_images = 0
    for pack, media in read_packs(packed_dir):
        batch = encoder.encode(pack, media)
        bounds = batch.cu_seqlens.tolist()
        pixels, grids = [], []
        for index, sub in enumerate(pack.samples):
            images, expected = processor_on(oracle, sub, media)
            start, end = bounds[index], bounds[index + 1]
            assert end - start == sub.token_len  # the plan's length
            assert torch.equal(batch.input_ids[0, start:end], expected["input_ids"][0])
            if images:
                pixels.append(expected["pixel_values"])
                grids.append(expected["image_grid_thw"])
                n_images += len(images)
            labels = batch.labels[0, start:end]
            learned = oracle.tokenizer.decode(batch.input_ids[0, start:end][labels != -100])
            answers = [m["content"] if isinstance(m["content"], str) else "".join(i["text"] for i in m["content"])
                       for m in sub.messages if m["role"] == "assistant"]  # fmt: skip
            assert learned == "".join(f"</think>{answer}<|im_end|>" for answer in answers)
        if pixels:
            n_packs_with_images += 1
            assert set(batch.vision) == {"pixel_values", "image_grid_thw"}
            assert torch.equal(batch.vision["pixel_values"], torch.cat(pixels))
            assert torch.equal(batch.vision["image_grid_thw"], torch.cat(grids))
        else:
            assert len(batch.vision) == 0
        assert batch.position_ids.shape == (1, batch.seq_len)  # 1-D positions, restarting per segment
        assert torch.equal(batch.position_ids, batch.text_position_ids())
    assert n_images >= 5 and n_packs_with_images >= 2
