"""What the audio tests hold the probe to: PyAV's own decode (FFmpeg's defaults throughout). The fixture that keeps
the probe from opening PyAV at all is conftest's ``no_pyav_container``."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator

import av

from vlmpack_offline.media.audio import AudioInfo, probe_audio
from vlmpack_offline.reasons import DropError
from vlmpack_offline.synthetic.audio import encode_audio


def decoded(data: bytes) -> tuple[int, int | None]:
    """(samples, rate) PyAV's decoder yields for the first audio stream, FFmpeg's defaults; (0, None) when the file
    does not open or decode to its end (PyAV's errors, or its metadata not UTF-8), or changes its rate part-way
    (decode_audio refuses all of these)."""
    try:
        with av.open(io.BytesIO(data)) as container:
            samples, rate = 0, None
            for frame in container.decode(audio=0):
                if rate is not None and frame.sample_rate != rate:
                    return 0, None
                samples, rate = samples + frame.samples, frame.sample_rate
            return samples, rate
    except Exception:  # noqa: BLE001 - whatever PyAV raises, decode_audio drops the file
        return 0, None


def probed(data: bytes, part: str = "clip") -> AudioInfo | DropError:
    """What the probe says of a clip: its ``AudioInfo``, or the drop it raises (reason and message)."""
    try:
        return probe_audio(data, part=part)
    except DropError as exc:
        return exc


def clips(
    container: str, rates: Iterable[int], lengths: Callable[[int], Iterable[int]]
) -> Iterator[tuple[int, int, int, bytes]]:
    """``(rate, channels, length, data)``: a clip encoded in ``container`` for each rate, mono and stereo, and each
    of the rate's lengths (seeded by its length)."""
    for rate in rates:
        for channels in (1, 2):
            for length in lengths(rate):
                data = encode_audio(
                    container, samples=length, sample_rate=rate, channels=channels, seed=length
                )
                yield rate, channels, length, data
