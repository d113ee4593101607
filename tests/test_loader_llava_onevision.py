"""The loader on a LLaVA-OneVision packed dataset: every sub-sample as the real ``LlavaOnevisionProcessor``
makes it alone.

The pipeline runs for real (scan -> bucket -> plan -> write) on a generated dataset with a LLaVA-OneVision
processor folder built offline; the loader (``PackEncoder.from_packed_dir``) then turns every pack into a
``PackBatch``. The oracle is transformers' ``LlavaOnevisionProcessor`` loaded by its own ``from_pretrained``
from the folder (without its video processor in ``.venv``, which has no torchvision; ``AutoProcessor``
with videos in ``.venv-ref``), run on each sub-sample alone, its images as one list (as
``apply_chat_template`` passes them) and its videos as the frames the shared sampler picks:

* ``input_ids`` equal, and every segment has its planned length;
* ``pixel_values`` equal (the same PIL image processor runs on both sides: exactly equal). The processor
  pads each sub-sample's images to the most patches among them; the pack pads every sub-sample's to the
  most in the pack, with zeros (the model reads only the first ``image_size_to_num_patches`` of each);
* ``image_sizes`` and ``batch_num_images`` equal, concatenated over the pack: ``batch_num_images`` holds one
  entry per sub-sample with images, which is what makes the model tile a sub-sample's only image and
  not the images of a multi-image sub-sample, exactly as each sub-sample alone;
* ``pixel_values_videos`` equal (torchvision);
* the labelled tokens decode to the assistant answers, each with its ``<|im_end|>``, though the published
  template's ``{% generation %}`` markers hold the text alone (``tokens/spans.py``).
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from _family_kit import images_only, read_packs
from PIL import Image
from transformers import LlavaOnevisionProcessor

from vlmpack_offline.loader import PackEncoder
from vlmpack_offline.media import decode_frames

pytestmark = pytest.mark.slow

_ImagesOnly = images_only(LlavaOnevisionProcessor)
VIDEO = {"fps": 1.0, "max_frames": 6}


def _packed(root: Path, layout: str, *, video: bool) -> tuple[Path, Path]:
    from vlmpack_offline.config import config_from_dict
    from vlmpack_offline.stages import bucket, plan, scan, write
    from vlmpack_offline.synthetic.processor_dir import build_processor_dir
    from vlmpack_offline.synthetic.shards import generate_dataset

    processor = build_processor_dir(root / "processor", "llava_onevision", layout=layout, video=video)
    generate_dataset(root / "src", seed=5, n_shards=2, samples_per_shard=10, include_faults=False, video=video)
    config = config_from_dict({
        "data": {"wds_dir": str(root / "src"), "work_dir": str(root / "work"), "packed_wds_dir": str(root / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor)}},
        "sample": {"max_token_len": 16384}, "video": VIDEO,
    }, source="test")  # fmt: skip
    for stage in (scan, bucket, plan, write):
        stage.run(config)
    return root / "packed", processor


def _check_every_pack(packed_dir: Path, processor_dir: Path, oracle, *, video: bool) -> dict:
    encoder = PackEncoder.from_packed_dir(packed_dir, processor_dir, video=VIDEO)
    seen = {"alone": 0, "multi": 0, "video": 0, "mixed_packs": 0}
    for pack, media in read_packs(packed_dir):
        batch = encoder.encode(pack, media)
        bounds = batch.cu_seqlens.tolist()
        pixels, sizes, counts, videos = [], [], [], []
        for index, sub in enumerate(pack.samples):
            items = [item for m in sub.messages for item in m["content"]
                     if isinstance(item, dict) and item.get("type") in ("image", "video")]  # fmt: skip
            images = [Image.open(io.BytesIO(media[i["image"]])) for i in items if i["type"] == "image"]
            frames = []
            for item in (i for i in items if i["type"] == "video"):
                sampling = encoder.counter.probe("video", media[item["video"]]).sampling
                frames.append(decode_frames(media[item["video"]], sampling, resize=False))
            text = oracle.apply_chat_template(list(sub.messages), tokenize=False)
            expected = oracle(text=[text], images=[images] if images else None, videos=frames or None, return_tensors="pt")
            start, end = bounds[index], bounds[index + 1]
            assert end - start == sub.token_len  # the plan's length
            assert torch.equal(batch.input_ids[0, start:end], expected["input_ids"][0])
            if images:
                pixels.append(expected["pixel_values"])
                sizes.append(expected["image_sizes"])
                counts.append(expected["batch_num_images"])
                seen["alone" if len(images) == 1 else "multi"] += 1
            if frames:
                videos.append(expected["pixel_values_videos"])
                seen["video"] += 1
            labels = batch.labels[0, start:end]
            learned = oracle.tokenizer.decode(batch.input_ids[0, start:end][labels != -100])
            answers = ["".join(i["text"] for i in m["content"]) for m in sub.messages if m["role"] == "assistant"]
            assert learned == "".join(a + "<|im_end|>" for a in answers)  # its markers hold the text alone
        if pixels:
            got = batch.vision["pixel_values"]
            assert got.shape[0] == sum(len(p) for p in pixels) and got.shape[1] == max(p.shape[1] for p in pixels)
            row = 0
            for part in pixels:  # each sub-sample's patches, then zeros up to the pack's most
                assert torch.equal(got[row : row + len(part), : part.shape[1]], part)
                assert not got[row : row + len(part), part.shape[1] :].any()
                row += len(part)
            assert torch.equal(batch.vision["image_sizes"], torch.cat(sizes))
            assert torch.equal(batch.vision["batch_num_images"], torch.cat(counts))
            seen["mixed_packs"] += len({int(c) == 1 for c in torch.cat(counts)}) == 2
        else:
            assert "pixel_values" not in batch.vision
        if videos:
            assert torch.equal(batch.vision["pixel_values_videos"], torch.cat(videos))
        assert batch.position_ids.shape == (1, batch.seq_len)  # 1-D positions, restarting per segment
        assert torch.equal(batch.position_ids, batch.text_position_ids())
    return seen


def test_every_pack_equals_the_real_processor_on_each_sub_sample(tmp_path):
    packed_dir, processor_dir = _packed(tmp_path, "transformers5", video=False)
    seen = _check_every_pack(packed_dir, processor_dir, _ImagesOnly.from_pretrained(processor_dir), video=False)
    assert seen["alone"] >= 4 and seen["multi"] >= 2 and seen["mixed_packs"] >= 1, seen


@pytest.mark.torchvision
def test_every_pack_with_videos_equals_autoprocessor(tmp_path):
    from transformers import AutoProcessor

    packed_dir, processor_dir = _packed(tmp_path, "hub", video=True)
    seen = _check_every_pack(packed_dir, processor_dir, AutoProcessor.from_pretrained(processor_dir), video=True)
    assert seen["alone"] >= 4 and seen["multi"] >= 2 and seen["video"] >= 2, seen
