"""``media.audio``'s demux-side walks (AAC in ADTS and MP4, Opus and FLAC in Matroska / WebM, FLAC in its own
container by ``flac_walk``) count exactly what PyAV's decoder hands out, without decoding; where a walk cannot
stand for the demuxer it declines to decoding, and a damaged copy is never counted differently from what the
decoder yields.

The oracle is a plain PyAV decode loop with FFmpeg's defaults (``_decoded``), as in ``test_audio_media.py``. That
the walk decodes nothing is shown by making the probe's decode path raise (``_no_decoding``). The walks' packets
are held to the packets FFmpeg's demuxers hand out (counts, discard flags, skip side data). Damaged copies: every
byte of small clips flipped, one at a time.
"""

from __future__ import annotations

import io
import random
import re

import av
import numpy as np
import pytest
from _audio_oracle import clips, decoded, probed

from vlmpack_offline.media import audio as audio_module
from vlmpack_offline.media import flac_walk
from vlmpack_offline.media.audio import check_decodes, probe_audio
from vlmpack_offline.media.audio_headers import _opus_samples, adts_frames, matroska_blocks
from vlmpack_offline.media.flac_walk import flac_samples
from vlmpack_offline.media.mp4_audio import AAC_RATES
from vlmpack_offline.reasons import DropError, Reason
from vlmpack_offline.synthetic.audio import encode_audio, rates_taken, signal_chunks

WALKED = ("m4a", "aac", "webm", "mka")
RATES = (8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000)


@pytest.fixture
def _no_decoding(monkeypatch):
    """The probe's decode path (``_decoded_samples``) raises: a count that comes back was walked, not decoded."""

    def refuse(*args, **kwargs):
        raise AssertionError("the probe decoded")

    monkeypatch.setattr(audio_module, "_decoded_samples", refuse)


def _lengths(rate: int) -> tuple[int, ...]:
    """One sample, the 7-sample clip AAC decodes to nothing, lengths around the frame sizes (960 Opus, 1024 AAC,
    4096 FLAC), 0.05 s, 0.1 s, a second and 3 s."""
    return (1, 7, 100, 959, 961, 1023, 1024, 1025, 2047, 2049, 4097, rate // 20, rate // 10 + 1, rate + 3, 3 * rate + 17)


@pytest.mark.parametrize("container", WALKED)
def test_walk_counts_what_the_decoder_yields_without_decoding(container, _no_decoding):
    """Every rate the encoder takes, mono and stereo, every length: the probe's (samples, rate) are the decoder's,
    found without decoding; a clip the decoder yields nothing from is dropped as corrupt_media."""
    wrong = []
    rates = [r for r in RATES if rates_taken(container) is None or r in rates_taken(container)]
    for rate, channels, length, data in clips(container, rates, _lengths):
        oracle = decoded(data)
        info = probed(data)
        got = info.reason if isinstance(info, DropError) else (info.samples, info.sample_rate)
        if got != (oracle if oracle[0] else Reason.CORRUPT_MEDIA):
            wrong.append((rate, channels, length, oracle, got))
    assert not wrong, wrong


@pytest.mark.parametrize("container", ["m4a", "webm", "mka"])
def test_walk_reads_the_packets_the_demuxer_hands_out(container):
    """The walks' view is the demuxer's: MP4's index entries are its packets, discard flags and all, and Matroska's
    blocks are its packets with their DiscardPadding as skip side data; skip side data rides on the first packet
    only, which is where the walk reads it."""
    rate = 44100 if container != "webm" else 48000
    for length in (1, 1025, rate // 10 + 1, 2 * rate + 5):
        data = encode_audio(container, samples=length, sample_rate=rate, channels=2, seed=length)
        with av.open(io.BytesIO(data)) as opened:
            stream = opened.streams.audio[0]
            entries = [entry.is_discard for entry in stream.index_entries]
            packets = [packet for packet in opened.demux(stream) if packet.size]
            sides = [audio_module._skip_samples(packet) for packet in packets]
            codec, channels = stream.codec_context.codec.canonical_name, stream.codec_context.channels
        assert all(side is None or side[0] == 0 for side in sides[1:]), sides
        if container == "m4a":
            assert entries == [packet.is_discard for packet in packets]
            continue
        blocks = matroska_blocks(data, codec=codec, rate=rate)
        assert len(blocks.samples) == len(packets) and channels == 2
        walked = [(0, blocks.discards[i]) if i in blocks.discards else None for i in range(1, len(packets))]
        assert walked == sides[1:]


def _aac_in_matroska(samples: int, rate: int, channels: int) -> bytes:
    """FFmpeg's AAC encoder into a Matroska file (synthetic.audio writes AAC only in MP4 and ADTS)."""
    out = io.BytesIO()
    with av.open(out, "w", format="matroska") as box:
        stream = box.add_stream("aac", rate=rate, layout="mono" if channels == 1 else "stereo")
        pts = 0
        for chunk in signal_chunks(samples=samples, sample_rate=rate, channels=channels, seed=samples):
            frame = av.AudioFrame.from_ndarray(chunk, format="fltp", layout=stream.codec_context.layout)
            frame.sample_rate, frame.pts = rate, pts
            pts += chunk.shape[1]
            box.mux(stream.encode(frame))
        box.mux(stream.encode(None))
    return out.getvalue()


def test_aac_in_matroska_is_walked_to_the_decoded_count(_no_decoding):
    """AAC-LC blocks in Matroska: 1024 samples each, trimmed by the first packet's skip (the muxer's CodecDelay)."""
    wrong = []
    for rate in (8000, 22050, 44100, 48000):
        for channels in (1, 2):
            for length in (1, 7, 1025, rate // 10 + 1, 3 * rate + 17):
                data = _aac_in_matroska(length, rate, channels)
                info = probe_audio(data, part="clip.mka")
                if (info.samples, info.sample_rate) != decoded(data):
                    wrong.append((rate, channels, length, decoded(data), info.samples))
    assert not wrong, wrong


def test_seven_samples_of_aac_in_mp4_are_dropped_as_the_decoder_yields_nothing(_no_decoding):
    """The priming packet is flagged discard and the one packet past the edit's end is left out of the index: the
    walk counts 0, the probe drops the clip, as decoding it gives nothing."""
    data = encode_audio("m4a", samples=7, sample_rate=44100, channels=1)
    assert decoded(data) == (0, None)
    with pytest.raises(DropError, match=r"^tiny\.m4a: the aac stream holds no audio \(0 samples\)") as exc:
        probe_audio(data, part="tiny.m4a")
    assert exc.value.reason == Reason.CORRUPT_MEDIA


def test_adts_behind_an_id3_tag_is_counted_by_decoding():
    """An ID3v2 tag before the first frame (FFmpeg's demuxer skips it): not a bare chain of frames, so the walk
    declines and the count is the decoder's."""
    frames = encode_audio("aac", samples=44100, sample_rate=44100, channels=2)
    tag = b"ID3\x04\x00\x00\x00\x00\x00\x0a" + bytes(10)
    assert adts_frames(frames) is not None and adts_frames(tag + frames) is None
    info = probe_audio(tag + frames, part="tagged.aac")
    assert (info.samples, info.sample_rate) == decoded(tag + frames) == decoded(frames)


def test_raw_adts_is_counted_without_pyav_demuxing_it(no_pyav_container):
    """Every rate the encoder takes, mono and stereo, a second and 3 s: raw ADTS is counted from its frame headers,
    FFmpeg's format probe and its decoder's first frame, never opened with ``av.open``; the count is the decode's."""
    wrong = []
    for rate in AAC_RATES:
        for channels in (1, 2):
            for length in (rate + 3, 3 * rate + 17):
                data = encode_audio("aac", samples=length, sample_rate=rate, channels=channels, seed=length)
                info = probe_audio(data, part="clip.aac")
                if (info.samples, info.sample_rate, info.channels) != (*decoded(data), channels):
                    wrong.append((rate, channels, length, decoded(data), info))
                assert (info.codec, info.container) == ("aac", "aac")
    assert not wrong, wrong


def test_flac_in_matroska_is_counted_without_pyav(no_pyav_container):
    """Every rate, mono and stereo, one sample to 3 s: FLAC in Matroska is counted from the track's facts (CodecPrivate's
    STREAMINFO, SamplingFrequency, Channels) and its blocks, never opened with ``av.open``; the count is the decode's."""
    wrong = []
    for rate, channels, length, data in clips("mka", RATES, _lengths):
        info = probe_audio(data, part="clip.mka")
        if (info.samples, info.sample_rate, info.channels) != (*decoded(data), channels):
            wrong.append((rate, channels, length, decoded(data), info))
        assert (info.codec, info.container) == ("flac", "matroska,webm")
    assert not wrong, wrong


class _Bits:
    """MSB-first bit writer for hand-built AAC frames."""

    def __init__(self) -> None:
        self.value, self.width = 0, 0

    def put(self, value: int, width: int) -> _Bits:
        self.value, self.width = (self.value << width) | (value & ((1 << width) - 1)), self.width + width
        return self

    def bytes(self) -> bytes:
        pad = -self.width % 8
        return (self.value << pad).to_bytes((self.width + pad) // 8, "big")


def _adts_silence(frames: int, rate_index: int, channels: int, sbr_from: int | None) -> bytes:
    """Raw ADTS AAC-LC frames FFmpeg's encoder cannot write: each a raw_data_block (ISO 14496-3 4.4.2) of silent
    channel elements (SCE or CPE, long window, max_sfb 0: no spectral data), from frame ``sbr_from`` on followed by a
    FIL element carrying an SBR extension payload (EXT_SBR_DATA with an SBR header), which is how implicitly
    signalled HE-AAC (and, in mono, HE-AAC v2's PS) looks in ADTS, then ID_END."""
    out = []
    for index in range(frames):
        block = _Bits()
        for _ in range(1 if channels == 1 else 2):  # the ICS: global_gain, ics_info, no pulse / TNS / gain control
            if not block.width:
                block.put(0 if channels == 1 else 1, 3).put(0, 4)  # ID_SCE / ID_CPE, element_instance_tag
                if channels == 2:
                    block.put(0, 1)  # common_window 0
            block.put(100, 8).put(0, 1).put(0, 2).put(0, 1).put(0, 6).put(0, 1).put(0, 3)
        if sbr_from is not None and index >= sbr_from:
            payload = _Bits().put(13, 4).put(1, 1)  # EXT_SBR_DATA, bs_header_flag
            payload.put(1, 1).put(5, 4).put(9, 4).put(0, 3).put(0, 2).put(0, 2).put(0, 60)  # sbr_header, zeros
            body = payload.bytes()
            block.put(6, 3).put(len(body), 4)  # ID_FIL, count (under 15: no escape)
            for byte in body:
                block.put(byte, 8)
        raw = block.put(7, 3).bytes()  # ID_END
        header = _Bits().put(0xFFF, 12).put(0, 1).put(0, 2).put(1, 1).put(1, 2).put(rate_index, 4).put(0, 1)
        header.put(channels, 3).put(0, 4).put(7 + len(raw), 13).put(0x7FF, 11).put(0, 2)  # frame_length, fullness
        out.append(header.bytes() + raw)
    return b"".join(out)


@pytest.mark.parametrize("channels", [1, 2])
def test_adts_whose_first_frame_turns_on_sbr_is_counted_by_decoding(channels):
    """SBR in the first frame: FFmpeg's decoder switches to HE-AAC (2048 samples a frame at twice the header's rate;
    mono, with PS possible, decodes as stereo), which the frame headers do not say. The decoder's first frame does:
    the probe counts what decoding gives. SBR first met in a later frame switches the decoder's rate there, which
    no header shows: the probe counts LC frames without PyAV, and the scan's decode check drops the file."""
    rate_index = AAC_RATES.index(22050)
    he = _adts_silence(20, rate_index, channels, sbr_from=0)
    assert decoded(he) == (20 * 2048, 44100)
    info = probe_audio(he, part="he.aac")
    assert (info.samples, info.sample_rate, info.channels) == (20 * 2048, 44100, 2)
    plain = _adts_silence(20, rate_index, channels, sbr_from=None)
    late = _adts_silence(20, rate_index, channels, sbr_from=3)
    assert decoded(plain) == (20 * 1024, 22050) and decoded(late) == (0, None)  # 22.05 kHz, then 44.1 kHz
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(audio_module, "_opened", _refuse_pyav)
        infos = [probe_audio(data, part="late.aac") for data in (plain, late)]
    assert {(info.samples, info.sample_rate, info.channels) for info in infos} == {(20 * 1024, 22050, channels)}
    with pytest.raises(DropError, match=r"^late\.aac: ") as exc:
        check_decodes(late, samples=infos[1].samples, part="late.aac")
    assert exc.value.reason == Reason.CORRUPT_MEDIA


def _refuse_pyav(*args, **kwargs):
    raise AssertionError("the probe opened the file with PyAV")


@pytest.mark.parametrize(
    ("packet", "samples"),
    [
        (bytes([0xFC]) + bytes(40), 960),  # config 31 (CELT 20 ms), code 0: one frame
        (bytes([0xFD]) + bytes(40), 1920),  # code 1: two frames of 20 bytes each
        (bytes([0xFD]) + bytes(41), None),  # code 1 with an odd remainder: no equal halves
        (bytes([0xFE, 10]) + bytes(30), 1920),  # code 2: a 10-byte frame, then 20 bytes
        (bytes([0xFE, 40]) + bytes(30), None),  # code 2: the first frame runs past the packet
        (bytes([0xFF, 0x03]) + bytes(30), 2880),  # code 3, CBR, three frames of 10 bytes
        (bytes([0xFF, 0x00]) + bytes(30), None),  # code 3 with no frames
        (bytes([0x1B, 0x03]) + bytes(30), None),  # config 3 (SILK 60 ms) x 3 frames: 180 ms, past the 120 ms limit
        (bytes([0xFC]) + bytes(1276), None),  # a frame over 1275 bytes
    ],
)
def test_opus_packet_frames_are_read_as_ffmpeg_parses_them(packet, samples):
    """RFC 6716 3.2's packet codes, and the packets ff_opus_parse_packet refuses (its parser drops them in
    Matroska): those decline the walk."""
    assert _opus_samples(packet, 0, len(packet)) == samples


def _flipped_copies(data: bytes, stride: int, mask: int):
    for at in range(0, len(data), stride):
        damaged = bytearray(data)
        damaged[at] ^= mask
        yield at, bytes(damaged)


@pytest.mark.parametrize(
    ("container", "rate", "channels", "seconds", "stride", "mask"),
    [
        ("webm", 48000, 2, 0.3, 3, 0xFF),
        ("webm", 16000, 1, 0.3, 2, 0x01),
        ("mka", 44100, 2, 0.05, 5, 0xFF),
        ("m4a", 44100, 2, 0.2, 3, 0xFF),
        ("m4a", 16000, 1, 0.3, 3, 0x01),
        ("aac", 44100, 1, 0.2, 2, 0x80),
        ("flac", 44100, 2, 0.32, 13, 0xFF),
        ("flac", 16000, 1, 0.3, 5, 0x01),
        ("wav", 16000, 1, 0.05, 1, 0xFF),
        ("wav", 44100, 2, 0.02, 1, 0x01),
    ],
)
def test_a_damaged_byte_is_never_counted_differently_from_the_decode(container, rate, channels, seconds, stride,
                                                                      mask):  # fmt: skip
    """Each byte of a small clip flipped in turn (``stride``: every n-th byte). Where the decoder decodes the copy,
    the probe gives its count or drops the copy; where it fails, the probe drops it or counts it and
    check_decodes (``scan.decode_check``) drops it: coded data without a checksum is seen only by decoding."""
    data = encode_audio(container, samples=int(rate * seconds) + 3, sample_rate=rate, channels=channels, seed=5)
    wrong = []
    for at, damaged in _flipped_copies(data, stride, mask):
        oracle = decoded(damaged)
        try:
            info = probe_audio(damaged, part="x")
        except DropError:
            continue
        if oracle[0]:
            if (info.samples, info.sample_rate) != oracle:
                wrong.append((at, oracle, info.samples))
            continue
        try:
            check_decodes(damaged, samples=info.samples, part="x")
            wrong.append((at, "decode fails, check_decodes passes", info.samples))
        except DropError as exc:
            assert exc.reason == Reason.CORRUPT_MEDIA
    assert not wrong, wrong


@pytest.fixture(params=["compiled", "numpy"])
def flac_passes(request, monkeypatch):
    """``flac_walk``'s passes over every byte as the install built them (``_flac_scan``: the sync search, the headers
    and the CRC-16s in C) and as numpy and ctypes run them where it was not built: each must give the decoder's
    count. The compiled case skips where no C compiler built the module."""
    if request.param == "numpy":
        monkeypatch.setattr(flac_walk, "_flac_scan", None)
    elif flac_walk._flac_scan is None:
        pytest.skip("vlmpack_offline.media._flac_scan was not built (no C compiler at install): numpy runs the passes")
    monkeypatch.setattr(flac_walk, "_CRC", None)  # loaded again, for this path
    return request.param


def test_flac_frames_are_counted_from_their_headers_without_pyav(no_pyav_container):
    """Every rate, mono and stereo, one sample to 3 s: a plain .flac file's count is the decoder's, proven from
    STREAMINFO, the frame headers FFmpeg's parser finds and their CRC-16s, without opening the file in PyAV."""
    wrong = []
    for rate in RATES:
        for channels in (1, 2):
            for length in _lengths(rate):
                data = encode_audio("flac", samples=length, sample_rate=rate, channels=channels, seed=length)
                info = probe_audio(data, part="clip.flac")
                if (info.samples, info.sample_rate) != decoded(data) or info.channels != channels:
                    wrong.append((rate, channels, length, decoded(data), info))
                assert (info.codec, info.container) == ("flac", "flac")
    assert not wrong, wrong


def test_flac_candidate_header_inside_a_frame_is_scored_away_as_ffmpeg_does(no_pyav_container, flac_passes):
    """This clip (8 s of the synthetic signal at 48 kHz, seed 28) holds bytes inside frame 61 that read as a valid
    frame header (sync, codes, frame number 5, CRC-8) for 4 channels of 20 bits at 16 kHz: FFmpeg's parser finds it,
    penalises every link to it (its rate, sample size and channels differ from the frames around it) and hands out
    the real frames. The walk stands for that scoring and counts the file; the decoder agrees."""
    data = encode_audio("flac", samples=48000 * 8 + 28, sample_rate=48000, channels=2, seed=28)
    at = 929916
    assert data[at : at + 4] == bytes([0xFF, 0xF8, 0x45, 0x3A])  # block 2304, 16 kHz, 4 channels, 20 bits
    with av.open(io.BytesIO(data)) as opened:
        starts = [packet.pos for packet in opened.demux(audio=0) if packet.size]
    assert at not in starts and min(starts) < at < max(starts)  # not a packet: inside a frame the parser emitted
    info = probe_audio(data, part="clip.flac")
    assert (info.samples, info.sample_rate) == decoded(data) == (48000 * 8 + 28, 48000)


@pytest.mark.parametrize(("rate", "channels", "seconds", "stride"), [(44100, 2, 0.32, 7), (16000, 1, 0.5, 2)])
def test_flac_walk_answers_only_with_the_decoders_count(rate, channels, seconds, stride):
    """Every (``stride``-th) byte of a FLAC file of several frames, flipped whole and in its lowest bit: the walk
    either declines (None: the PyAV path decides, as before) or gives exactly the samples PyAV's decoder yields.
    A flipped bit in a frame's coded data fails that frame's CRC-16 (FFmpeg's parser then loses a frame in files
    this short), so the walk declines; in a header it fails the CRC-8 and the chain; in the metadata's padding it
    changes nothing."""
    data = encode_audio("flac", samples=int(rate * seconds) + 3, sample_rate=rate, channels=channels, seed=5)
    assert flac_samples(data) is not None
    wrong, walked = [], 0
    for mask in (0xFF, 0x01):
        for at, damaged in _flipped_copies(data, stride, mask):
            got = flac_samples(damaged)
            if got is None:
                continue
            walked += 1
            if (got.samples, got.sample_rate) != decoded(damaged):
                wrong.append((at, mask, got.samples, decoded(damaged)))
    assert not wrong, wrong
    assert walked  # the metadata's padding: flips the walk reads past


@pytest.mark.parametrize(
    "edit",
    [lambda data: b"ID3\x04\x00\x00\x00\x00\x00\x0a" + bytes(10) + data, lambda data: data + b"TAG" + bytes(125)],
    ids=["id3-before-fLaC", "id3v1-after-the-last-frame"],
)
def test_flac_the_walk_does_not_read_is_counted_by_the_pyav_path(edit):
    """An ID3v2 tag before ``fLaC`` (FFmpeg skips it) and an ID3v1 trailer after the last frame (the parser hands it
    to the decoder inside the last packet): the walk declines, and the PyAV path's count is the decoder's."""
    data = edit(encode_audio("flac", samples=44100 * 2 + 5, sample_rate=44100, channels=2))
    assert flac_samples(data) is None
    info = probe_audio(data, part="tagged.flac")
    assert (info.samples, info.sample_rate) == decoded(data) == (44100 * 2 + 5, 44100)


def _flac_frames(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each frame, found by PyAV's own demuxer and FFmpeg's parser (their packets' positions)."""
    with av.open(io.BytesIO(data)) as opened:
        starts = [packet.pos for packet in opened.demux(audio=0) if packet.size]
    return list(zip(starts, [*starts[1:], len(data)], strict=True))


def _frame_damage(data: bytes, start: int, end: int):
    """One frame damaged in each way a file meets: a byte flipped in its header (a field, then the CRC-8), in its
    coded data (near its start, middle and end), in its CRC-16; the file cut at the frame's start, in its middle
    and one byte before its end."""
    for at, mask in ((start + 2, 0x10), (start + 5, 0x01), (start + 8, 0xFF), ((start + end) // 2, 0xFF),
                     (end - 4, 0x80), (end - 1, 0x01)):  # fmt: skip
        damaged = bytearray(data)
        damaged[at] ^= mask
        yield f"flip {at - start} of {end - start}", bytes(damaged)
    for cut in (start, (start + end) // 2, end - 1):
        yield f"cut at {cut - start} of {end - start}", data[:cut]


@pytest.mark.parametrize(
    ("rate", "channels", "samples"),
    [
        (44100, 2, 1000),  # one frame
        (16000, 1, 4096 + 5),  # two frames, the last of 5 samples
        (48000, 2, 3 * 4096),  # three full frames
        (8000, 1, 8000 * 3 + 17),  # 6 frames
        (22050, 2, 22050 * 4 + 1),  # 22 frames
        (44100, 2, 44100 * 10 + 3),  # 108 frames
    ],
)
def test_flac_damage_at_every_frame_position_is_the_decoders_count_or_declined(rate, channels, samples, flac_passes):
    """Damage (``_frame_damage``) to the first frames, one in the middle and the last four: wherever it is, the walk
    gives exactly the samples PyAV's decoder yields from the damaged file, or declines (the PyAV path decides).
    FFmpeg's parser reads frames' CRC-16s all through the file (not only in its end-of-stream window) and its
    decoder fails on damaged coded data anywhere, so no frame's CRC-16 can go unread."""
    data = encode_audio("flac", samples=samples, sample_rate=rate, channels=channels, seed=samples)
    assert flac_samples(data) is not None
    frames = _flac_frames(data)
    count = len(frames)
    positions = sorted({0, 1, 2, count // 2, count - 4, count - 3, count - 2, count - 1} & set(range(count)))
    wrong = []
    for k in positions:
        for damage, damaged in _frame_damage(data, *frames[k]):
            got = flac_samples(damaged)
            if got is not None and (got.samples, got.sample_rate) != decoded(damaged):
                wrong.append((k, damage, got.samples, decoded(damaged)))
    assert not wrong, wrong


def test_flac_a_damaged_frame_early_in_a_long_file_loses_samples_in_ffmpeg(flac_passes):
    """Why the walk reads every frame's CRC-16, not only the last few frames': one byte flipped in frame 2 of 192
    (20 s at 44.1 kHz) makes FFmpeg's parser and decoder hand out a frame less, so the walk must decline there."""
    data = encode_audio("flac", samples=44100 * 20 + 3, sample_rate=44100, channels=2, seed=5)
    start, end = _flac_frames(data)[2]
    damaged = bytearray(data)
    damaged[int(start + 16 + (end - start - 18) * 0.3)] ^= 0xFF
    assert decoded(bytes(damaged)) == (44100 * 20 + 3 - 4608, 44100)
    assert flac_samples(bytes(damaged)) is None


_BLOCK = flac_walk._SCAN


@pytest.mark.parametrize("size", [0, 1, 2, 3, _BLOCK - 1, _BLOCK, _BLOCK + 1, 3 * _BLOCK + 7])
def test_flac_sync_search_finds_every_frame_sync_a_regex_finds(size):
    """The sync search (a block at a time, numpy compares and a memchr walk) finds exactly the offsets where
    ``re`` finds 0xFF then 0xF8 or 0xF9, in random bytes with syncs planted densely, across every block boundary
    (a sync's two bytes split between blocks, a sync in the last byte pair) and from any start offset."""
    rng = random.Random(size)
    data = bytearray(rng.randbytes(size))
    planted = [*range(0, size - 1, 997), *(edge - 1 for edge in range(_BLOCK, size, _BLOCK))]
    for at in [*planted, size - 2]:
        if 0 <= at < size - 1:
            data[at : at + 2] = bytes([0xFF, 0xF8 | rng.getrandbits(1)])
    data = bytes(data)
    for start in (0, 1, size // 2):
        expected = [match.start() for match in re.finditer(rb"\xff[\xf8\xf9]", data[start:])]
        assert flac_walk._syncs(data, start).tolist() == [start + at for at in expected]


@pytest.mark.parametrize(
    ("body", "dense"),
    [(b"\xff\xf8" * 200_000, True), (b"\xff\xf9\x00" * 150_000, True), (None, False)],
    ids=["a-sync-every-two-bytes", "every-three-bytes", "a-valid-header-every-16-bytes"],
)
def test_flac_hostile_syncs_are_declined_and_counted_by_the_pyav_path(body, dense, flac_passes):
    """A hostile .flac whose body is frame syncs (more than frames of ``FLAC_MIN_FRAME_SIZE`` bytes could start:
    the sync search gives up before reading them all) or one valid frame header over and over (every candidate
    read, none a chain): the walk declines, and the probe's answer is the PyAV path's, the decoder's count or a
    recorded drop, never a crash."""
    good = encode_audio("flac", samples=44100, sample_rate=44100, channels=2)
    start = flac_walk.streaminfo(good).start  # frame 0
    data = good[:start] + (body if body is not None else good[start : start + 16] * 30_000)
    assert (flac_walk._syncs(data, start) is None) == dense
    assert (flac_walk._scan(data, start) is None) == dense
    assert flac_samples(data) is None
    got = probed(data, part="hostile.flac")
    if isinstance(got, DropError):
        assert got.reason in (Reason.CORRUPT_MEDIA, Reason.TRUNCATED_MEDIA)
    else:
        assert (got.samples, got.sample_rate) == decoded(data)


_CRC8 = flac_walk._crc8_table().tolist()  # a FLAC frame header's CRC-8, byte by byte: crc = _CRC8[crc ^ byte]


def _crc8(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc = _CRC8[crc ^ byte]
    return crc


def _random_header(rng: random.Random) -> bytes:
    """A frame header written from random fields (RFC 9639 9.1) and sealed with its CRC-8: every block size and rate
    code with the bytes they add, every channel and sample size code, frame numbers of 1 to 7 bytes; now and then
    the reserved bit set, a broken continuation byte or a wrong CRC-8."""
    block_code, rate_code = rng.randrange(16), rng.randrange(16)
    head = bytearray([0xFF, 0xF8 | rng.getrandbits(1), block_code << 4 | rate_code,
                      rng.randrange(16) << 4 | rng.randrange(8) << 1 | (rng.random() < 0.05)])  # fmt: skip
    width = rng.randrange(1, 8)
    bits = (0, 7, 5, 4, 3, 2, 1, 0)[width]
    head.append((0x00, 0x00, 0xC0, 0xE0, 0xF0, 0xF8, 0xFC, 0xFE)[width] | rng.getrandbits(bits))
    for _ in range(width - 1):
        head.append(0x80 | rng.getrandbits(6) if rng.random() > 0.05 else rng.randrange(256))
    head += rng.randbytes({6: 1, 7: 2}.get(block_code, 0) + {12: 1, 13: 2, 14: 2}.get(rate_code, 0))
    head.append(_crc8(head) ^ (rng.random() < 0.05))
    return bytes(head)


def _planted_files(seed: int, count: int):
    """Random bytes of 0-4,000 (any start offset) with frame headers planted: real headers of a FLAC clip whole or
    with one byte changed, headers written from random fields (``_random_header``), any of them cut by the file's
    end, and bare 0xFF 0xF8 / 0xF9 / 0xFF pairs."""
    rng = random.Random(seed)
    clip = encode_audio("flac", samples=44100 * 3, sample_rate=44100, channels=2)
    headers = [clip[at : at + 16] for at in flac_walk._headers(clip, flac_walk._syncs(clip, 0))[0]]
    for _ in range(count):
        size = rng.randrange(4000)
        data = bytearray(rng.randbytes(size))
        for _ in range(rng.randrange(40) if size > 1 else 0):
            at, kind = rng.randrange(size - 1), rng.randrange(4)
            if kind < 3:
                header = bytearray(rng.choice(headers) if kind < 2 else _random_header(rng))
                if kind == 1:
                    header[rng.randrange(2, 16)] = rng.randrange(256)
                data[at : at + len(header)] = header[: size - at]
            else:
                data[at : at + 2] = bytes([0xFF, rng.choice([0xF8, 0xF9, 0xFF])])
        yield bytes(data[:size]), rng.randrange(max(size, 1))


def test_flac_compiled_candidates_are_numpys():
    """``_flac_scan.candidates`` (memchr for the syncs, each header decoded in C) reads exactly the candidates numpy's
    ``_numpy_scan`` (``_headers(_syncs(...))``) reads (offsets, frame numbers, block sizes, rate / bits / channels / blocking): in
    2,000 random files with real, altered, random-field and cut headers planted, for every value of every byte of a real header
    (whole, and cut right after that byte), and in whole clips of 10 s and a minute; and declines (None) the same
    hostile density."""
    if flac_walk._flac_scan is None:
        pytest.skip("vlmpack_offline.media._flac_scan was not built (no C compiler at install)")

    def same(data: bytes, start: int):
        """The compiled candidates, where numpy's are the same (AssertionError otherwise)."""
        compiled, numpy = flac_walk._scan(data, start), flac_walk._numpy_scan(data, start)
        if compiled is None or numpy is None:
            assert compiled is None and numpy is None, (data, start)
        else:
            assert all(a.tolist() == b.tolist() for a, b in zip(compiled, numpy, strict=True)), (data, start)
        return compiled

    decoded_headers = 0
    for data, start in _planted_files(seed=7, count=2000):
        found = same(data, start)
        decoded_headers += 0 if found is None else len(found[0])
    assert decoded_headers > 5000  # the planted headers are read, not only refused
    clip = encode_audio("flac", samples=44100 * 3, sample_rate=44100, channels=2)
    header = clip[flac_walk.streaminfo(clip).start :][:16]
    for position in range(2, 16):
        for value in range(256):
            altered = bytearray(header)
            altered[position] = value
            same(bytes(5) + altered + bytes(3), 0)
            same(bytes(5) + altered[: position + 1], 0)
    for seconds in (10, 60):
        data = encode_audio("flac", samples=44100 * seconds, sample_rate=44100, channels=2)
        assert same(data, flac_walk.streaminfo(data).start) is not None
    assert same(b"\xff\xf8" * 10_000, 0) is None


def test_flac_compiled_crc16s_are_ctypes_av_crc(monkeypatch):
    """``_flac_scan.crc_spans`` (every span in one call of libavutil's ``av_crc``) gives each span's value as the
    ctypes call per span does, empty spans and the whole file included, and refuses a span outside the data."""
    if flac_walk._flac_scan is None:
        pytest.skip("vlmpack_offline.media._flac_scan was not built (no C compiler at install)")
    data = encode_audio("flac", samples=44100 * 2, sample_rate=44100, channels=2)
    rng = random.Random(3)
    starts = np.array([rng.randrange(len(data)) for _ in range(500)] + [0, 0, len(data)], dtype=np.int64)
    ends = np.array([min(len(data), s + rng.randrange(20_000)) for s in starts[:500]] + [len(data), 0, len(data)])
    monkeypatch.setattr(flac_walk, "_CRC", None)
    compiled = flac_walk._crc16()(data)
    monkeypatch.setattr(flac_walk, "_CRC", None)
    monkeypatch.setattr(flac_walk, "_flac_scan", None)
    per_span = flac_walk._crc16()(data)
    values = compiled(starts, ends)
    assert values.tolist() == per_span(starts, ends).tolist()
    assert values.any() and not values[-1]
    with pytest.raises(ValueError, match="outside the data"):
        compiled(np.array([0]), np.array([len(data) + 1]))
