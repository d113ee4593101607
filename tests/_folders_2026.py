"""Shared by the 2026-family tests (not a test module): processor folders built on first use, and a clip's
every frame as the real processors' oracle takes it."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import numpy as np

from vlmpack_offline.synthetic.processor_dir import build_processor_dir

__all__ = ["LazyFolders", "every_frame"]


class LazyFolders(dict):
    """(model type, layout) -> its ``synthetic`` processor folder, built on first use (a test selected by ``-k``
    builds only its own); ``video(model_type)``: whether the folder gets its video settings."""

    def __init__(self, root: Path, video: Callable[[str], bool]):
        super().__init__()
        self.root, self.video = root, video

    def __missing__(self, key: tuple[str, str]) -> Path:
        model_type, layout = key
        self[key] = build_processor_dir(self.root / f"{model_type}-{layout}", model_type, layout=layout,
                                        video=self.video(model_type))  # fmt: skip
        return self[key]


def every_frame(data: bytes):
    """Every frame of a clip (PyAV, the transformers reader's library) and its ``VideoMetadata``, as a user's
    pipeline hands a whole video to the processor, which samples it itself."""
    import av
    from transformers.video_utils import VideoMetadata

    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        frames = np.stack([frame.to_ndarray(format="rgb24") for frame in container.decode(stream)])
        fps = float(stream.average_rate)
    total, height, width = frames.shape[:3]
    return frames, VideoMetadata(total_num_frames=total, fps=fps, duration=total / fps, width=width, height=height)
