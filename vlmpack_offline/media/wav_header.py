"""PCM in WAV: the decoded length, rate, channels and codec read from the RIFF chunks, without PyAV.

What FFmpeg does with a ``RIFF....WAVE`` file (libavformat/wavdec.c, riffdec.c, demux.c; libavcodec/pcm.c):

- ``wav_probe`` names it ``wav`` (score 99), unless the ACT demuxer's probe claims it (act.c: score 100 for a
  16-byte ``fmt `` chunk, zeros at bytes 44-255 and 0x84 at 256);
- ``wav_read_header`` walks the chunks from byte 12, each at an even offset (``wav_seek_tag``), to the end of the
  file: the first ``fmt `` goes to ``ff_get_wav_header`` (riffdec.c: format tag, channels, rate, block_align,
  bits; ``cbSize`` and, for WAVE_FORMAT_EXTENSIBLE (0xFFFE), the valid bits and the subformat GUID whose first
  two bytes become the tag; any other ``cbSize`` bytes become extradata), the codec is
  ``ff_wav_codec_get_id(tag, bits)``: tag 1 -> pcm_u8 / s16le / s24le / s32le by whole bytes, tag 3 -> pcm_f32le
  / f64le; ``LIST`` (INFO) and ``bext`` become metadata (PyAV refuses metadata that is not UTF-8: the open fails);
  the last ``data`` chunk is where reading starts, a size of 0 or 0xFFFFFFFF meaning "to the end of the file";
- ``wav_read_packet`` hands out packets of 4096 bytes rounded down to block_align, the last one what is left of
  the chunk; past the chunk's end it looks for another ``data`` chunk (``find_tag``) and reads that too;
- ``set_spdif`` runs ``ff_spdif_probe`` on the first 64 KiB after the data chunk's start when the tag is 1: an
  IEC 61937 burst there turns the stream into AC-3 / DTS / ...; ``handle_stream_probing`` makes a pcm_s16le
  stream ``request_probe`` its first packets (up to 32: demux.c's ``probe_codec``), which the MP3, ADTS, LOAS,
  AC-3 / E-AC-3, DTS and TrueHD probes may claim with a score of 50 or more (an MP3 stored as 16-bit PCM opens
  as mp3);
- the PCM decoder (pcm.c) turns each packet into ``bytes // (channels * bytes per sample)`` samples, and refuses
  a packet smaller than one sample frame.

``wav_samples`` answers only where all of that reduces to ``data bytes // block_align``: RIFF (not RIFX, RF64 or
BW64), a ``fmt `` of 16 bytes, 18 with cbSize 0, or 40 with an EXTENSIBLE PCM / float subformat whose valid bits
are its container bits, 8/16/24/32-bit integer or 32/64-bit float, 1-8 channels, block_align = channels x bytes,
the ``fmt `` before the one ``data`` chunk, every chunk inside the file, data a whole number of sample frames,
``LIST`` and ``bext`` chunks in plain ASCII and as long as wavdec.c reads them (4 and 602 bytes), no ``ID3``,
``XMA2`` or ``SMV0`` chunk, no IEC 61937 / DTS / TrueHD sync word in the probed bytes, and for pcm_s16le none of
the MP3 / ADTS / LOAS / AC-3 sync patterns those probes need (one at the data's first byte, or chains of them in
the probed bytes: ``_reprobed``). Anything else returns None: ``audio.py``'s PyAV path decides, as before.
Probes of other demuxers are not replayed beyond ACT's and IEC 61937's (the spdif demuxer's own probe reads the
same sync from the file's first bytes): ``tests/test_audio_wav.py`` holds the answers to PyAV's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["WavStream", "wav_samples"]

_CODECS = {(1, 8): "pcm_u8", (1, 16): "pcm_s16le", (1, 24): "pcm_s24le", (1, 32): "pcm_s32le",
           (3, 32): "pcm_f32le", (3, 64): "pcm_f64le"}  # fmt: skip  # ff_wav_codec_get_id's PCM rows
# KSDATAFORMAT_SUBTYPE_*: the tag, then riff.h's FF_MEDIASUBTYPE_BASE_GUID
_SUBTYPE_BASE = bytes([0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71])
_REFUSED = frozenset({b"ID3 ", b"id3 ", b"XMA2", b"SMV0"})  # chunks wavdec.c turns into more than metadata
# chunks read into the container's metadata (which PyAV decodes as UTF-8) -> the bytes wavdec.c reads at least
_METADATA = {b"LIST": 4, b"bext": 602}
_PACKET = 4096  # wavdec.c's MAX_SIZE: bytes per packet, rounded down to block_align
# packets probe_codec reads under audio.py's probesize of 4096: demux.c ends it once raw_packet_buffer_size reaches
# the probesize (one packet of 4096 bytes; two where block_align cuts the first short)
_PROBED = 2
_SPDIF_FIRST = 1 << 15  # ff_spdif_probe: its first sync must lie in 2 * SPDIF_MAX_OFFSET bytes, or it scores 0
_SPDIF_SYNC = b"\x72\xf8\x1f\x4e"  # IEC 61937's Pa Pb (spdif.h SYNCWORD1 / 2) as ff_spdif_probe matches them
# syncs that a probe needs only a few times: IEC 61937 in the other byte order, DTS (dca_syncwords.h: 16-bit and
# 14-bit, big- and little-endian), MLP / TrueHD's major sync (0xF8726FBA / BB: its first three bytes); each found
# by bytes' own C search (a regex alternation of them takes 3x as long)
_SYNC4 = (b"\xf8\x72\x4e\x1f", b"\x7f\xfe\x80\x01", b"\xfe\x7f\x01\x80", b"\x1f\xff\xe8\x00", b"\xff\x1f\x00\xe8",
          b"\xf8\x72\x6f")  # fmt: skip
_LINKS = 50  # ADTS and LOAS probes score 50 with more than 100 chained frames, MP3 and AC-3 with more than 200


@dataclass(frozen=True, slots=True, kw_only=True)
class WavStream:
    samples: int  # data bytes // block_align: what FFmpeg's PCM decoder hands out
    sample_rate: int  # the fmt chunk's rate in Hz
    channels: int  # the fmt chunk's channels
    codec: str  # FFmpeg's canonical name: pcm_u8, pcm_s16le, pcm_s24le, pcm_s32le, pcm_f32le or pcm_f64le


def wav_samples(data: bytes) -> WavStream | None:
    """PCM in a RIFF WAVE file as FFmpeg decodes it (module doc), or None where this reading cannot stand for
    FFmpeg's: then the PyAV path decides (and raises ``truncated_media`` for a chunk past the file's end)."""
    size = len(data)
    if size < 44 or data[:4] != b"RIFF" or data[8:12] != b"WAVE" or _act(data):
        return None
    pos, fmt, start, length = 12, None, None, 0
    while pos + 8 <= size:
        kind, chunk = bytes(data[pos : pos + 4]), int.from_bytes(data[pos + 4 : pos + 8], "little")
        if kind in _REFUSED or (kind == b"fmt " and fmt is not None):
            return None
        if kind == b"data":
            if start is not None or fmt is None:
                return None  # a second data chunk (the last one wins, then find_tag reads on) or fmt after data
            start, length = pos + 8, size - pos - 8 if chunk in (0, 0xFFFFFFFF) else chunk
            if chunk in (0, 0xFFFFFFFF):
                break  # "to the end of the file": wav_read_header stops looking
        elif pos + 8 + chunk > size:
            return None  # a chunk past the end: the structure walk judges it
        elif kind == b"fmt ":
            if (fmt := _fmt(data[pos + 8 : pos + 8 + chunk])) is None:
                return None
        elif kind in _METADATA and (chunk < _METADATA[kind] or not data[pos + 8 : pos + 8 + chunk].isascii()):
            return None  # wavdec.c refuses a LIST under 4 bytes; a bext under 602 is read on into what follows
        pos += 8 + chunk + (chunk & 1)
    if fmt is None or start is None or not 0 < length <= size - start:
        return None
    codec, channels, rate, align = fmt
    if length % align or (length & 1 and _finds_data(data, start + length)) or _reprobed(data, start, align, codec):
        return None  # a partial frame the decoder refuses; an odd chunk's pad byte read as a chunk header
    return WavStream(samples=length // align, sample_rate=rate, channels=channels, codec=codec)


def _finds_data(data: bytes, pos: int) -> bool:
    """Whether wavdec.c's ``find_tag``, run from ``pos`` (the data chunk's end: after an odd chunk, its pad byte),
    meets another ``data`` tag, whose bytes ``wav_read_packet`` would read on. Each tag it skips moves it by the
    size it reads, rounded up to even (``wav_seek_tag``); a size cut by the end of the file reads as zeros."""
    while pos + 4 <= len(data):
        if data[pos : pos + 4] == b"data":
            return True
        chunk = int.from_bytes(data[pos + 4 : pos + 8].ljust(4, b"\0"), "little")
        pos += 8 + chunk + (chunk & 1)
    return False


def _fmt(chunk: bytes) -> tuple[str, int, int, int] | None:
    """(codec, channels, rate, block_align) of a ``fmt `` chunk ``ff_get_wav_header`` reads as plain PCM or float
    with no extradata; None for any other."""
    if len(chunk) not in (16, 18, 40):
        return None
    tag, channels, rate, _, align, bits = (int.from_bytes(chunk[at : at + width], "little")
                                           for at, width in ((0, 2), (2, 2), (4, 4), (8, 4), (12, 2), (14, 2)))  # fmt: skip
    extra = int.from_bytes(chunk[16:18], "little") if len(chunk) >= 18 else 0
    if tag == 0xFFFE:  # WAVE_FORMAT_EXTENSIBLE: cbSize 22, valid bits, channel mask, subformat GUID
        valid, guid = int.from_bytes(chunk[18:20], "little"), chunk[24:40]
        if len(chunk) != 40 or extra != 22 or valid != bits or guid[4:] != _SUBTYPE_BASE:
            return None
        tag = int.from_bytes(guid[:4], "little")
    elif extra or len(chunk) == 40:
        return None  # extradata: wav_read_header reads some of it (pcm_s32le with extradata 1 is pcm_f16le)
    codec = _CODECS.get((tag, bits))
    if codec is None or not 1 <= channels <= 8 or not 1 <= rate <= 768000 or align != channels * bits // 8:
        return None
    return codec, channels, rate, align


def _act(data: bytes) -> bool:
    """ACT's probe (act.c) outscores wav_probe on these bytes: a 16-byte fmt, zeros from 44 to 256, then 0x84."""
    return (len(data) >= 512 and data[16:20] == b"\x10\0\0\0" and data[256] == 0x84
            and not any(data[44:256]))  # fmt: skip


def _reprobed(data: bytes, start: int, align: int, codec: str) -> bool:
    """Whether FFmpeg's probes might read the data as another codec. For every PCM codec: an IEC 61937 sync in the
    file's bytes up to 32 KiB into the data (``set_spdif``; the spdif demuxer's probe). For pcm_s16le (the one PCM
    codec ``handle_stream_probing`` sends to ``probe_codec``, where a probe must score 50 to change the codec), in
    the first two packets: a DTS or TrueHD sync, a frame sync at the data's first byte (MP3 / ADTS 0xFFE, LOAS 0x56E0, AC-3 0x0B77 either way; for MP3 after leading
    zeros, or an ID3 tag: the probes' ``first_frames`` path), or ``_LINKS`` syncs whose frame length (from their
    own header) lands on another sync, or as many AC-3 syncs: the ``max_frames`` paths need a chain of more than
    100 frames (ADTS, LOAS) or 200 (MP3, AC-3)."""
    if data.find(_SPDIF_SYNC, 0, start + _SPDIF_FIRST + 8) >= 0:
        return True
    if codec != "pcm_s16le":
        return False
    window = data[start : start + _PROBED * max(_PACKET // align * align, align) + 8]
    if any(sync in window for sync in _SYNC4):
        return True
    head = window.lstrip(b"\0")[:3]
    if _sync2(window[:2]) or _sync2(head[:2]) or head == b"ID3":
        return True
    if window.count(b"\x0b\x77") + window.count(b"\x77\x0b") >= _LINKS:
        return True
    raw = np.frombuffer(window, dtype=np.uint8)
    at = np.flatnonzero(raw[1:-4] >= 0xE0)  # second bytes of an 11-bit sync; the header's 4 bytes inside
    at = at[(raw[at] == 0xFF) | (raw[at] == 0x56)]
    if len(at) < _LINKS:
        return False
    b1, b2, b3, b4, b5 = (raw[at + k].astype(np.int64) for k in range(1, 6))  # inside: at < len(raw) - 5
    mpeg, loas = raw[at] == 0xFF, raw[at] == 0x56
    starts = np.zeros(len(raw) + 8192 + 3, dtype=bool)
    starts[at] = True
    adts = mpeg & ((b1 & 0xF6) == 0xF0)
    lengths = np.where(loas, (((b1 & 0x1F) << 8) | b2) + 3, ((b3 & 3) << 11) | (b4 << 3) | (b5 >> 5))
    links = np.count_nonzero(starts[at + lengths] & (adts | loas) & (lengths >= 7))
    header = (b1 << 16) | (b2 << 8) | b3
    size = _mp3_frame_size(header)
    links += np.count_nonzero(mpeg & ((size == 0) | starts[at + np.maximum(size, 0)]) & (size >= 0))
    return links >= _LINKS


def _mp3_frame_size(header: np.ndarray) -> np.ndarray:
    """Frame bytes of MPEG audio headers (their last 3 bytes, after 0xFF), as ``avpriv_mpegaudio_decode_header``
    (mpegaudiodecheader.c) computes them: 0 for free format, -1 where ``ff_mpa_check_header`` refuses it."""
    lsf = np.where(header & (1 << 20), np.where(header & (1 << 19), 0, 1), 1)
    mpeg25 = np.where(header & (1 << 20), 0, 1)
    layer = 4 - ((header >> 17) & 3)
    index, rate_code, padding = (header >> 12) & 15, (header >> 10) & 3, (header >> 9) & 1
    bad = (layer == 4) | (index == 15) | (rate_code == 3)
    rate = _MPA_RATES[np.minimum(rate_code, 2)] >> (lsf + mpeg25)
    kbps = _MPA_BITRATES[lsf, np.clip(layer - 1, 0, 2), np.minimum(index, 14)]
    size = np.where(layer == 1, (kbps * 12000 // rate + padding) * 4,
                    np.where(layer == 2, kbps * 144000 // rate, kbps * 144000 // (rate << lsf)) + padding)  # fmt: skip
    return np.where(bad, -1, np.where(index == 0, 0, size))


_MPA_RATES = np.array([44100, 48000, 32000])  # ff_mpa_freq_tab
_MPA_BITRATES = np.array([  # ff_mpa_bitrate_tab[lsf][layer - 1][index], kbit/s
    [[0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448],
     [0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384],
     [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320]],
    [[0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256],
     [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160],
     [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160]],
])  # fmt: skip


def _sync2(pair: bytes) -> bool:
    return len(pair) == 2 and (pair[0] in (0xFF, 0x56) and pair[1] >= 0xE0 or pair in (b"\x0b\x77", b"\x77\x0b"))
