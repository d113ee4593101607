"""The loader on a Gemma3 packed dataset: every sub-sample as the real ``Gemma3Processor`` makes it alone.

The pipeline runs for real (scan -> bucket -> plan -> write) on a generated dataset with a
Gemma3 processor folder built offline (both layouts); the loader (``PackEncoder.from_packed_dir``)
then turns every pack into a ``PackBatch``. The oracle is the real processor that
``AutoProcessor`` builds from the folder, run on each sub-sample alone with its decoded
images: ``input_ids``, ``token_type_ids`` and ``pixel_values`` must be equal (the same PIL
image processor runs on both sides, so exactly equal), every segment must have its planned
length, and the labelled tokens must decode to the assistant answers, each with its end of turn.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _family_kit import packed_dataset, processor_on, read_packs
from transformers import AutoProcessor

from vlmpack_offline.loader import PackEncoder

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", params=["hub", "transformers5"])
def packed(request, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp(f"gemma3_loader_{request.param}")
    return packed_dataset(root, "gemma3", request.param, seed=5, max_token_len=2048)


def test_every_gemma3_pack_equals_the_real_processor_on_each_sub_sample(packed):
    packed_dir, processor_dir = packed
    encoder = PackEncoder.from_packed_dir(packed_dir, processor_dir)
    oracle = AutoProcessor.from_pretrained(str(processor_dir))
    end_of_turn = "<end_of_turn>"
    n_images = 0
    for pack, media in read_packs(packed_dir):
        batch = encoder.encode(pack, media)
        bounds = batch.cu_seqlens.tolist()
        pixels = []
        for index, sub in enumerate(pack.samples):
            images, expected = processor_on(oracle, sub, media)
            start, end = bounds[index], bounds[index + 1]
            assert end - start == sub.token_len  # the plan's length
            assert torch.equal(batch.input_ids[0, start:end], expected["input_ids"][0])
            assert torch.equal(batch.token_type_ids[0, start:end], expected["token_type_ids"][0])
            if images:
                pixels.append(expected["pixel_values"])
                n_images += len(images)
            labels = batch.labels[0, start:end]
            learned = oracle.tokenizer.decode(batch.input_ids[0, start:end][labels != -100])
            answers = [m["content"] if isinstance(m["content"], str) else "".join(i["text"] for i in m["content"])
                       for m in sub.messages if m["role"] == "assistant"]  # fmt: skip
            assert learned == "".join(answer + end_of_turn for answer in answers)
        if pixels:
            assert set(batch.vision) == {"pixel_values"}  # num_crops is not a model input
            assert torch.equal(batch.vision["pixel_values"], torch.cat(pixels))
        else:
            assert len(batch.vision) == 0
        assert batch.position_ids.shape == (1, batch.seq_len)  # Gemma3: 1-D positions, restarting per segment
        assert torch.equal(batch.position_ids, batch.text_position_ids())
    assert n_images >= 5
