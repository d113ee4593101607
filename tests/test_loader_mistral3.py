"""The loader on a Mistral3 packed dataset: every sub-sample as the real ``PixtralProcessor`` makes it alone.

The pipeline runs for real (scan -> bucket -> plan -> write) on a generated dataset with the offline
Mistral3 folder (transformers-5 layout; both layouts are counted in ``test_conformance_counts.py``); the loader
(``PackEncoder.from_packed_dir``) turns every pack into a ``PackBatch``. The oracle is transformers'
``PixtralProcessor`` from ``AutoProcessor`` (it needs torchvision: ``.venv-ref``), run on each sub-sample
alone with its decoded images: ``input_ids`` equal, each sub-sample's planned length, 1-D positions
``0..n-1`` per sub-sample (Mistral3 has no rope index), labels that decode to the assistant answers and
their ``</s>``. Vision: ``image_sizes`` equal the processor's per image, and ``pixel_values`` equal
exactly what the processor gives for all the pack's images in one call (its own batch padding: each image
zero-padded at the bottom / right to the largest height and width; ``image_sizes`` says what is real, and
``PixtralVisionModel`` crops each image to it before the patch embedding is used). Each image's real
region equals the processor's output for its sub-sample alone.

Without torchvision the loader takes ``PixtralImages`` (the PIL image processor as PixtralProcessor
drives it); the last test checks it against the real processor, image by image, with either backend.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from _family_kit import packed_dataset, read_packs, sub_sample_images
from PIL import Image

from vlmpack_offline.loader import PackEncoder
from vlmpack_offline.loader.pixtral_images import PixtralImages
from vlmpack_offline.synthetic.shards import image_bytes

pytestmark = pytest.mark.torchvision


@pytest.fixture(scope="module")
def packed(tmp_path_factory) -> tuple[Path, Path]:
    return packed_dataset(tmp_path_factory.mktemp("mistral3_loader"), "mistral3", "transformers5", seed=7,
                          max_token_len=8192)  # fmt: skip


@pytest.mark.slow
def test_every_mistral3_pack_equals_the_real_processor_on_each_sub_sample(packed):
    from transformers import AutoProcessor

    packed_dir, processor_dir = packed
    encoder = PackEncoder.from_packed_dir(packed_dir, processor_dir)
    oracle = AutoProcessor.from_pretrained(str(processor_dir))
    assert type(oracle).__name__ == "PixtralProcessor"
    n_images = n_packs_with_images = n_padded = 0
    for pack, media in read_packs(packed_dir):
        batch = encoder.encode(pack, media)
        bounds = batch.cu_seqlens.tolist()
        alone_pixels, sizes, every_image = [], [], []
        for index, sub in enumerate(pack.samples):
            images = sub_sample_images(sub, media)
            text = oracle.apply_chat_template(list(sub.messages), tokenize=False)
            expected = oracle(text=[text], images=images or None, return_tensors="pt")
            start, end = bounds[index], bounds[index + 1]
            assert end - start == sub.token_len  # the plan's length
            assert torch.equal(batch.input_ids[0, start:end], expected["input_ids"][0])
            assert torch.equal(batch.position_ids[..., start:end].reshape(-1), torch.arange(end - start))
            if images:
                alone_pixels += list(expected["pixel_values"])
                sizes.append(expected["image_sizes"])
                every_image += images
            labels = batch.labels[0, start:end]
            learned = oracle.tokenizer.decode(batch.input_ids[0, start:end][labels != -100])
            answers = [m["content"] if isinstance(m["content"], str) else m["content"][0]["text"]
                       for m in sub.messages if m["role"] == "assistant"]  # fmt: skip
            assert learned == "".join(f"{answer}</s>" for answer in answers)
        if not every_image:
            assert len(batch.vision) == 0
            continue
        n_packs_with_images += 1
        n_images += len(every_image)
        assert set(batch.vision) == {"pixel_values", "image_sizes"}
        assert torch.equal(batch.vision["image_sizes"], torch.cat(sizes))
        together = oracle.image_processor(every_image, patch_size=oracle.patch_size * oracle.spatial_merge_size,
                                          return_tensors="pt")  # fmt: skip
        assert torch.equal(batch.vision["pixel_values"], together["pixel_values"])  # HF's batch padding
        for k, (height, width) in enumerate(batch.vision["image_sizes"].tolist()):
            assert torch.equal(batch.vision["pixel_values"][k, :, :height, :width], alone_pixels[k][:, :height, :width])
            n_padded += (height, width) != tuple(batch.vision["pixel_values"].shape[-2:])
    assert n_images >= 5 and n_packs_with_images >= 2 and n_padded >= 2, (n_images, n_packs_with_images, n_padded)


@pytest.mark.parametrize("backend", ["torchvision", "pil"])
def test_pixtral_images_equal_the_real_processor(packed, backend):
    """``PixtralImages`` (the loader's class without torchvision) equals ``PixtralProcessor`` image by image."""
    from transformers import AutoImageProcessor, AutoProcessor

    processor_dir = packed[1]
    kwargs = {"size": {"longest_edge": 448}}
    ours = PixtralImages.from_processor_dir(processor_dir, **kwargs)
    oracle = AutoProcessor.from_pretrained(str(processor_dir), **kwargs)
    if backend == "pil":  # both sides on transformers' PIL image processor (what runs without torchvision)
        ours.image_processor = AutoImageProcessor.from_pretrained(str(processor_dir), backend="pil", **kwargs)
        oracle.image_processor = AutoImageProcessor.from_pretrained(str(processor_dir), backend="pil", **kwargs)
        assert type(oracle.image_processor).__name__ == "PixtralImageProcessorPil"
    for width, height in ((1, 1), (50, 700), (1000, 300), (333, 777)):
        data = image_bytes(width, height, fmt="PNG", seed=width)
        got = ours.image(data)
        expected = oracle(text=["[IMG]"], images=[Image.open(io.BytesIO(data))], return_tensors="pt")
        assert set(got) == {"pixel_values", "image_sizes"}
        assert torch.equal(got["image_sizes"], expected["image_sizes"])
        assert torch.equal(got["pixel_values"], expected["pixel_values"])
