"""Automodel's own tokenization of each sample, with the real HF processor, gives the adapter's packs.

The oracle is entirely Automodel's and HF's: ``PreTokenizedDatasetWrapper`` renders each raw
conversation with the real ``Qwen2_5_VLProcessor`` (chat template, image pads, pixels) and builds its
labels with Automodel's own ``build_labels_from_template``; ``_compute_mrope_position_ids`` (the HF
model's ``get_rope_index``), ``_shift_sample`` and ``_build_packed_vlm_sample`` pack them. Every
field of every pack must equal ``AutomodelAdapter.pack``'s, labels included. The processor's image
processor is the PIL one, as the loader's (the torchvision one resizes with another kernel: pixel
values within 0.03, tokens identical).

One difference is Automodel's, and vlmpack keeps the HF processor's behaviour: Automodel's wrapper
converts every PIL image with ``convert("RGB")``, which drops a PNG's alpha channel, where HF's image
processor (handed the image itself) composites it on white. So the pixels of images with
transparency differ (their tokens and grids do not); every other image's pixels are equal.
"""

from __future__ import annotations

import io

import pytest
import torch
from _real_packs import build_packed
from PIL import Image

from vlmpack_offline.loader import PackDataset, PackEncoder
from vlmpack_offline.loader.adapters import AutomodelAdapter
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import generate_dataset
from vlmpack_offline.synthetic.tiny_models import tiny_qwen_vl

pytestmark = pytest.mark.torchvision
pytest.importorskip("torchvision")
datasets = pytest.importorskip("nemo_automodel.components.datasets.vlm.datasets")
from nemo_automodel.components.datasets.vlm import neat_packing_vlm as neat  # noqa: E402
from transformers import AutoProcessor  # noqa: E402
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil  # noqa: E402


def _conversation(sub, media: dict[str, bytes]) -> dict:
    """The sample as Automodel's datasets hand it on: messages with PIL images in place of their names."""
    messages = []
    for message in sub.messages:
        content = message["content"]
        items = [{"type": "text", "text": content}] if isinstance(content, str) else content
        messages.append({"role": message["role"], "content": [
            {"type": "image", "image": Image.open(io.BytesIO(media[item["image"]])).convert("RGB")}
            if item.get("type") == "image" else item for item in items
        ]})  # fmt: skip
    return {"conversation": messages}


def test_every_pack_equals_automodels_own_tokenization_of_its_samples(tmp_path):
    processor_dir = build_processor_dir(tmp_path / "processor", "qwen2_5_vl")
    generate_dataset(tmp_path / "src", seed=11, n_shards=2, samples_per_shard=10, include_faults=False, video=False)
    packed = build_packed(tmp_path, tmp_path / "src", processor_dir, video=None).packed_wds_dir
    processor = AutoProcessor.from_pretrained(processor_dir)
    processor.image_processor = Qwen2VLImageProcessorPil.from_pretrained(processor_dir)
    model = tiny_qwen_vl("qwen2_5_vl").eval()
    encoder = PackEncoder.from_packed_dir(packed)
    adapter, dataset = AutomodelAdapter(encoder), PackDataset(packed, encoder, rank=0, world_size=1)
    images = transparent = 0
    for index in range(len(dataset.packs)):
        cooked = dataset.packs.read(index)
        wrapper = datasets.PreTokenizedDatasetWrapper([_conversation(sub, cooked.media) for sub in cooked.pack.samples],
                                                      processor, inject_fake_images=False)  # fmt: skip
        samples = [wrapper[i] for i in range(len(cooked.pack.samples))]
        for sample in samples:
            sample["position_ids"] = neat._compute_mrope_position_ids(sample, model.model.get_rope_index)
        theirs = neat._build_packed_vlm_sample([neat._shift_sample(s, has_mrope=True) for s in samples],
                                               pack_size=1 << 20, padding_idx=0, has_mrope=True)  # fmt: skip
        ours = adapter.pack(dataset.encode_cooked(cooked, None))
        for key, value in theirs.items():
            if key == "pixel_values" and value is not None:
                assert ours[key].shape == value.shape
                rows = torch.cat([torch.full((int(t * h * w),), alpha) for (t, h, w), alpha in
                                  zip(theirs["image_grid_thw"].tolist(), _has_alpha(cooked), strict=True)])  # fmt: skip
                assert torch.equal(ours[key][~rows], value[~rows]), index
                assert not torch.equal(ours[key][rows], value[rows]) or not rows.any()
                transparent += int(rows.any())
            elif isinstance(value, torch.Tensor):
                assert ours[key].dtype == value.dtype and torch.equal(ours[key], value), (index, key)
            else:
                assert ours[key] == value, (index, key)
        images += theirs["n_images"]
    assert images > 0 and transparent > 0


def _has_alpha(cooked) -> list[bool]:
    """Per image of the pack, in order: whether it has transparency (RGBA, LA, or a palette with it)."""
    out = []
    for sub in cooked.pack.samples:
        for message in sub.messages:
            if isinstance(message["content"], str):
                continue
            for item in message["content"]:
                if item.get("type") == "image":
                    image = Image.open(io.BytesIO(cooked.media[item["image"]]))
                    out.append(image.mode in ("RGBA", "LA") or "transparency" in image.info)
    return out
