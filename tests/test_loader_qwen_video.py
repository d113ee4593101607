"""The loader's Qwen-VL video tensors (``MediaProcessor.frames``: PIL-resized frames through the PIL image
processor, regrouped in time) against the real HF video processor (torchvision), for Qwen2.5-VL, Qwen3-VL
and Qwen3.5 folders with their video settings.

The HF processor gets the same sampled frames at their decoded size, their ``VideoMetadata`` and, for the
Qwen3-VL family, ``do_sample_frames=False``: it resizes them with torchvision. Measured (transformers 5.23,
torchvision 0.29.1): ``video_grid_thw`` and shapes are equal; values differ by the resize alone, at most
two uint8 levels of a pixel (max |diff| 0.030 with Qwen2.5-VL's CLIP std, 0.0078 = one level with Qwen3's
0.5 std; mean <= 5e-5); on frames resized the same way (the HF processor with ``do_resize=False`` on ours)
they agree to float rounding (max 2.4e-7).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vlmpack_offline.loader.media_processor import MediaProcessor
from vlmpack_offline.media import decode_frames
from vlmpack_offline.synthetic import folder_qwen3_5
from vlmpack_offline.synthetic.processor_dir import build_processor_dir
from vlmpack_offline.synthetic.shards import video_bytes
from vlmpack_offline.tokens import make_counter

CLIPS = [(30, 10, 96, 64), (9, 3, 320, 240), (61, 30, 128, 72), (20, 10, 640, 360)]


@pytest.mark.torchvision
@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl", "qwen3_5"])
def test_media_processor_video_tensors_equal_the_hf_video_processor(tmp_path, make_config, family):
    from transformers import AutoVideoProcessor
    from transformers.video_utils import VideoMetadata

    directory = (folder_qwen3_5.build(tmp_path, video=True) if family == "qwen3_5"
                 else build_processor_dir(tmp_path, family, video=True))  # fmt: skip
    counter = make_counter(make_config(wds_dir="unused", processor_dir=directory))
    ours_processor = MediaProcessor.from_processor_dir(directory)
    reference = AutoVideoProcessor.from_pretrained(directory)
    levels = 2 / 255 / float(np.min(reference.image_std))  # two uint8 levels after normalization
    kwargs = {} if family == "qwen2_5_vl" else {"do_sample_frames": False}  # Qwen2-VL's samples none by default
    for clip in CLIPS:
        data = video_bytes(*clip)
        sampling = counter.probe("video", data).sampling
        ours = ours_processor.frames(decode_frames(data, sampling))
        metadata = VideoMetadata(total_num_frames=sampling.total_frames, fps=sampling.native_fps,
                                 frames_indices=list(sampling.frame_indices))  # fmt: skip
        hf = reference(videos=[decode_frames(data, sampling, resize=False)], video_metadata=[metadata],
                       return_tensors="pt", **kwargs)  # fmt: skip
        assert torch.equal(ours["video_grid_thw"], hf["video_grid_thw"]), clip
        diff = (ours["pixel_values_videos"] - hf["pixel_values_videos"]).abs()
        assert diff.max() <= levels + 1e-6 and diff.mean() < 1e-4, (clip, diff.max(), diff.mean())
        same_resize = reference(videos=[decode_frames(data, sampling)], video_metadata=[metadata], do_resize=False,
                                return_tensors="pt", **kwargs)  # fmt: skip
        assert torch.allclose(ours["pixel_values_videos"], same_resize["pixel_values_videos"], atol=1e-6, rtol=0)
