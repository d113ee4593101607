"""``media.av_libs``: FFmpeg's own functions, from the very libraries PyAV runs on, answer as ``av.open`` does.

The oracle is ``av.open`` itself: the demuxer it picks for a file object is the one ``probed_format`` names, or
``probed_format`` names none; a file whose first look ties two formats (raw ADTS of two frames) opens in neither.
"""

from __future__ import annotations

import io

import av
import pytest

from vlmpack_offline.media import av_libs
from vlmpack_offline.synthetic.audio import CONTAINERS, encode_audio, garbage, truncated


def _opened_format(data: bytes) -> str | None:
    try:
        with av.open(io.BytesIO(data)) as container:
            return container.format.name
    except av.FFmpegError:
        return None


def _corpus():
    for container in CONTAINERS:
        rate = 48000 if container in ("ogg", "opus", "webm") else 44100 if container != "aac" else 8000
        for samples in (1, 961, rate // 2, 3 * rate):
            data = encode_audio(container, samples=samples, sample_rate=rate, channels=1, seed=samples)
            yield f"{container}-{samples}", data
            yield f"{container}-{samples}-cut", truncated(data)
    yield "garbage", garbage()


def test_probed_format_is_the_demuxer_av_open_picks():
    named, disagree = 0, []
    for name, data in _corpus():
        found = av_libs.probed_format(data)
        opened = _opened_format(data)
        named += found is not None
        if found is not None and opened is not None and found != opened:
            disagree.append((name, found, opened))
    assert not disagree, disagree
    assert named >= 60  # it names the format of (nearly) every file, not None for all


def test_raw_adts_of_two_frames_ties_and_opens_in_no_format():
    """8 kHz mono, 961 samples: two ADTS frames, which the aac probe scores 1, as another format does: FFmpeg picks
    neither (av_probe_input_format3 keeps no format at a tied top score), so av.open fails and so does the probe."""
    data = encode_audio("aac", samples=961, sample_rate=8000, channels=1, seed=961)
    assert _opened_format(data) is None and av_libs.probed_format(data) is None
    longer = encode_audio("aac", samples=8000, sample_rate=8000, channels=1, seed=1)
    assert _opened_format(longer) == av_libs.probed_format(longer) == "aac"


def test_library_is_pyavs_own_build_at_its_version(monkeypatch):
    for name in ("avformat", "avutil"):
        loaded = av_libs.library(name)
        assert loaded is not None, name
        found = getattr(loaded, f"{name}_version")()
        assert (found >> 16, (found >> 8) & 0xFF, found & 0xFF) == tuple(av.library_versions[f"lib{name}"])
    assert av_libs.library("no_such_ffmpeg_library") is None
    av_libs.library.cache_clear()
    monkeypatch.setitem(av.library_versions, "libavformat", (1, 0, 0))  # PyAV built on another libavformat
    try:
        assert av_libs.library("avformat") is None
    finally:
        av_libs.library.cache_clear()


@pytest.mark.parametrize("size", [2047, 2048, 2049, 4096, 5000])
def test_a_file_read_to_its_end_is_judged_with_threshold_zero(size):
    """Around the 2 KiB and 4 KiB looks: a file that ends inside a look is probed once more at score 0, as FFmpeg
    does when its next read hits the end; whatever FFmpeg picks at these sizes, the probe names the same or none."""
    data = encode_audio("aac", samples=44100, sample_rate=44100, channels=2, seed=3)[:size]
    found, opened = av_libs.probed_format(data), _opened_format(data)
    assert found is None or found == opened
