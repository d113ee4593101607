"""``media.mp4_audio``: AAC-LC and ALAC in a plain MP4 / M4A counted from the ``moov`` box alone, without PyAV.

The oracle is a plain PyAV decode loop with FFmpeg's defaults (``_decoded``), and for the demuxer's side, the index
PyAV's mov demuxer builds (``stream.index_entries``: discard flags) and the skip side data on its first packet.
That the count came without PyAV is shown by making the probe's PyAV path raise (``no_pyav_container``). Where
the reading cannot stand for FFmpeg's (fragmented files, several tracks, a damaged ``moov``), it declines and the
PyAV path, the reference, counts as before.
"""

from __future__ import annotations

import io

import av
import pytest
from _audio_oracle import clips, decoded, probed

from vlmpack_offline.media import audio as audio_module
from vlmpack_offline.media.audio import check_decodes, probe_audio
from vlmpack_offline.media.mp4_audio import mp4_audio
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.audio import encode_audio, encode_video_with_audio, signal_chunks, write_signal

RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)


def _lengths(rate: int) -> tuple[int, ...]:
    """Lengths around AAC's 1024-sample frame and ALAC's 4096, 0.05 s, 0.1 s, a second and 3 s."""
    return (2, 7, 100, 959, 1023, 1024, 1025, 2047, 2049, 4095, 4097, rate // 20, rate // 10 + 1, rate + 3,
            3 * rate + 17)  # fmt: skip


@pytest.mark.parametrize("container", ["m4a", "alac"])
def test_mp4_counts_what_the_decoder_yields_without_pyav(container, no_pyav_container):
    """Every rate, mono and stereo, 2 samples to 3 s: the probe's (samples, rate, channels) are the decoder's,
    read off moov without opening the file in PyAV; a clip the decoder yields nothing from (AAC's priming packet
    discarded, the next left out of the index) is dropped as corrupt_media."""
    wrong = []
    for rate, channels, length, data in clips(container, RATES, _lengths):
        oracle = decoded(data)
        info = probed(data)
        got = info.reason if isinstance(info, DropError) else (info.samples, info.sample_rate, info.channels,
                                                               info.container)  # fmt: skip
        want = (*oracle, channels, "mov,mp4,m4a,3gp,3g2,mj2") if oracle[0] else Reason.CORRUPT_MEDIA
        if got != want:
            wrong.append((rate, channels, length, want, got))
    assert not wrong, wrong


@pytest.mark.slow
def test_a_ten_minute_m4a_is_counted_without_pyav(no_pyav_container):
    data = encode_audio("m4a", samples=44100 * 600 + 5, sample_rate=44100, channels=2, seed=1)
    info = probe_audio(data, part="long.m4a")
    assert (info.samples, info.sample_rate) == decoded(data)


@pytest.mark.parametrize(("container", "rate"), [("m4a", 44100), ("m4a", 16000), ("alac", 48000)])
def test_mp4_reads_the_index_the_demuxer_builds(container, rate):
    """mov_fix_index replayed: the packets' discard flags and the first packet's skip are the ones PyAV's demuxer
    hands out (the edit list's priming frame flagged discard, its 1024 samples the skip; packets past the edit's
    end left out)."""
    for length in (7, 1025, rate // 10 + 1, 2 * rate + 5):
        data = encode_audio(container, samples=length, sample_rate=rate, channels=2, seed=length)
        read = mp4_audio(data)
        with av.open(io.BytesIO(data)) as opened:
            stream = opened.streams.audio[0]
            packets = [packet for packet in opened.demux(stream) if packet.size]
            flags = [packet.is_discard for packet in packets]
            side = audio_module._skip_samples(packets[0])
            durations = sum(packet.duration for packet in packets)
        assert read is not None
        assert read.discards.tolist() == flags
        assert ((read.skip, 0) if read.skip else None) == side
        assert read.durations == durations


def test_one_sample_of_alac_is_left_to_pyav():
    """An stts of one run of duration 1 makes FFmpeg demux the track as uncompressed chunks: not read here; the
    PyAV path counts it, as the decoder does."""
    data = encode_audio("alac", samples=1, sample_rate=44100, channels=1)
    assert mp4_audio(data) is None
    info = probe_audio(data, part="one.m4a")
    assert (info.samples, info.sample_rate) == decoded(data) == (1, 44100)


def _fragmented_aac(samples: int, rate: int) -> bytes:
    """AAC in a fragmented MP4 (``moof`` boxes after an empty ``moov``), as a live recorder writes it."""
    out = io.BytesIO()
    with av.open(out, "w", format="mp4", options={"movflags": "frag_keyframe+empty_moov"}) as box:
        stream = box.add_stream("aac", rate=rate, layout="stereo")
        pts = 0
        for chunk in signal_chunks(samples=samples, sample_rate=rate, channels=2, seed=3):
            frame = av.AudioFrame.from_ndarray(chunk, format="fltp", layout="stereo")
            frame.sample_rate, frame.pts = rate, pts
            pts += chunk.shape[1]
            box.mux(stream.encode(frame))
        box.mux(stream.encode(None))
    return out.getvalue()


@pytest.mark.parametrize(
    "make",
    [lambda: _fragmented_aac(44100 * 2 + 5, 44100), lambda: encode_video_with_audio(seconds=1.0)],
    ids=["fragmented", "video-and-audio-tracks"],
)
def test_mp4_the_reading_does_not_stand_for_is_counted_by_pyav(make):
    """A fragmented MP4 (its samples in moof / trun boxes) and an MP4 with a video track beside the audio: declined,
    and the PyAV path's count is the decoder's."""
    data = make()
    assert mp4_audio(data) is None
    info = probe_audio(data, part="clip.mp4")
    assert (info.samples, info.sample_rate) == decoded(data)


def _ipod(codec: str, samples: int, options: dict[str, str], tags: dict[str, str]) -> bytes:
    """An M4A from FFmpeg's ipod muxer without the bitexact flags (so with its encoder tags, and the AAC encoder's
    version string in a fill element of the first frame), with the muxer ``options`` and ``tags``."""
    out = io.BytesIO()
    with av.open(out, "w", format="ipod", options=options) as box:
        box.metadata.update(tags)
        stream = box.add_stream(codec, rate=44100, layout="stereo")
        write_signal(box, stream, samples=samples, sample_rate=44100, channels=2, seed=samples)
    return out.getvalue()


@pytest.mark.parametrize("codec", ["aac", "alac"])
@pytest.mark.parametrize(
    ("options", "tags"),
    [({"use_editlist": "0"}, {}), ({}, {"title": "Grüße, 音声", "artist": "vlmpack"})],
    ids=["no-edit-list", "utf8-tags"],
)
def test_mp4_without_edit_list_or_with_tags_is_counted_without_pyav(codec, options, tags, no_pyav_container):
    """No edit list (mov_fix_index leaves the index as it is: no discard, no skip, every AAC packet 1024 samples)
    and iTunes-style tags in UTF-8 (the muxer's encoder tag and a title and artist): read off moov, the decoder's
    count."""
    wrong = []
    for length in (7, 1025, 44100 + 3):
        data = _ipod(codec, length, options, tags)
        oracle = decoded(data)
        info = probed(data, "clip.m4a")  # dropped: AAC's 7 samples behind the priming edit, the decoder yields nothing
        got = info.reason if isinstance(info, DropError) else (info.samples, info.sample_rate)
        if got != (oracle if oracle[0] else Reason.CORRUPT_MEDIA):
            wrong.append((length, got, oracle))
    assert not wrong, wrong


def _moov(data: bytes) -> range:
    pos = 0
    while pos + 8 <= len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        if data[pos + 4 : pos + 8] == b"moov":
            return range(pos, pos + length)
        pos += length
    raise AssertionError("no moov")


def _pyav_path(data: bytes) -> tuple[int, int] | Reason:
    """(samples, rate) the probe gives with the moov reading switched off (its PyAV path), or its drop reason."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(audio_module, "mp4_audio", lambda data: None)
        info = probed(data, "x")
    return info.reason if isinstance(info, DropError) else (info.samples, info.sample_rate)


@pytest.mark.parametrize(("container", "rate", "channels"), [("m4a", 44100, 2), ("m4a", 16000, 1), ("alac", 22050, 2)])
def test_every_flipped_moov_byte_declines_or_counts_as_the_decoder(container, rate, channels):
    """Each byte of the moov box of a small clip, flipped whole and in its lowest bit. The reading declines (the
    PyAV path decides, as before) or, where PyAV's decoder decodes the copy, gives exactly its samples and rate;
    where the decoder fails (a sample's size or offset flipped: packets cut at the wrong bytes), the PyAV path
    counts the same or drops the copy (its open decodes the first frame), and check_decodes (``scan.decode_check``)
    drops it: the reading, like the ADTS and Matroska walks, does not decode the packets it counts."""
    data = encode_audio(container, samples=rate // 5 + 3, sample_rate=rate, channels=channels, seed=5)
    assert mp4_audio(data) is not None
    wrong, read = [], 0
    for mask in (0xFF, 0x01):
        for at in _moov(data):
            damaged = bytearray(data)
            damaged[at] ^= mask
            damaged = bytes(damaged)
            got = mp4_audio(damaged)
            samples = None if got is None else audio_module._mp4_samples(got)
            if samples is None:
                continue
            read += 1
            oracle = decoded(damaged)
            if oracle[0]:
                if (samples, got.sample_rate) != oracle:
                    wrong.append((at, mask, samples, got.sample_rate, oracle))
                continue
            reference = _pyav_path(damaged)
            if samples and reference not in ((samples, got.sample_rate), Reason.CORRUPT_MEDIA):
                wrong.append((at, mask, samples, "PyAV path", reference))
            try:
                check_decodes(damaged, samples=samples, part="x")
                if samples:
                    wrong.append((at, mask, samples, "decode fails, check_decodes passes"))
            except DropError as exc:
                assert exc.reason == Reason.CORRUPT_MEDIA
    assert not wrong, wrong
    assert read  # flips the reading passes over (times, reserved fields) still count


def test_a_sample_count_past_the_files_bytes_declines_without_expanding_it():
    """A one-sample ALAC clip (stsz: one constant size) whose stts and stsz both claim 2^31 samples: more samples
    than the file has bytes, so the reading declines before it expands a table of that length."""
    data = bytearray(encode_audio("alac", samples=1025, sample_rate=48000, channels=1))
    stts, stsz = data.find(b"stts"), data.find(b"stsz")
    assert data[stsz + 8 : stsz + 12] != bytes(4)  # a constant sample size: no table bounds the count
    data[stts + 12 : stts + 16] = (1 << 31).to_bytes(4, "big")  # the one run's sample count
    data[stsz + 12 : stsz + 16] = (1 << 31).to_bytes(4, "big")
    assert mp4_audio(bytes(data)) is None


@pytest.mark.parametrize(("container", "rate", "channels"), [("alac", 22050, 2), ("alac", 8000, 1)])
def test_the_pyav_path_never_counts_a_damaged_alac_other_than_its_decoder(container, rate, channels):
    """What the moov reading declines goes to the PyAV path, which counts ALAC by decoding: a damaged duration
    table (stts) says nothing of what the frames decode to (summed, it gave 61,184 samples for 4,096 decoded).
    Every flipped moov byte: the PyAV path gives the decoder's (samples, rate), or drops the copy."""
    data = encode_audio(container, samples=rate // 5 + 3, sample_rate=rate, channels=channels, seed=5)
    wrong = []
    for at in _moov(data):
        damaged = bytearray(data)
        damaged[at] ^= 0xFF
        damaged = bytes(damaged)
        got = _pyav_path(damaged)
        if isinstance(got, tuple) and got != decoded(damaged):
            wrong.append((at, got, decoded(damaged)))
    assert not wrong, wrong
