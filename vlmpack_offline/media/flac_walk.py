"""FLAC in its own container: the decoded length proven from the file's frame headers and CRCs, without PyAV.

What FFmpeg does with a ``.flac`` file (libavformat/flacdec.c, libavcodec/flac_parser.c, flac.c, flacdec.c; the
parser as read in recent FFmpeg trees: its own ``FifoBuffer``, ``FLAC_MAX_SEQUENTIAL_HEADERS`` 4, the subframe
check and ``check_crc``. The libavcodec 62.28 / FFmpeg 8.1.2 PyAV bundles behaves as it does, not as the older
parser without ``check_crc``, where damaged coded data changes no packet unless it makes or breaks a candidate):

- the demuxer reads the metadata blocks after ``fLaC`` (STREAMINFO first: rate, channels, bits, total samples,
  which becomes the stream's duration) and hands every byte after the last block to FFmpeg's FLAC parser;
- the parser finds *candidate headers* (``find_headers_search``, ``find_headers_search_validate``): every offset
  where the bytes read 0xFFF8 or 0xFFF9 and ``frame_header_is_valid`` accepts the bytes from there:
  ``ff_flac_decode_frame_header`` (flac.c: a channel mode below 11, a sample size code other than 3, the reserved
  bit clear, a well-formed UTF-8 frame number, a block size code other than 0, a rate code other than 15, the
  header's CRC-8), then the first subframe's zero bit and a subframe type that is not reserved;
- ``score_header`` scores each candidate 10 (less ``check_header_fi_mismatch`` against the last header handed
  out) plus its best child among the next ``FLAC_MAX_SEQUENTIAL_HEADERS`` (4) candidates, less that link's
  penalty (``check_header_mismatch``): 7 or 10 per field that differs (rate, sample size, channels, blocking
  strategy), 7 for a frame number that does not follow, and 50 where the link's CRC-16 fails. The CRC-16 is
  computed on a penalised link (unless the number gap is the one the frames between explain) and, since the
  ``check_crc`` rule, on every clean link too, except a link out of the header right after the last one handed
  out. Links are scored as their child arrives, about ``FLAC_MIN_HEADERS`` (10) headers ahead of the output, so
  nearly every frame's CRC-16 is read mid-stream, not only at the end; ``flac_parse`` hands out a header's bytes
  up to its best child (the last header: to the end of the file) and, at the end of the stream, the best-scoring
  header left each time;
- the decoder (flacdec.c ``flac_decode_frame``) turns a packet into one frame of the header's block size. It
  enforces the CRC-16 only under ``err_detect`` (off by default), so a damaged frame handed out as its own packet
  keeps its samples unless its coded data cannot be decoded at all; an intact CRC-16 is what proves a frame
  decodes as the encoder wrote it.

A damaged frame therefore changes the count anywhere in the file, not only in the parser's end-of-stream window
(measured: one byte flipped in frame 2, 21, 91, ... of a 192-frame file changes PyAV's packets and loses 4608
samples; in frame 5 it changes nothing): every frame's CRC-16 is read. Where the candidates are frames 0, 1, ...,
n-1 from the first byte after the metadata (fixed block size, one rate, sample size and channel count, agreeing with
STREAMINFO and summing to its total), each frame's bytes up to the next one (the last: up to the end of the file)
end with their own CRC-16 (every link between frames then costs 0, checked or not), and every other candidate is one
the scoring provably discards (``_outscored``), the decoder hands out exactly STREAMINFO's total. ``flac_samples``
finds every 0xFFF8/9 offset (``_syncs``), reads all candidates at once (``_headers``; it does not read the subframe
byte, so it keeps a superset of FFmpeg's candidates, which only ever makes it decline more) and checks the CRC-16s
with FFmpeg's own ``av_crc`` (``_crc16``). Those are two passes over every byte, more than the scan's budget for a
clip in numpy's compares and one ctypes call per frame, so the install compiles them (``_flac_scan.c``: memchr for
the syncs, each header decoded as ``_candidates`` does, every CRC-16 in one call); where it could not, the numpy
and ctypes passes run, with the same answers. Anything else (a damaged frame or header, a
candidate it cannot rule out, variable block size, fewer samples than the total, metadata it does not read, an ID3
tag before ``fLaC``, no libavutil found) returns None: ``audio.py``'s PyAV path (the parser itself over every
packet, the last frames decoded after a seek) decides, as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat

import numpy as np

from . import av_libs

try:  # the two passes over every byte, compiled (_flac_scan.c); where it was not built, numpy and ctypes do them
    from . import _flac_scan
except ImportError:
    _flac_scan = None

__all__ = ["FlacStream", "StreamInfo", "flac_samples", "streaminfo"]

_HEADER = 16  # MAX_FRAME_HEADER_SIZE: the bytes flac_parser.c hands ff_flac_decode_frame_header (zeros past EOF)
_SEQUENTIAL = 4  # FLAC_MAX_SEQUENTIAL_HEADERS: the candidates after a header that score_header takes as its children
_SCAN = 1 << 18  # bytes compared per block by the sync scan: a block and its flags stay in L2
_DENSEST = 8  # bytes per sync below which the walk declines (a frame is at least _MIN_FRAME bytes: no FLAC is denser)
_CANDIDATES = 1 << 16  # candidate headers read at once (``_headers``): its temporaries stay a few MiB
_MIN_FRAME = 10  # FLAC_MIN_FRAME_SIZE: a smaller packet decodes to nothing (flacdec.c)
_METADATA_KNOWN = frozenset({0, 1, 2, 3, 4})  # STREAMINFO, PADDING, APPLICATION, SEEKTABLE, VORBIS_COMMENT
# flac.c / flacdata.c tables, indexed by the header's codes
_BLOCK_SIZES = np.array([0, 192, 576, 1152, 2304, 4608, 0, 0, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768])
_RATES = np.array([0, 88200, 176400, 192000, 8000, 16000, 22050, 24000, 32000, 44100, 48000, 96000, 0, 0, 0, 0])
_SAMPLE_BITS = np.array([0, 8, 12, 0, 16, 20, 24, 32])  # code 3 is refused; 7 (32 bits) by older FFmpegs only
# UTF-8-style frame number: its width from the first byte (0: a byte GET_UTF8 refuses) and that byte's value bits
_UTF8_WIDTH = np.array([1] * 128 + [0] * 64 + [2] * 32 + [3] * 16 + [4] * 8 + [5] * 4 + [6] * 2 + [0] * 2)
_UTF8_MASK = np.array([0, 0x7F, 0x1F, 0x0F, 0x07, 0x03, 0x01])


def _crc8_table() -> np.ndarray:
    """AV_CRC_8_ATM (polynomial 0x07, MSB first, initial value 0): the frame header's CRC-8."""
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
        table.append(crc)
    return np.array(table, dtype=np.uint8)


def _crc8_at(table: np.ndarray) -> np.ndarray:
    """``[j, b]``: the CRC-8 of byte b followed by j zero bytes. The CRC is linear (initial value 0), so a header's
    CRC-8 is the XOR of ``[distance to its last byte, byte]`` over its bytes: one table look-up per byte, all
    candidates and bytes at once."""
    rows = [table]
    for _ in range(_HEADER - 1):
        rows.append(table[rows[-1]])
    return np.stack(rows)


_CRC8_AT = _crc8_at(_crc8_table())


def _syncs(data: bytes, start: int) -> np.ndarray | None:
    """Every offset from ``start`` where the bytes read 0xFFF8 or 0xFFF9 (a frame header's 15 sync bits and its
    blocking strategy bit): where flac_parser.c's ``find_headers_search`` calls ``find_headers_search_validate``.
    A block at a time (it stays in cache; no file-sized temporary to fault in), both bytes compared in numpy into a
    flag buffer that ``bytearray.find`` (memchr) walks: a sync is about one byte pair in 30,000 in coded audio, so
    the walk costs less than ``np.flatnonzero``'s pass over every flag. None past one sync in ``_DENSEST`` bytes
    (no audio reads so; a hostile file's millions of candidates would cost the walk time and memory): declined."""
    buffer = np.frombuffer(data, dtype=np.uint8)
    last = len(buffer) - 1  # the pair's first byte
    densest = len(buffer) // _DENSEST + 1
    flags = bytearray(min(_SCAN, max(last - start, 0)))
    hit, second = np.frombuffer(flags, dtype=bool), np.empty(len(flags), dtype=np.uint8)
    found, count = [np.zeros(0, dtype=np.int64)], 0
    for at in range(start, last, _SCAN):
        size = min(_SCAN, last - at)
        np.equal(buffer[at : at + size], 0xFF, out=hit[:size])
        np.bitwise_or(buffer[at + 1 : at + 1 + size], 1, out=second[:size])
        hit[:size] &= second[:size] == 0xF9
        block, offset = [], flags.find(1, 0, size)
        while offset >= 0:
            block.append(offset)
            offset = flags.find(1, offset + 1, size)
        if block:
            count += len(block)
            if count > densest:
                return None
            found.append(np.array(block, dtype=np.int64) + at)
    return np.concatenate(found)


@dataclass(frozen=True, slots=True, kw_only=True)
class FlacStream:
    samples: int  # STREAMINFO's total, proven to be what the decoder hands out
    sample_rate: int  # STREAMINFO's rate in Hz
    channels: int  # STREAMINFO's channels


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamInfo:
    start: int  # the first byte after the metadata blocks: where the parser starts
    min_block: int
    max_block: int
    rate: int
    channels: int
    bits: int
    total: int


def flac_samples(data: bytes) -> FlacStream | None:
    """The decoded length of a plain ``.flac`` file where its headers and CRCs prove it (module doc), else None."""
    info = streaminfo(data)
    if info is None or info.total <= 0 or not 0 < info.rate <= 655350 or not 16 <= info.min_block <= info.max_block \
            or info.bits < 4:  # what FFmpeg's flac_probe and ff_flac_parse_streaminfo accept  # fmt: skip
        return None
    crc = _crc16()
    if crc is None:
        return None
    data = data if isinstance(data, bytes) else bytes(data)  # the CRC reads the bytes object's own buffer
    found = _scan(data, info.start)
    if found is None:
        return None
    offsets, numbers, blocks, strategy = found
    if not len(offsets) or offsets[0] != info.start:
        return None
    first = strategy[0]
    if first[0] or int(first[1]) not in (0, info.rate) or int(first[2]) not in (0, info.bits) or first[2] == 32 \
            or first[3] != info.channels:  # fmt: skip
        return None
    chain = np.all(strategy == first, axis=1)  # the candidates that agree with frame 0
    offsets, numbers, blocks, others = offsets[chain], numbers[chain], blocks[chain], offsets[~chain]
    count = len(offsets)
    if not np.array_equal(numbers, np.arange(count)):
        return None
    block, last = int(blocks[0]), int(blocks[-1])
    if (np.any(blocks[:-1] != block) or last > block or block > info.max_block
            or (count - 1) * block + last != info.total):  # fmt: skip
        return None
    ends = np.append(offsets[1:], len(data))
    if np.any(ends - offsets < _MIN_FRAME) or not _outscored(offsets, others):
        return None
    spans = crc(data)
    if spans(offsets, ends).any():
        return None  # a damaged frame: the parser drops it or merges it (its samples lost)
    if len(others):  # a link over a penalised candidate is CRC-checked on one side of it, "inverted": penalised
        inside = np.searchsorted(offsets, others) - 1  # when that side checks out (check_header_mismatch)
        if not spans(offsets[inside], others).all() or not spans(others, ends[inside]).all():
            return None
    return FlacStream(samples=info.total, sample_rate=info.rate, channels=info.channels)


def _scan(data: bytes, start: int):
    """(offsets, numbers, blocks, strategy) of every candidate header from ``start``, None where the syncs are too
    dense (``_syncs``). Where ``_flac_scan`` was built, one compiled pass (memchr for 0xFF, then each header decoded
    as ``_candidates`` does); else ``_numpy_scan``."""
    if _flac_scan is None:
        return _numpy_scan(data, start)
    found = _flac_scan.candidates(data, start, len(data) // _DENSEST + 1)
    if found is None:
        return None
    rows = np.frombuffer(found, dtype=np.int64).reshape(-1, 7)  # offset, number, block, then the strategy's 4
    return rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3:]


def _numpy_scan(data: bytes, start: int):
    """``_scan`` in numpy: ``_headers`` of ``_syncs``, a few passes over every byte."""
    syncs = _syncs(data, start)
    return None if syncs is None else _headers(data, syncs)


def _outscored(frames: np.ndarray, others: np.ndarray) -> bool:
    """Whether the parser's scoring (flac_parser.c ``score_header``) picks the frames' chain over every other candidate
    ``others`` (valid headers inside a frame that differ from the frames in rate, sample size, channels or blocking
    strategy). It does when each lies before the last frame and any two have at least 4 frame headers
    (``FLAC_MAX_SEQUENTIAL_HEADERS``: no such candidate is another's child) between them, as follows. Along the
    chain every link costs 0 (same fields, next number, the frame's CRC-16 checks out), so a frame header scores at
    least 10 more than the next one, and at least 10. A candidate F inside frame k scores at most 10 (its base,
    lowered by a difference from the last header handed out) plus its best child's score less 7 (each of its
    children, within the next 4 headers, is a frame header it differs from: ``check_header_fi_mismatch``'s penalty,
    7 or 10, before any CRC-16 check), so at most max(10, S(k+1) + 3); reached from a frame header it costs at least
    7 again, at most max(3, S(k+1) - 4): below the next frame header's S(k+1) >= 10, which is therefore the best
    child of every frame header (and frame 0 the first header handed out). A candidate in the last frame has no
    frame header after it to lose to: declined."""
    if not len(others):
        return True
    inside = np.searchsorted(frames, others)  # frame headers before each candidate: it lies in frame inside - 1
    return bool(inside.max() < len(frames) and np.all(np.diff(inside) >= _SEQUENTIAL))


def streaminfo(data: bytes) -> StreamInfo | None:
    """``fLaC`` at byte 0, then metadata blocks (RFC 9639 8.1: last-block flag, type (7 bits), size (24 bits)),
    STREAMINFO first and of 34 bytes, every block inside the file and of a type read here; None otherwise."""
    if data[:4] != b"fLaC":
        return None
    pos, raw, last = 4, b"", False
    while not last:
        if pos + 4 > len(data):
            return None
        last, kind, size = bool(data[pos] & 0x80), data[pos] & 0x7F, int.from_bytes(data[pos + 1 : pos + 4], "big")
        if kind not in _METADATA_KNOWN or (kind == 0) != (not raw) or pos + 4 + size > len(data):
            return None
        if kind == 0:
            if size != 34:
                return None
            raw = bytes(data[pos + 4 : pos + 38])
        pos += 4 + size
    fields = int.from_bytes(raw[10:18], "big")  # rate (20 bits), channels - 1 (3), bits - 1 (5), total (36)
    return StreamInfo(start=pos, min_block=int.from_bytes(raw[0:2], "big"), max_block=int.from_bytes(raw[2:4], "big"),
                       rate=fields >> 44, channels=((fields >> 41) & 7) + 1, bits=((fields >> 36) & 31) + 1,
                       total=fields & ((1 << 36) - 1))  # fmt: skip


def _headers(data: bytes, at: np.ndarray):
    """``_candidates`` over ``_CANDIDATES`` syncs at a time: memory bounded however dense the syncs."""
    if len(at) <= _CANDIDATES:
        return _candidates(data, at)
    parts = [_candidates(data, at[i : i + _CANDIDATES]) for i in range(0, len(at), _CANDIDATES)]
    return tuple(np.concatenate(column) for column in zip(*parts, strict=True))


def _candidates(data: bytes, at: np.ndarray):
    """The candidates at offsets ``at`` that ``ff_flac_decode_frame_header`` accepts: their offsets, frame (or
    sample) numbers, block sizes, and what the parser compares between headers (``check_header_fi_mismatch``):
    [variable-block-size bit, rate, sample bits, channels] per row (rate and bits 0: "from STREAMINFO"). Each candidate's
    16 bytes are read at once (zeros past the end, as the parser pads the file's end); the fixed fields of bytes 2-4
    are checked first with one table look-up (``_FIXED_OK``: most 0xFFF8/9 pairs in coded audio fail there), then
    every other field and the CRC-8 over the header's variable length for the rest, all candidates together."""
    size = len(data)
    if not len(at):
        return at, at, at, np.zeros((0, 4), dtype=np.int64)
    index = at[:, None] + np.arange(_HEADER)
    head = np.frombuffer(data, dtype=np.uint8).take(index, mode="clip").astype(np.int64)
    if at[-1] > size - _HEADER:
        head[index >= size] = 0
    keep = np.flatnonzero(_FIXED_OK[head[:, 2], head[:, 3]] & (_UTF8_WIDTH[head[:, 4]] > 0))
    at, head = at[keep], head[keep]
    block_code, rate_code, bits_code = head[:, 2] >> 4, head[:, 2] & 15, (head[:, 3] >> 1) & 7
    width = _UTF8_WIDTH[head[:, 4]]
    number, valid = head[:, 4] & _UTF8_MASK[width], np.ones(len(at), dtype=bool)
    for k in range(1, int(width.max(initial=1))):  # continuation bytes: only as many passes as the widest number
        more, byte = k < width, head[:, 4 + k]
        valid &= ~more | (byte & 0xC0 == 0x80)
        number = np.where(more, (number << 6) | (byte & 0x3F), number)
    rows = np.arange(len(at))
    end = 4 + width  # the byte after the frame number
    at_end = np.minimum(end, _HEADER - 2)
    after, after2 = head[rows, at_end], head[rows, at_end] << 8 | head[rows, at_end + 1]
    block = np.where(block_code == 6, after + 1, np.where(block_code == 7, after2 + 1, _BLOCK_SIZES[block_code]))
    end = end + (block_code == 6) + 2 * (block_code == 7)
    at_end = np.minimum(end, _HEADER - 2)
    after, after2 = head[rows, at_end], head[rows, at_end] << 8 | head[rows, at_end + 1]
    rate = np.where(rate_code < 12, _RATES[rate_code], np.where(rate_code == 12, after * 1000, after2))
    rate = np.where(rate_code == 14, after2 * 10, rate)
    end = end + (rate_code == 12) + 2 * (rate_code >= 13)  # the CRC-8 byte
    behind = end[:, None] - np.arange(_HEADER)  # each byte's distance from the CRC-8 byte (< 0: past it)
    terms = _CRC8_AT[np.maximum(behind, 0), head]
    keep = np.flatnonzero(valid & (np.bitwise_xor.reduce(np.where(behind >= 0, terms, 0), axis=1) == 0))
    mode = head[keep, 3] >> 4
    channels = np.where(mode < 8, mode + 1, 2)
    strategy = np.stack([head[keep, 1] & 1, rate[keep], _SAMPLE_BITS[bits_code[keep]], channels], axis=1)
    return at[keep], number[keep], block[keep], strategy


def _fixed_ok() -> np.ndarray:
    """``[byte 2, byte 3]``: whether a header's fixed fields read (flac.c ``ff_flac_decode_frame_header``): a block
    size code other than 0, a rate code other than 15, a channel mode below 11, a sample size code other than 3,
    the reserved bit clear."""
    two, three = np.arange(256)[:, None], np.arange(256)[None, :]
    return (two >> 4 != 0) & (two & 15 != 15) & (three >> 4 < 11) & ((three >> 1) & 7 != 3) & (three & 1 == 0)


_FIXED_OK = _fixed_ok()


def _crc16():
    """FFmpeg's own ``av_crc`` with its AV_CRC_16_ANSI table (polynomial 0x8005: the FLAC frame footer's CRC-16,
    what flac_parser.c and flacdec.c compute), from the libavutil PyAV loaded (``av_libs``), as
    ``crc(data)(starts, ends)``: per span, 0 when ``data[start:end]`` ends with its own CRC-16 (a uint32 array).
    None where that library is not found or is not PyAV's (then the PyAV path counts). Called on the bytes object's
    own buffer, nothing copied: every span in one call of ``_flac_scan`` where it was built, else one ctypes call per
    span."""
    global _CRC
    if _CRC is None:
        _CRC = _load_crc16() or False
    return _CRC or None


_CRC = None


def _load_crc16():
    import ctypes

    if (library := av_libs.library("avutil")) is None:
        return None
    try:
        library.av_crc_get_table.restype = ctypes.c_void_p
        library.av_crc_get_table.argtypes = [ctypes.c_int]
        library.av_crc.restype = ctypes.c_uint32
        library.av_crc.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t]
        table = library.av_crc_get_table(_AV_CRC_16_ANSI)
    except (OSError, AttributeError, TypeError):
        return None
    if not table or library.av_crc(table, 0, ctypes.cast(ctypes.c_char_p(_CHECK), ctypes.c_void_p).value, 9) != _CHECKED:
        return None
    av_crc = library.av_crc
    if _flac_scan is not None:
        crc_spans, address = _flac_scan.crc_spans, ctypes.cast(av_crc, ctypes.c_void_p).value

        def compiled(data: bytes):
            def spans(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
                found = crc_spans(data, np.ascontiguousarray(starts, dtype=np.int64),
                                  np.ascontiguousarray(ends, dtype=np.int64), address, table)  # fmt: skip
                return np.frombuffer(found, dtype=np.uint32)

            return spans

        return compiled

    def crc(data: bytes):
        base = ctypes.cast(ctypes.c_char_p(data), ctypes.c_void_p).value  # the buffer of ``data``, kept alive by it

        def spans(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
            values = map(av_crc, repeat(table), repeat(0), (starts + base).tolist(), (ends - starts).tolist())
            return np.fromiter(values, dtype=np.uint32, count=len(starts))

        return spans

    return crc


_AV_CRC_16_ANSI = 1  # libavutil/crc.h: enum AVCRCId { AV_CRC_8_ATM, AV_CRC_16_ANSI, ... }
_CHECK, _CHECKED = b"123456789", 0xE8FE  # CRC-16/UMTS of the standard check string (0xFEE8), as av_crc stores it
