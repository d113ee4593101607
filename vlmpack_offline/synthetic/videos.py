"""Videos in the shapes real corpora hold, where the readers' frame counts and rates can disagree.

``encode`` writes one clip with PyAV: any container (mp4, mkv, webm, avi, mov), H.264 with or without
B-frames, VP8 / VP9, MPEG-4 part 2; constant or variable frame rate (frames spaced unevenly in time);
a start offset (the first frame's pts past 0). ``CORPUS`` is a small set of such clips, one per case that
has made two readers disagree; the reference tests and ``benchmarks/bench_video_fidelity.py`` read them.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = ["VideoSpec", "CORPUS", "encode"]


@dataclass(frozen=True, slots=True, kw_only=True)
class VideoSpec:
    name: str
    container: str = "mp4"  # PyAV format name: mp4, matroska, webm, avi, mov
    codec: str = "libx264"  # libx264, libvpx, libvpx-vp9, mpeg4
    seconds: float = 2.0  # playing time at the nominal rate
    fps: int = 10  # nominal frame rate
    width: int = 64
    height: int = 48
    vfr: bool = False  # frames alternately 1x and 2x the nominal spacing (average ~2/3 of the nominal rate)
    start: float = 0.0  # the first frame's time in seconds
    bframes: bool = False  # H.264 with B-frames (pts and dts differ)
    seed: int = 0

    @property
    def suffix(self) -> str:
        return {"matroska": "mkv"}.get(self.container, self.container)


CORPUS: tuple[VideoSpec, ...] = (
    VideoSpec(name="mp4_cfr"),
    VideoSpec(name="mp4_bframes", bframes=True, seconds=3.0, fps=25),
    VideoSpec(name="mp4_start_offset", start=1.5),
    VideoSpec(name="mp4_short", seconds=0.2, fps=30),
    VideoSpec(name="mp4_2997", fps=30, seconds=4.0, width=96, height=54),  # 30000/1001 below
    VideoSpec(name="mkv_vfr", container="matroska", vfr=True, fps=30, seconds=3.0),
    VideoSpec(name="mkv_cfr", container="matroska", fps=24),
    VideoSpec(name="webm_vp9_vfr", container="webm", codec="libvpx-vp9", vfr=True, fps=30, seconds=2.0),
    VideoSpec(name="webm_vp8", container="webm", codec="libvpx", fps=15),
    VideoSpec(name="avi_mpeg4", container="avi", codec="mpeg4", fps=12),
    VideoSpec(name="mov_offset_bframes", container="mov", bframes=True, start=0.5, fps=20),
    VideoSpec(name="mp4_vfr", vfr=True, fps=30, seconds=3.0),
    VideoSpec(name="mp4_tall", width=48, height=160, seconds=1.0),
)


def _rate(spec: VideoSpec) -> Fraction:
    return Fraction(30000, 1001) if spec.name.endswith("2997") else Fraction(spec.fps)


def encode(spec: VideoSpec) -> bytes:
    """The clip ``spec`` describes, as container bytes (seeded: the same bytes on every call)."""
    import av

    rate = _rate(spec)
    n_frames = max(2, round(spec.seconds * rate))
    ticks = 1000 * rate.denominator  # time base 1 / (ticks * nominal numerator): every pts an integer
    time_base = Fraction(1, rate.numerator * ticks // rate.denominator) if spec.vfr else 1 / rate
    step = 1 if not spec.vfr else ticks // rate.denominator  # one nominal frame in time-base units
    out = io.BytesIO()
    options = {"threads": "1"}
    if spec.codec == "libx264":
        options.update(preset="ultrafast" if not spec.bframes else "veryfast", bf="0" if not spec.bframes else "2")
    with av.open(out, mode="w", format=spec.container, options={"fflags": "+bitexact"}) as container:
        stream = container.add_stream(spec.codec, rate=rate, options=options)
        stream.width, stream.height, stream.pix_fmt = spec.width, spec.height, "yuv420p"
        stream.time_base = time_base
        stream.codec_context.time_base = time_base
        rng = np.random.default_rng(spec.seed)
        base = rng.integers(0, 256, 3)
        ys, xs = np.mgrid[0 : spec.height, 0 : spec.width]
        pts = round(spec.start / time_base)
        for index in range(n_frames):
            shift = index * 4
            planes = [(xs + shift + base[0]) % 256, (ys + shift + base[1]) % 256, (xs + ys + base[2]) % 256]
            pixels = np.stack(planes, -1).astype(np.uint8)
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = pts, time_base
            pts += step * (2 if spec.vfr and index % 2 else 1)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return out.getvalue()
