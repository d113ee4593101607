"""Media facts read without pixel decoding: image header sizes, video container metadata, frame sampling,
audio lengths (``audio``: exact decoded sample counts, and the loader's decode to mono at a target rate),
and whether a file is whole (``integrity``, ``video_integrity``: its structure walked to its end, the scan's check).

Scan (token counting) and the loader (pixel decoding) call the same functions,
so the frames and sizes counted offline are the ones decoded at training time.
"""

from .audio import AudioInfo, decode_audio, probe_audio, resampled_length
from .image_info import ImageSize, image_size, open_image
from .integrity import check_image
from .video import VideoInfo, VideoSampling, decode_frames, probe_video, sample_video
from .video_integrity import PacketSpan, check_container, check_packets

__all__ = [
    "ImageSize",
    "image_size",
    "open_image",
    "check_image",
    "PacketSpan",
    "check_container",
    "check_packets",
    "VideoInfo",
    "VideoSampling",
    "probe_video",
    "sample_video",
    "decode_frames",
    "AudioInfo",
    "probe_audio",
    "decode_audio",
    "resampled_length",
]
