"""What the audio tests hold the probe to: PyAV's own decode (FFmpeg's defaults throughout). The fixture that keeps
the probe from opening PyAV at all is conftest's ``no_pyav_container``."""

from __future__ import annotations

import io

import av


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
