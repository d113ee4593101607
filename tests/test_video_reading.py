"""A valid video that decord cannot decode is read with PyAV, in the scan and in the loader alike.

decord 0.6 opens some valid H.264 streams and then fails to decode them (a 48x48 clip:
"Check failed: from_size == to_size"). Such a video is neither dropped as corrupt nor
left to fail in a training worker: probe and decode each fall back to PyAV. The oracle
is PyAV decoding every frame itself.
"""

from __future__ import annotations

import io

import av
import numpy as np
import pytest

from vlmpack_offline.config import VideoConfig
from vlmpack_offline.media import decode_frames, probe_video, sample_video
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.shards import video_bytes

CLIP = video_bytes(8, 8, 48, 48, seed=1)  # 8 frames at 8 fps, 48x48


def _all_frames_by_pyav(data: bytes) -> np.ndarray:
    with av.open(io.BytesIO(data)) as container:
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])


def test_decord_itself_cannot_decode_the_clip():
    decord = pytest.importorskip("decord")
    reader = decord.VideoReader(io.BytesIO(CLIP), num_threads=1)
    with pytest.raises(Exception, match="from_size == to_size"):  # noqa: PT011 - decord's own error class
        reader.get_batch([0, 3]).asnumpy()


def test_probe_and_decode_read_it_with_pyav():
    info = probe_video(CLIP)
    truth = _all_frames_by_pyav(CLIP)
    assert (info.n_frames, info.height, info.width) == (len(truth), 48, 48)
    sampling = sample_video(info, VideoConfig(fps=2.0, min_frames=2, max_frames=8), factor=28)
    frames = decode_frames(CLIP, sampling, resize=False)
    assert np.array_equal(frames, truth[list(sampling.frame_indices)])


def test_a_video_neither_reader_opens_is_corrupt_media_with_one_line_per_reader():
    with pytest.raises(DropError) as caught:
        probe_video(CLIP[: len(CLIP) // 3])
    assert caught.value.reason is Reason.CORRUPT_MEDIA
    assert "\n" not in str(caught.value)
