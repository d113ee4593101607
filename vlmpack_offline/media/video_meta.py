"""A video's frame count, frame rate and frame size as the training pipeline's reader reports them.

Frame sampling turns (frame count, fps) into frames, so the count is exact only when both numbers are the
ones the training pipeline sees. The readers disagree on variable-frame-rate and headerless containers
(a matroska clip whose frames come 33 and 66 ms apart: decord says 30 fps, torchcodec 20.5), so
``video.reader`` names whose numbers to use:

``torchcodec`` (transformers' ``fetch_videos`` default, qwen-vl-utils' first choice; both open
``VideoDecoder`` in its default ``seek_mode="exact"``). torchcodec scans the container's packets without
decoding (``SingleStreamDecoder::scan_file_and_update_metadata_and_index``, torchcodec
``src/torchcodec/_core/SingleStreamDecoder.cpp``; ``get_average_fps`` in ``Metadata.cpp``)::

    packets   the best video stream's, without AV_PKT_FLAG_DISCARD; t = pts, else dts
    n         = number of packets                                      (metadata.num_frames)
    fps       = n / (max(t + duration) - min(t)) in seconds            (metadata.average_fps)
                (seconds = t * time_base.num / time_base.den; the header's avg_frame_rate if that span is 0)

  read here with PyAV's demuxer over the same packets (PyAV bundles its own FFmpeg; torchcodec needs the
  machine's shared libraries, which a machine may lack).

``decord`` (qwen-vl-utils' second choice): ``len(VideoReader)`` and ``get_avg_fps()``, from decord itself.

``pyav`` (transformers' ``read_video_pyav``, ``video_utils.py``): the stream header's ``frames`` and
``average_rate``, read by PyAV. Matroska and WebM headers carry no frame count: transformers then sees 0
frames and cannot sample, so such a video is recorded as unreadable by that reader.

The size is the stream header's coded width and height, turned by the file's display rotation for the readers
that turn frames upright (torchcodec, decord: a phone video's 640x360 coded frames are 360 wide, 640 high);
finding that rotation decodes the first frame (PyAV exposes no stream side data). Scan cost per video is
the container's header, its packet index and that one frame.

Every reader's probe also demuxes the video stream's packets once with PyAV (the torchcodec numbers come from
that pass; the others' size and rotation come from the same open) and keeps where they end against the duration
the header claims (``VideoInfo.span``): the scan's ``video_integrity.check_packets`` tells a cut file from it.
"""

from __future__ import annotations

import dataclasses
import io
import math
from dataclasses import dataclass
from typing import Literal

from ..errors import ConfigError
from ..reasons import DropError, Reason
from .video_integrity import PacketSpan, check_packets

__all__ = ["READERS", "Reader", "VideoInfo", "probe_video", "check_reader_installed", "checked", "decord_reader"]

Reader = Literal["torchcodec", "decord", "pyav"]
READERS: tuple[Reader, ...] = ("torchcodec", "decord", "pyav")
DEFAULT_READER: Reader = "torchcodec"


@dataclass(frozen=True, slots=True, kw_only=True)
class VideoInfo:
    n_frames: int  # frames in the container, as the reader counts them
    native_fps: float  # the reader's average frame rate
    height: int  # height of the frames the reader returns (upright for torchcodec / decord: see rotation)
    width: int  # ... and their width
    backend: str  # the reader whose count and rate these are: torchcodec, decord or pyav
    rotation: int = 0  # the file's display rotation (0, 90, 180, 270 counter-clockwise): torchcodec and decord
    # turn the frames upright (height and width above swapped for 90 / 270), pyav hands them as coded
    span: PacketSpan | None = None  # the packets PyAV demuxed against the header (video_integrity.check_packets)

    @property
    def upright(self) -> bool:
        """Whether this reader returns frames turned by the display rotation."""
        return self.backend != "pyav"


def check_reader_installed(reader: str) -> None:
    """One config error naming what to install when the library that gives ``reader``'s numbers is missing."""
    module = "decord" if reader == "decord" else "av"  # torchcodec's numbers come from PyAV's demuxer
    try:
        __import__(module)
    except ImportError:
        where = " (decord has wheels for x86_64 only: video.reader torchcodec or pyav read through PyAV)"
        raise ConfigError(
            f"video.reader = {reader!r} reads with {module}, which is not installed: pip install {module}"
            + (where if module == "decord" else "")
        ) from None


def probe_video(data: bytes, *, reader: str = DEFAULT_READER, part: str = "video") -> VideoInfo:
    """``reader``'s frame count, frame rate and the frame size of ``data`` (module doc); raises ``DropError``
    (corrupt_media) with one line naming the reader when it cannot give them."""
    try:
        if reader == "decord":
            info = _decord_info(data)
        else:
            info = _pyav_info(data, reader)
    except DropError:
        raise
    except Exception as exc:  # the libraries raise their own error types
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: not a readable video ({reader}: {_first_line(exc)})") from None
    if info.span is not None and info.span.packets == 0:  # no frame because the data stops before the first one
        check_packets(info.span, part=part)
    return checked(info, part)


def checked(info: VideoInfo, part: str) -> VideoInfo:
    """``info`` when sampling can use it, else ``DropError`` saying which number the reader could not give."""
    if info.n_frames < 1:  # one frame is the sampler's to take or refuse (GLM-4V pads it, qwen-vl-utils refuses)
        raise DropError(
            Reason.CORRUPT_MEDIA, f"{part}: {info.backend} reports 0 frames"
            + (" (PyAV reads the count from the header, which matroska / webm do not carry: video.reader "
               "torchcodec or decord count packets)" if info.backend == "pyav" else "")
        )  # fmt: skip
    if not info.native_fps > 0 or not math.isfinite(info.native_fps):
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: {info.backend} reports no usable frame rate ({info.native_fps})")
    if info.height <= 0 or info.width <= 0:
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: video frames have an empty size {info.width}x{info.height}")
    return info


def _first_line(exc: Exception) -> str:
    """decord's C++ errors carry a stack trace after the first line."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def decord_reader(data: bytes):
    # PyAV first: decord loads its own, older FFmpeg with RTLD_GLOBAL, and a PyAV loaded after it binds to
    # those libraries' symbols (its VP8 encoder then fails to open); loaded before, PyAV keeps its own
    import av  # noqa: F401
    import decord  # imported late: importing it is slow and scan workers may not see videos at all

    decord.logging.set_level(decord.logging.QUIET)  # its FFmpeg's complaints; a failure is raised and recorded
    return decord.VideoReader(io.BytesIO(data), num_threads=1)


def _decord_info(data: bytes) -> VideoInfo:
    import av

    reader = decord_reader(data)
    with av.open(io.BytesIO(data)) as container:  # the size and rotation decord does not say without decoding
        stream = container.streams.best("video")
        if stream is None:
            raise ValueError("no video stream")
        packets = _demux(container, stream)
        info = VideoInfo(n_frames=len(reader), native_fps=float(reader.get_avg_fps()), height=stream.codec_context.height,
                         width=stream.codec_context.width, backend="decord", span=packets.span)  # fmt: skip
        return _turned(info, packets.rotation)


def _first_rotation(decode) -> int | None:
    """The display rotation (0, 90, 180, 270 counter-clockwise) FFmpeg attaches to the first frame ``decode()``
    yields, the probe's only decode (PyAV exposes no stream side data); None when it yields none, 0 when it fails
    (a frame that does not decode says nothing about rotation: decoding is decode_check's job)."""
    try:
        for frame in decode():
            return int(round(getattr(frame, "rotation", 0) or 0)) % 360  # PyAV says -90 for 270
    except Exception:
        return 0
    return None


def _turned(info: VideoInfo, rotation: int | None) -> VideoInfo:
    """``info`` with the file's display rotation; an upright reader's frames swap height and width at 90 / 270."""
    if not rotation:
        return info
    swap = info.upright and rotation in (90, 270)
    return dataclasses.replace(info, rotation=rotation, height=info.width if swap else info.height,
                               width=info.height if swap else info.width)  # fmt: skip


def _pyav_info(data: bytes, reader: str) -> VideoInfo:
    import av

    with av.open(io.BytesIO(data)) as container:
        if reader == "pyav":  # read_video_pyav: the first video stream's header
            stream = container.streams.video[0]
            packets = _demux(container, stream)
            fps = float(stream.average_rate) if stream.average_rate else 0.0
            info = VideoInfo(n_frames=int(stream.frames), native_fps=fps, height=stream.codec_context.height,
                             width=stream.codec_context.width, backend="pyav", span=packets.span)  # fmt: skip
            return _turned(info, packets.rotation)
        stream = container.streams.best("video")  # av_find_best_stream, as torchcodec picks
        if stream is None:
            raise ValueError("no video stream")
        packets = _demux(container, stream)
        fps = float(stream.average_rate) if stream.average_rate else 0.0  # the header's, if the span is 0
        if packets.count:
            base = stream.time_base
            span = float(packets.end) * base.numerator / base.denominator - float(packets.begin) * base.numerator / base.denominator
            if span != 0.0:
                fps = packets.count / span
        info = VideoInfo(n_frames=packets.count, native_fps=fps, height=stream.codec_context.height,
                         width=stream.codec_context.width, backend="torchcodec", span=packets.span)  # fmt: skip
    return _turned(info, packets.rotation)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Packets:
    count: int  # packets av_read_frame returned, without AV_PKT_FLAG_DISCARD (torchcodec's frame count)
    begin: int | None  # min(pts, else dts), in the stream's time base
    end: int | None  # max(pts + duration)
    rotation: int | None  # the first decoded frame's display rotation (_first_rotation)
    span: PacketSpan  # the same packets in seconds, against the header's duration


def _demux(container, stream) -> _Packets:
    """One pass over ``stream``'s packets without decoding (torchcodec's scan, module doc), the first frame
    decoded for its rotation."""
    count, total, begin, end, rotation, last_cut = 0, 0, None, None, None, False
    for packet in container.demux(stream):
        if rotation is None:  # the first decoded frame's; the end-of-stream packet drains a decoder's delay
            rotation = _first_rotation(packet.decode)
        if packet.pts is None and packet.dts is None and packet.size == 0:
            continue  # PyAV's end-of-stream flush packet, not one av_read_frame returned
        last_cut = bool(packet.is_corrupt)  # a short read: the packet's bytes run past the end of the data
        total += 1
        if packet.is_discard:
            continue
        t = packet.pts if packet.pts is not None else packet.dts
        if t is None:
            raise ValueError("a packet without pts or dts")
        count += 1
        begin = t if begin is None else min(begin, t)
        end = t + (packet.duration or 0) if end is None else max(end, t + (packet.duration or 0))
    return _Packets(count=count, begin=begin, end=end, rotation=rotation,
                    span=_span(container, stream, total, begin, end, last_cut))  # fmt: skip


def _span(container, stream, count: int, begin: int | None, end: int | None, last_cut: bool) -> PacketSpan:
    """The packets in seconds, and the end the header claims: the stream's own start + duration (MP4 / MOV
    ``mdhd``, AVI), else Matroska's per-track ``DURATION`` tag, else the container's duration when the video
    is its only stream (another stream's length is no claim about the video's); None without any of them.
    Matroska's two are the last timestamp's end, counted from 0 (FFmpeg's muxer; a file whose first frame is
    at 0.25 s says 5.25 for frames ending at 5.25), so they are taken as the end itself: were one a length, that
    reading is the earlier end, so an intact file is never short of it.
    The frames the header counts: ``stream.frames`` (MP4 ``stsz``, AVI ``dwLength``; 0 in Matroska: None)."""
    seconds = float(stream.time_base) if stream.time_base else 0.0
    start = stream.start_time if stream.start_time is not None else begin
    if stream.duration:
        claimed = float(start or 0) * seconds + float(stream.duration) * seconds
    elif (tag := _tag_seconds(stream.metadata.get("DURATION"))) is not None:
        claimed = tag
    elif container.duration and len(container.streams) == 1:
        claimed = container.duration / 1e6  # AV_TIME_BASE: microseconds
    else:
        claimed = None
    packets_s = float(end - begin) * seconds if count and end is not None else 0.0
    return PacketSpan(packets=count, end=float(end) * seconds if end is not None else 0.0,
                      interval=packets_s / count if count > 1 else 0.0, claimed_end=claimed,
                      claimed_packets=int(stream.frames) or None, last_cut=last_cut)  # fmt: skip


def _tag_seconds(value: str | None) -> float | None:
    """Matroska's ``DURATION`` tag, ``HH:MM:SS.nnnnnnnnn``, in seconds (None when absent or unreadable)."""
    try:
        hours, minutes, secs = (value or "").split(":")
        return int(hours) * 3600 + int(minutes) * 60 + float(secs)
    except ValueError:
        return None
