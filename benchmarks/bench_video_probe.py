"""Scan cost per video: what reading a video's frame count, rate and size costs with each video.reader.

    .venv/bin/python benchmarks/bench_video_probe.py [--repeat 3]

Baseline, measured in the same run: the probe before video.reader (decord opens the bytes and decodes
frame 0 for the size; PyAV decoded every frame to count them where decord failed). Now: torchcodec's
numbers from PyAV's demuxer (header + packet index, the first frame decoded for the display rotation),
decord's from decord (its index) plus the header size and first frame, pyav's from the header and first frame. Prints videos/s per clip and reader, and the ratio to the baseline.
"""

from __future__ import annotations

import argparse
import io
import time

from vlmpack_offline.media import probe_video
from vlmpack_offline.synthetic.videos import VideoSpec, encode

CLIPS = (
    VideoSpec(seconds=2.0, fps=10),
    VideoSpec(seconds=10.0, fps=30, width=1920, height=1080),
    VideoSpec(seconds=60.0, fps=30, width=640, height=360),
    VideoSpec(seconds=310.0, fps=30, width=320, height=240),
    VideoSpec(container="mkv", vfr=True, seconds=60.0, fps=30, width=640, height=360),
)


def baseline_probe(data: bytes) -> tuple[int, float, int, int]:
    """The probe vlmpack had before video.reader: decord's count and rate, frame 0 decoded for the size."""
    import decord

    try:
        reader = decord.VideoReader(io.BytesIO(data), num_threads=1)
        height, width = reader[0].shape[:2]
        return len(reader), float(reader.get_avg_fps()), height, width
    except Exception:
        import av

        with av.open(io.BytesIO(data)) as container:
            frames = list(container.decode(video=0))
            return len(frames), float(container.streams.video[0].average_rate), frames[0].height, frames[0].width


def _per_second(function, data: bytes, repeat: int) -> float:
    function(data)  # warm: imports, codec tables
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        function(data)
        best = min(best, time.perf_counter() - start)
    return 1.0 / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per clip and reader (the best counts)")
    args = parser.parse_args()
    print(f"{'clip':<44}{'MB':>6}  {'baseline/s':>11}" + "".join(f"{r + '/s':>14}{'x':>6}" for r in ("torchcodec", "decord", "pyav")))
    for spec in CLIPS:
        data = encode(spec)
        base = _per_second(baseline_probe, data, args.repeat)
        row = f"{spec.name:<44}{len(data) / 1e6:>6.1f}  {base:>11.1f}"
        for reader in ("torchcodec", "decord", "pyav"):
            try:
                rate = _per_second(lambda d, r=reader: probe_video(d, reader=r), data, args.repeat)
                row += f"{rate:>14.1f}{rate / base:>6.1f}"
            except Exception as exc:  # pyav on a headerless matroska clip: a recorded drop, not a number
                row += f"{'refused':>14}{'':>6}" if "reports 0 frame" in str(exc) else f"{type(exc).__name__:>14}{'':>6}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
