"""A valid video that decord cannot decode is read with PyAV, in the scan and in the loader alike.

decord 0.6 opens some valid H.264 streams and then fails to decode them (a 48x48 clip:
"Check failed: from_size == to_size"). Such a video is neither dropped as corrupt nor
left to fail in a training worker: probe and decode each fall back to PyAV. Whether the
installed decord has that fault is decord's business: the fallback is tested with a reader
that behaves so, and real clips are checked against PyAV decoding every frame itself,
whichever reader vlmpack ends up using.
"""

from __future__ import annotations

import io

import av
import numpy as np
import pytest

from vlmpack_offline.config import VideoConfig
from vlmpack_offline.media import decode_frames, probe_video, sample_video, video_meta
from vlmpack_offline.media import video as video_module
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.shards import video_bytes

CLIP = video_bytes(8, 8, 48, 48, seed=1)  # 8 frames at 8 fps, 48x48


def _all_frames_by_pyav(data: bytes) -> np.ndarray:
    with av.open(io.BytesIO(data)) as container:
        return np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)])


class _ReaderThatOpensButCannotDecode:
    """What decord 0.6 does with some valid H.264 streams: it opens them, then fails to decode a frame."""

    def __init__(self, data: bytes):
        self.n = len(_all_frames_by_pyav(data))

    def __len__(self) -> int:
        return self.n

    def get_avg_fps(self) -> float:
        return 8.0

    def _fail(self, *_):
        raise RuntimeError("[12:00:00] src/video/video_reader.cc:600: Check failed: from_size == to_size\nStack trace:")

    __getitem__ = get_batch = _fail


def test_a_video_decord_opens_but_cannot_decode_is_read_with_pyav(monkeypatch):
    monkeypatch.setattr(video_module, "decord_reader", _ReaderThatOpensButCannotDecode)  # the loader's decode
    monkeypatch.setattr(video_meta, "decord_reader", _ReaderThatOpensButCannotDecode)
    info = probe_video(CLIP, reader="decord")  # decord's count and rate: it opens the clip; the size is the header's
    truth = _all_frames_by_pyav(CLIP)
    assert info.backend == "decord" and (info.n_frames, info.height, info.width) == (len(truth), 48, 48)
    sampling = sample_video(info, VideoConfig(fps=2.0, min_frames=2, max_frames=8), factor=28)
    frames = decode_frames(CLIP, sampling, resize=False)
    assert np.array_equal(frames, truth[list(sampling.frame_indices)])


@pytest.mark.parametrize("size", [(48, 48), (64, 48)])
def test_probe_and_decode_equal_pyav_whichever_reader_decodes(size):
    """Whether the installed decord decodes this clip itself or vlmpack falls back to PyAV, the frames are
    PyAV's own (bit-equal: both decode with FFmpeg)."""
    clip = video_bytes(8, 8, *size, seed=1)
    info = probe_video(clip)
    truth = _all_frames_by_pyav(clip)
    assert (info.n_frames, info.width, info.height) == (len(truth), *size)
    sampling = sample_video(info, VideoConfig(fps=2.0, min_frames=2, max_frames=8), factor=28)
    frames = decode_frames(clip, sampling, resize=False)
    assert np.array_equal(frames, truth[list(sampling.frame_indices)])


@pytest.mark.parametrize("reader", ["torchcodec", "decord", "pyav"])
def test_a_video_the_reader_cannot_read_is_corrupt_media_in_one_line_naming_it(reader):
    with pytest.raises(DropError) as caught:
        probe_video(CLIP[: len(CLIP) // 3], reader=reader)
    assert caught.value.reason is Reason.CORRUPT_MEDIA
    assert "\n" not in str(caught.value) and f"({reader}: " in str(caught.value)
