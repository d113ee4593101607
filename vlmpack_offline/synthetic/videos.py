"""Real video files in the shapes corpora hold, where readers can disagree on the frame count and rate.

Each ``VideoSpec`` names one clip (``name`` says what it stresses), encoded by ``encode`` with PyAV: mp4 / mkv /
webm / avi / mov; H.264 with or without B-frames, VP9, VP8, MPEG-4 part 2; constant or variable frame rate;
a start offset; any length and size. Frames are a seeded moving gradient, cheap to encode. ``corpus`` is the
set ``benchmarks/bench_video_fidelity.py`` runs (long videos small, big frames short: about a minute to
encode); the reference tests read some of them::

    mp4-h264-bf-cfr-30fps-2s-320x240      H.264 with B-frames, constant rate
    mkv-h264-vfr-...                      uneven frame gaps, time base 1/1000: the frames come on average at
                                          ~0.6 of the nominal rate the stream header states (decord reports the
                                          nominal rate, torchcodec the real one)
    mov-h264-off1.5-...                   first pts 1.5 s (a start offset: the container's first frame is late)
    webm-vp9-... / webm-vp8-...           VP9 / VP8 in WebM (no frame count in the header)
    avi-mpeg4-bf-...                      MPEG-4 part 2 with B-frames in AVI
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

__all__ = ["VideoSpec", "corpus", "encode", "write"]

# container -> (PyAV format name, file extension)
_FORMATS = {"mp4": ("mp4", "mp4"), "mkv": ("matroska", "mkv"), "webm": ("webm", "webm"), "avi": ("avi", "avi"),
            "mov": ("mov", "mov")}  # fmt: skip
# codec -> PyAV encoder name
_ENCODERS = {"h264": "libx264", "vp9": "libvpx-vp9", "vp8": "libvpx", "mpeg4": "mpeg4"}
# variable frame rate: each gap is one of these multiples of the nominal frame spacing (mean 1.7)
_VFR_GAPS = (1.0, 2.0, 1.0, 3.0, 1.5)


@dataclass(frozen=True, slots=True, kw_only=True)
class VideoSpec:
    container: str = "mp4"  # mp4 | mkv | webm | avi | mov
    codec: str = "h264"  # h264 | vp9 | vp8 | mpeg4
    fps: float = 10  # nominal frame rate (the header's; a vfr video's frames come ~1.7x further apart on average)
    seconds: float = 2  # frames / fps
    width: int = 64
    height: int = 48
    bframes: bool = False  # B-frames (h264, mpeg4): decode order differs from presentation order
    vfr: bool = False  # frame pts with uneven gaps (_VFR_GAPS), time base 1/1000
    offset: float = 0.0  # pts of the first frame, seconds
    rotation: int = 0  # display rotation, degrees counter-clockwise (a phone video: 90 or 270)

    @property
    def n_frames(self) -> int:
        return max(1, round(self.fps * self.seconds))

    @property
    def suffix(self) -> str:
        return _FORMATS[self.container][1]

    @property
    def name(self) -> str:
        mode = "vfr" if self.vfr else "cfr"
        parts = [self.container, self.codec] + (["bf"] if self.bframes else []) + [mode]
        parts += [f"off{self.offset:g}"] if self.offset else []
        parts += [f"rot{self.rotation}"] if self.rotation else []
        parts += [f"{self.fps:g}fps", f"{self.seconds:g}s", f"{self.width}x{self.height}"]
        return "-".join(parts) + "." + self.suffix


def corpus(*, quick: bool = False) -> list[VideoSpec]:
    """The videos of a run: every container, codec and frame-rate mode; ``quick`` a dozen small ones."""
    v = VideoSpec
    quick_set = [
        v(container="mp4", codec="h264", bframes=True, fps=30, seconds=2, width=320, height=240),
        v(container="mp4", codec="h264", bframes=True, vfr=True, fps=24, seconds=3, width=160, height=120),
        v(container="mp4", codec="h264", bframes=True, offset=1.5, fps=25, seconds=2, width=128, height=96),
        v(container="mkv", codec="h264", bframes=True, vfr=True, fps=20, seconds=2, width=96, height=64),
        v(container="mkv", codec="vp9", fps=10, seconds=1.5, width=64, height=48),
        v(container="webm", codec="vp9", fps=24, seconds=2, width=128, height=72),
        v(container="webm", codec="vp8", vfr=True, fps=15, seconds=2, width=96, height=96),
        v(container="avi", codec="mpeg4", bframes=True, fps=25, seconds=2, width=176, height=144),
        v(container="mov", codec="h264", bframes=True, offset=0.5, fps=30, seconds=1, width=640, height=360),
        v(container="mp4", codec="h264", fps=10, seconds=0.2, width=64, height=48),
        v(container="mov", codec="h264", vfr=True, fps=12, seconds=4, width=200, height=100),
        v(container="mp4", codec="h264", bframes=True, fps=30, seconds=0.5, width=1920, height=1080),
    ]
    if quick:
        return quick_set
    more = [
        # lengths: 0.2 s .. 310 s (long ones small)
        v(container="mp4", codec="h264", bframes=True, fps=25, seconds=0.2, width=128, height=96),
        v(container="webm", codec="vp9", fps=30, seconds=0.3, width=64, height=48),
        v(container="mp4", codec="h264", bframes=True, fps=5, seconds=60, width=96, height=72),
        v(container="mkv", codec="h264", bframes=True, vfr=True, fps=2, seconds=120, width=80, height=60),
        v(container="mp4", codec="h264", bframes=True, fps=1, seconds=310, width=64, height=48),
        v(container="webm", codec="vp8", fps=0.5, seconds=310, width=64, height=48),
        v(container="avi", codec="mpeg4", fps=1, seconds=200, width=64, height=48),
        v(container="mov", codec="h264", offset=3.0, fps=2, seconds=90, width=96, height=64),
        # sizes: 64x48 .. 1920x1080, odd and portrait shapes
        v(container="mp4", codec="h264", fps=24, seconds=1, width=1280, height=720),
        v(container="mkv", codec="h264", bframes=True, fps=30, seconds=0.4, width=1920, height=1080),
        v(container="webm", codec="vp9", fps=25, seconds=0.5, width=1280, height=720),
        v(container="mov", codec="h264", bframes=True, fps=30, seconds=1, width=360, height=640),
        v(container="avi", codec="mpeg4", bframes=True, fps=24, seconds=1, width=720, height=480),
        v(container="mp4", codec="h264", fps=30, seconds=2, width=450, height=60),
        # odd rates, vfr and offsets in every container that stores pts
        v(container="mp4", codec="h264", bframes=True, fps=29.97, seconds=5, width=160, height=90),
        v(container="mkv", codec="vp9", vfr=True, offset=0.7, fps=15, seconds=3, width=128, height=96),
        v(container="webm", codec="vp9", vfr=True, offset=1.0, fps=20, seconds=4, width=96, height=64),
        v(container="mov", codec="h264", bframes=True, vfr=True, fps=25, seconds=6, width=192, height=108),
        v(container="mp4", codec="h264", vfr=True, offset=2.0, fps=30, seconds=3, width=112, height=80),
        v(container="avi", codec="mpeg4", fps=12.5, seconds=4, width=96, height=80),
        v(container="mkv", codec="h264", offset=0.25, fps=7, seconds=5, width=144, height=112),
        v(container="webm", codec="vp8", fps=30, seconds=4, width=160, height=120),
    ]
    return quick_set + more


def _pts_ms(spec: VideoSpec, rng: np.random.Generator) -> np.ndarray:
    """Frame pts in milliseconds: even at ``1000 / fps`` ms, or (vfr) gaps of 1x .. 3x that."""
    step = 1000.0 / spec.fps
    if not spec.vfr:
        return np.round(np.arange(spec.n_frames) * step).astype(np.int64)
    gaps = step * rng.choice(_VFR_GAPS, size=spec.n_frames)
    gaps[0] = 0
    return np.round(np.cumsum(gaps)).astype(np.int64)  # gaps >= the nominal step: strictly increasing


def encode(spec: VideoSpec, *, seed: int = 0) -> bytes:
    """The clip ``spec`` describes, as container bytes (the same bytes for the same spec and seed)."""
    import av

    rng = np.random.default_rng(seed)
    base = rng.integers(0, 256, 3)
    ys, xs = np.mgrid[0 : spec.height, 0 : spec.width]
    options = {"threads": "1"}
    if spec.codec == "h264":
        options |= {"preset": "veryfast", "bf": "2" if spec.bframes else "0"}
    elif spec.codec == "mpeg4":
        options |= {"bf": "2" if spec.bframes else "0"}
    elif spec.codec in ("vp9", "vp8"):
        options |= {"deadline": "realtime", "cpu-used": "8"}
    out = io.BytesIO()
    with av.open(out, mode="w", format=_FORMATS[spec.container][0]) as container:
        stream = container.add_stream(_ENCODERS[spec.codec], rate=Fraction(spec.fps).limit_denominator(1001),
                                      options=options)  # fmt: skip
        stream.width, stream.height, stream.pix_fmt = spec.width, spec.height, "yuv420p"
        if spec.rotation:
            stream.set_display_rotation(spec.rotation)
        timed = spec.vfr or spec.offset
        if timed:  # pts in ms: uneven gaps, a late first frame
            stream.codec_context.time_base = Fraction(1, 1000)
            stream.time_base = Fraction(1, 1000)
            pts = _pts_ms(spec, rng) + round(spec.offset * 1000)
        for index in range(spec.n_frames):
            shift = index * 4
            planes = [(xs + shift + base[0]) % 256, (ys + 2 * shift + base[1]) % 256, (xs + ys + base[2]) % 256]
            pixels = np.stack(planes, -1).astype(np.uint8)  # kept alive: the frame may borrow this buffer
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            if timed:
                frame.pts, frame.time_base = int(pts[index]), Fraction(1, 1000)
            else:
                frame.pts = index
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return out.getvalue()


def write(spec: VideoSpec, folder: Path, *, seed: int = 0) -> Path:
    """``encode(spec)`` written into ``folder`` under the spec's name."""
    path = Path(folder) / spec.name
    path.write_bytes(encode(spec, seed=seed))
    return path
