"""Real encoder output and the same files cut, for the integrity tests; the oracles are the decoders themselves.

Images are written by PIL (JPEG baseline / progressive / with restart markers / with an EXIF thumbnail, MPO,
PNG, palette PNG, APNG, WebP lossy / lossless / animated, GIF, animated GIF, BMP RGB and palette); videos by PyAV through
``synthetic.videos`` (MP4 with ``moov`` at the end as PyAV writes it, and re-muxed with ``moov`` at the front,
Matroska, WebM, AVI, MOV). Oracles: PIL's full decode of every frame with ``LOAD_TRUNCATED_IMAGES`` False,
PyAV's decode of every frame.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import av
import numpy as np
from PIL import Image, ImageFile, ImageSequence

from vlmpack_offline.synthetic.videos import VideoSpec, encode


def _picture(width: int = 96, height: int = 64, seed: int = 0) -> Image.Image:
    """A smooth picture with some noise, so the entropy-coded data holds stuffed FF bytes."""
    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(rng.integers(0, 256, (4, 4, 3), dtype=np.uint8), "RGB")
    noise = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), "RGB")
    return Image.blend(coarse.resize((width, height), Image.Resampling.BILINEAR), noise, 0.3)


def _saved(image: Image.Image, fmt: str, **options) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def exif_with_thumbnail(thumbnail: bytes) -> bytes:
    """EXIF (TIFF, little-endian): an empty IFD0 linking to IFD1, whose JPEGInterchangeFormat (0x0201) and
    Length (0x0202) point at ``thumbnail``, a whole JPEG with its own FFD9, stored right after."""
    ifd1 = 8 + 6  # TIFF header (8) + IFD0 (2-byte count 0 + 4-byte link)
    data = ifd1 + 2 + 2 * 12 + 4
    tiff = b"II*\0" + struct.pack("<I", 8) + struct.pack("<HI", 0, ifd1)
    tiff += struct.pack("<H", 2) + struct.pack("<HHII", 0x0201, 4, 1, data) + struct.pack("<HHII", 0x0202, 4, 1, len(thumbnail))
    return b"Exif\0\0" + tiff + struct.pack("<I", 0) + thumbnail


def images() -> dict[str, bytes]:
    """Every image kind the integrity walk reads, as PIL writes it."""
    frames = [_picture(seed=seed) for seed in range(3)]
    picture = frames[0]
    return {
        "baseline.jpg": _saved(picture, "JPEG", quality=90),
        "progressive.jpg": _saved(picture, "JPEG", quality=90, progressive=True),
        "restarts.jpg": _saved(picture, "JPEG", quality=90, restart_marker_blocks=4),
        "exif_thumbnail.jpg": _saved(picture, "JPEG", exif=exif_with_thumbnail(_saved(_picture(32, 24, 9), "JPEG"))),
        "three.mpo": _saved(picture, "MPO", save_all=True, append_images=frames[1:]),
        "rgb.png": _saved(picture, "PNG"),
        "palette.png": _saved(picture.quantize(16), "PNG"),
        "animated.apng": _saved(picture, "PNG", save_all=True, append_images=frames[1:], duration=100),
        "lossy.webp": _saved(picture, "WEBP", quality=80),
        "lossless.webp": _saved(picture, "WEBP", lossless=True),
        "animated.webp": _saved(picture, "WEBP", save_all=True, append_images=frames[1:], duration=100),
        "still.gif": _saved(picture.quantize(32), "GIF"),
        "animated.gif": _saved(picture.quantize(32), "GIF", save_all=True,
                               append_images=[f.quantize(32) for f in frames[1:]], duration=100),  # fmt: skip
        "rgb.bmp": _saved(picture, "BMP"),
        "palette.bmp": _saved(picture.quantize(16), "BMP"),  # PIL writes no RLE BMP
    }


def cut_offsets(size: int, *, spread: int = 120) -> list[int]:
    """Every cut in the first and last 64 bytes, and ``spread`` cuts evenly between."""
    edges = set(range(1, min(size, 64))) | set(range(max(1, size - 64), size))
    return sorted(edges | set(range(64, size, max(1, size // spread))))


def damaged(whole: bytes, cut: float, flips: list[tuple[float, int]]) -> bytes:
    """``whole`` cut to the share ``cut`` of its bytes (one byte at least), then each ``(where, mask)`` XORed into
    the byte at share ``where`` of what is left: a fuzzer's damage, in the terms hypothesis draws."""
    data = bytearray(whole[: max(1, int(len(whole) * cut))])
    for where, mask in flips:
        data[min(int(where * len(data)), len(data) - 1)] ^= mask
    return bytes(data)


def pil_decodes(data: bytes) -> list[bytes] | None:
    """PIL's full decode, every frame, truncated images refused (its default): each frame's pixels, or None."""
    assert not ImageFile.LOAD_TRUNCATED_IMAGES
    try:
        with Image.open(io.BytesIO(data)) as image:
            return [frame.convert("RGBA").tobytes() for frame in ImageSequence.Iterator(image)]
    except Exception:  # noqa: BLE001 - PIL raises many types on a cut file; any of them means it did not decode
        return None


def faststart(mp4: bytes, folder: Path) -> bytes:
    """The same packets re-muxed by PyAV with ``movflags=faststart``: the ``moov`` index before the data."""
    path = folder / "faststart.mp4"
    with av.open(io.BytesIO(mp4)) as source, av.open(str(path), "w", format="mp4",
                                                      options={"movflags": "faststart"}) as target:  # fmt: skip
        stream = source.streams.video[0]
        out = target.add_stream_from_template(stream)
        for packet in source.demux(stream):
            if packet.dts is not None:
                packet.stream = out
                target.mux(packet)
    return path.read_bytes()


def videos(folder: Path) -> dict[str, bytes]:
    """Every container the integrity walk reads, B-frames, variable rate and a start offset among them."""
    mp4 = encode(VideoSpec(container="mp4", bframes=True, fps=30, seconds=2, width=160, height=120))
    return {
        "moov_last.mp4": mp4,
        "moov_first.mp4": faststart(mp4, folder),
        "vfr_moov_first.mp4": faststart(encode(VideoSpec(container="mp4", bframes=True, vfr=True, fps=24, seconds=2,
                                                         width=96, height=64)), folder),  # fmt: skip
        "offset.mov": encode(VideoSpec(container="mov", bframes=True, offset=0.5, fps=25, seconds=1, width=64,
                                       height=48)),  # fmt: skip
        "bframes.mkv": encode(VideoSpec(container="mkv", codec="h264", bframes=True, fps=20, seconds=2, width=96,
                                        height=64)),  # fmt: skip
        "vp9.webm": encode(VideoSpec(container="webm", codec="vp9", fps=24, seconds=2, width=128, height=72)),
        "mpeg4.avi": encode(VideoSpec(container="avi", codec="mpeg4", bframes=True, fps=25, seconds=2, width=176,
                                      height=144)),  # fmt: skip
    }


def pyav_frames(data: bytes) -> int | None:
    """PyAV's decode of every frame of the first video stream: how many, or None when it fails."""
    try:
        with av.open(io.BytesIO(data)) as container:
            return sum(1 for _ in container.decode(video=0))
    except Exception:  # noqa: BLE001 - FFmpeg's errors on a cut file
        return None


def end_of_packets(data: bytes) -> int:
    """The byte after the last video packet's data in the file (PyAV's ``packet.pos``)."""
    with av.open(io.BytesIO(data)) as container:
        return max(p.pos + p.size for p in container.demux(video=0) if p.size and p.pos is not None and p.pos >= 0)
