"""Media facts read without pixel decoding: image header sizes, video container metadata, frame sampling.

Scan (token counting) and the loader (pixel decoding) call the same functions,
so the frames and sizes counted offline are the ones decoded at training time.
"""

from .image_info import ImageSize, image_size, open_image
from .video import VideoInfo, VideoSampling, decode_frames, probe_video, sample_video

__all__ = [
    "ImageSize",
    "image_size",
    "open_image",
    "VideoInfo",
    "VideoSampling",
    "probe_video",
    "sample_video",
    "decode_frames",
]
