"""FFmpeg's own C functions that PyAV does not wrap, called through ctypes in the libraries PyAV itself loaded.

A reader that skips PyAV's demuxer must still decide what the demuxer would: FFmpeg's CRC (``flac_walk``), and
which demuxer ``av.open`` picks for a file (``probed_format``, for ``audio``'s raw ADTS reader). Calling FFmpeg's
own functions keeps those answers FFmpeg's. A library is used only when it is the very build PyAV runs on (its
wheel's ``av.libs``, else the system's) at the version PyAV reports (``av.library_versions``); otherwise
``library`` returns None and the caller takes the PyAV path, never a second FFmpeg's answer.
"""

from __future__ import annotations

import ctypes
import functools

__all__ = ["library", "probed_format"]

_PROBE_MIN = 2048  # libavformat/internal.h PROBE_BUF_MIN: av_probe_input_buffer2's first read
_PROBE_MAX = 16384  # where probed_format stops asking (av.open reads on to 1 MiB): the caller declines
_PROBE_RETRY = 25  # AVPROBE_SCORE_RETRY: the score a format must pass while more bytes could be read
_PADDING = 32  # AVPROBE_PADDING_SIZE: zero bytes a probe may read past the data
_NAME = b"<none>"  # the url PyAV hands avformat_open_input for a file object (av/container/core.py)


class _ProbeData(ctypes.Structure):  # libavformat/avformat.h AVProbeData
    _fields_ = [("filename", ctypes.c_char_p), ("buf", ctypes.c_char_p), ("buf_size", ctypes.c_int),
                ("mime_type", ctypes.c_char_p)]  # fmt: skip


@functools.cache
def library(name: str) -> ctypes.CDLL | None:
    """FFmpeg's ``lib<name>`` (``avutil``, ``avformat``) as PyAV loaded it, or None where it is not found or is
    not the version PyAV was built on."""
    import ctypes.util
    import glob
    import os

    import av

    here = os.path.dirname(os.path.dirname(av.__file__))
    paths = sorted(glob.glob(os.path.join(here, "av.libs", f"lib{name}-*.so*"))) or [ctypes.util.find_library(name)]
    want = av.library_versions.get(f"lib{name}")
    try:
        loaded = ctypes.CDLL(paths[0])
        version = getattr(loaded, f"{name}_version")
        version.restype = ctypes.c_uint
        found = version()
    except (OSError, AttributeError, TypeError):
        return None
    return loaded if want is not None and (found >> 16, (found >> 8) & 0xFF, found & 0xFF) == tuple(want) else None


def probed_format(data: bytes) -> str | None:
    """The demuxer ``av.open`` picks for ``data`` (a file object, no format given), found as
    ``av_probe_input_buffer2`` finds it (libavformat/format.c): FFmpeg's ``av_probe_input_format3`` on the first
    2 KiB, then 4, 8, 16 KiB, a format kept only above AVPROBE_SCORE_RETRY (25) while more could be read and above 0
    once the file is read to its end (two formats at the top score: none). None where no format is found, where 16
    KiB do not decide (``av.open`` reads on: the caller takes the PyAV path) or libavformat is not PyAV's."""
    probe = _probe()
    if probe is None:
        return None
    size = _PROBE_MIN
    while size <= _PROBE_MAX:
        head = bytes(data[:size])
        ended = len(head) < size  # the next read hits the end: FFmpeg looks at these bytes again, threshold 0
        score = ctypes.c_int(0)
        found = probe(ctypes.byref(_ProbeData(_NAME, head + bytes(_PADDING), len(head), None)), 1, ctypes.byref(score))
        if found and score.value > (0 if ended else _PROBE_RETRY):
            return ctypes.c_char_p.from_address(found).value.decode()  # AVInputFormat's first field: its name
        if ended:
            return None
        size *= 2
    return None


@functools.cache
def _probe():
    loaded = library("avformat")
    if loaded is None:
        return None
    probe = loaded.av_probe_input_format3
    probe.restype = ctypes.c_void_p
    probe.argtypes = [ctypes.POINTER(_ProbeData), ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
    return probe
