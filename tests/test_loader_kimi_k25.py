"""The loader on a Kimi-K2.5 packed dataset: every sub-sample as the real ``Kimi_K25Processor`` makes it alone.

The pipeline runs for real (scan -> bucket -> plan -> write) on a generated dataset with a Kimi-K2.5
processor folder built offline; the loader (``PackEncoder.from_packed_dir``) then turns every pack into a
``PackBatch``. The oracle is the real processor ``AutoProcessor`` builds from the folder (its image
processor needs torchvision: ``.venv-ref``), run on each sub-sample alone with its decoded images and every
frame of its videos (PyAV, with the container's ``VideoMetadata``: the processor samples them itself):
``input_ids``, ``pixel_values`` (``[patches, 3, 14, 14]``), ``image_grid_thw``, ``pixel_values_videos`` and
``video_grid_thw`` (one row per chunk of 4 frames) must be exactly equal
(the same processor runs on both sides), every segment has its planned length, positions restart at 0
per segment (Kimi-K2.5's text model takes 1-D positions), and the labelled tokens decode to what the
model generates after the ``<think>`` of the generation prompt: ``</think>`` + the answer + ``<|im_end|>``.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import torch
from _family_kit import packed_dataset, read_packs, sub_sample_images

from vlmpack_offline.loader import PackEncoder

pytestmark = [pytest.mark.slow, pytest.mark.torchvision]


@pytest.fixture(scope="module", params=["transformers5"])  # the hub layout: counted in test_family_*; loaded here once
def packed(request, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp(f"kimi_loader_{request.param}")
    return packed_dataset(root, "kimi_k25", request.param, seed=9, max_token_len=4096)


def _processor_on(oracle, sub, media) -> tuple[list, dict]:
    """(its images, the real processor's output) for one sub-sample alone, its videos as every frame + metadata."""
    import av
    import numpy as np
    from transformers.video_utils import VideoMetadata

    videos, metadata = [], []
    for part in [i["video"] for m in sub.messages for i in m["content"] if isinstance(i, dict) and i.get("type") == "video"]:
        with av.open(io.BytesIO(media[part])) as container:
            fps = float(container.streams.video[0].average_rate)
            videos.append(np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]))
        metadata.append(VideoMetadata(total_num_frames=len(videos[-1]), fps=fps, duration=len(videos[-1]) / fps))
    images = sub_sample_images(sub, media)
    text = oracle.apply_chat_template(list(sub.messages), tokenize=False)
    kwargs = {"videos": videos, "video_metadata": metadata} if videos else {}
    return images, oracle(text=[text], images=images or None, return_tensors="pt", **kwargs)


def test_every_kimi_pack_equals_the_real_processor_on_each_sub_sample(packed):
    from transformers import AutoProcessor

    packed_dir, processor_dir = packed
    encoder = PackEncoder.from_packed_dir(packed_dir, processor_dir)
    oracle = AutoProcessor.from_pretrained(str(processor_dir))
    n_images = n_packs_with_images = n_videos = 0
    for pack, media in read_packs(packed_dir):
        batch = encoder.encode(pack, media)
        bounds = batch.cu_seqlens.tolist()
        pixels, grids, videos = [], [], {}
        for index, sub in enumerate(pack.samples):
            images, expected = _processor_on(oracle, sub, media)
            for name in ("pixel_values_videos", "video_grid_thw"):
                if name in expected:
                    videos.setdefault(name, []).append(expected[name])
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
        assert set(batch.vision) == ({"pixel_values", "image_grid_thw"} if pixels else set()) | set(videos)
        if pixels:
            n_packs_with_images += 1
            assert torch.equal(batch.vision["pixel_values"], torch.cat(pixels))
            assert torch.equal(batch.vision["image_grid_thw"], torch.cat(grids))
        for name, parts in videos.items():
            assert torch.equal(batch.vision[name], torch.cat(parts)), name
        n_videos += len(videos.get("video_grid_thw", []))
        assert batch.position_ids.shape == (1, batch.seq_len)  # 1-D positions, restarting per segment
        assert torch.equal(batch.position_ids, batch.text_position_ids())
    assert n_images >= 5 and n_packs_with_images >= 2 and n_videos >= 2
