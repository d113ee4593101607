"""AAC-LC and ALAC in a plain MP4 / M4A: the packets FFmpeg's mov demuxer hands out, read off the boxes without PyAV.

What FFmpeg does with such a file (libavformat/mov.c, demux.c; libavcodec/decode.c, aacdec, mpeg4audio.c):

- ``mov_read_trak`` and its children read the sample table: ``stts`` (each sample's duration, so its dts),
  ``stsz`` (sizes), ``stsc`` + ``stco`` / ``co64`` (where each chunk's samples lie), ``mdhd`` (the track's
  timescale), ``elst`` (the edit list, its duration in ``mvhd``'s timescale), ``stsd`` (the codec: ``mp4a`` with an
  ``esds`` whose DecoderSpecificInfo is the AudioSpecificConfig, or ``alac`` with its 36-byte config atom, from
  which ``mov_finalize_stsd_codec`` takes the channels and rate); ``mov_build_index`` makes one index entry per
  sample;
- ``mov_fix_index`` (``advanced_editlist``, on by default) rebuilds the index from the edit list: for an audio
  track it starts at the entry found for ``max(media_time - timescale, first dts)`` (entry 0 when the edit starts
  within a second), flags AVINDEX_DISCARD_FRAME on each entry before ``media_time`` (adding its duration to the
  stream's ``skip_samples``; one straddling ``media_time`` is kept and adds the part before it instead), and stops
  after the first entry whose end (its dts + its duration; the last entry's duration is the edit's) reaches the
  edit's end: later entries are left out. ``get_edit_list_entry`` rescales the edit's duration with
  ``av_rescale`` (rounded to nearest). For AAC, ``mov_read_header`` then sets ``skip_samples`` to that
  ``start_pad``, which an ``iTunSMPB`` tag would override (read after the track: declined here);
- ``read_frame_internal`` (demux.c) puts the pending ``skip_samples`` on the first packet as
  AV_PKT_DATA_SKIP_SAMPLES side data; ``mov_read_packet`` flags a discard entry's packet AV_PKT_FLAG_DISCARD;
- the AAC decoder turns each packet into one 1024-sample frame (AAC-LC, ``frameLengthFlag`` 0), and
  ``discard_samples`` (decode.c) trims them: ``audio._trimmed`` replays it; the ALAC decoder turns each packet
  into its frame's samples, which the PyAV path (``audio._packet_samples``) reads as the packets' durations.

``mp4_audio`` answers only where all of that is plain: top-level boxes inside the file, one ``moov``, no ``moof``
or ``mvex`` (not fragmented), one ``trak`` (a sound track), a self-contained ``dref``, one ``stsd`` entry, no
``ctts`` / ``stss`` / ``stps`` / ``stz2`` / ``iTunSMPB``, sample tables that agree on the sample count with every
sample inside the file, no edit list or one edit entry at rate 1 with ``0 <= media_time <`` the timescale (ALAC:
``media_time`` 0), the config's rate equal to ``mdhd``'s timescale; for AAC an AudioSpecificConfig of object type
2 (LC) at an MPEG-4 rate, mono or stereo, 1024-sample frames, that ends by marking SBR absent (sync extension
0x2B7, SBR flag 0: what FFmpeg's encoder writes), so the decoder cannot switch to HE-AAC on an SBR payload in the
bitstream (implicit signalling: an AudioSpecificConfig without that extension declines); for ALAC a config
alac.c's init takes and frame headers whose sample counts are the stts durations; sample groups only ``roll``;
tags PyAV can open (it refuses metadata that is not UTF-8: ``_tags``; no cover art). Anything else returns
None: ``audio.py``'s PyAV path, the reference, decides as before. ``tests/test_audio_mp4.py`` holds the answers to
PyAV's decoder and to the index PyAV's demuxer builds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["AAC_RATES", "Mp4Audio", "mp4_audio"]

# MPEG-4's sampling frequency index (ISO 14496-3 1.6.3.4): the rates an ADTS header or an AudioSpecificConfig names
AAC_RATES = (96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350)
_REFUSED_STBL = frozenset({b"ctts", b"stss", b"stps", b"stz2", b"cslg", b"saiz", b"saio", b"senc"})
_STSD_CHILDREN = frozenset({b"esds", b"btrt"})  # mp4a children read or harmless; chan / wave / sinf decline


@dataclass(frozen=True, slots=True, kw_only=True)
class Mp4Audio:
    codec: str  # FFmpeg's canonical name: "aac" or "alac"
    sample_rate: int  # the config's rate in Hz (equal to mdhd's timescale)
    channels: int  # the config's channels
    discards: np.ndarray  # per packet the demuxer hands out: flagged AV_PKT_FLAG_DISCARD (the edit list's priming)
    skip: int  # the first packet's AV_PKT_DATA_SKIP_SAMPLES skip (0: no side data)
    durations: int  # the packets' durations summed, in the timescale (ALAC: the samples they decode to)
    claimed: int  # the stream's duration: min(mdhd's, the edit's)


def mp4_audio(data: bytes) -> Mp4Audio | None:
    """The packets of a plain MP4 / M4A's one AAC-LC or ALAC track as FFmpeg's demuxer hands them out (module
    doc), or None where this reading cannot stand for FFmpeg's."""
    try:
        return _read(memoryview(data), len(data))
    except (IndexError, ValueError):  # a field cut by its box's end: not a plain file
        return None


def _boxes(data: memoryview, start: int, end: int) -> list[tuple[bytes, int, int]] | None:
    """(type, payload start, payload end) of the boxes from ``start`` to ``end``; None where one does not fit."""
    out, pos = [], start
    while pos < end:
        if pos + 8 > end:
            return None
        length, kind, header = int.from_bytes(data[pos : pos + 4], "big"), bytes(data[pos + 4 : pos + 8]), 8
        if length == 1:
            if pos + 16 > end:
                return None
            length, header = int.from_bytes(data[pos + 8 : pos + 16], "big"), 16
        elif length == 0:
            length = end - pos
        if length < header or pos + length > end:
            return None
        out.append((kind, pos + header, pos + length))
        pos += length
    return out


def _one(boxes: list[tuple[bytes, int, int]] | None, kind: bytes) -> tuple[int, int] | None:
    """The payload span of the one ``kind`` box among ``boxes``; None when there is none or several."""
    found = [(start, end) for name, start, end in boxes or () if name == kind]
    return found[0] if len(found) == 1 else None


def _text(data: memoryview, span: tuple[int, int] | None) -> bool:
    """The span holds only ASCII bytes (so any string FFmpeg reads from it is UTF-8); True for no span."""
    return span is None or bytes(data[span[0] : span[1]]).isascii()


def _tags(data: memoryview, start: int, end: int, kind: bytes) -> bool:
    """A ``udta`` or ``meta`` box whose strings PyAV can open as UTF-8: iTunes-style ``meta`` / ``ilst`` items
    (``(c)too``, ``(c)nam``, ...) whose ``data`` values are UTF-8, a ``hdlr`` in ASCII; any other child (QuickTime
    text atoms, whose encoding FFmpeg picks by language code; ``keys``) only in ASCII. Cover art declines."""
    if kind == b"meta":
        children = _boxes(data, start + 4, end)  # a full box: version and flags first
        if children is None:
            return False
        for name, first, last in children:
            if name == b"ilst":
                if not _items(data, first, last):
                    return False
            elif name not in (b"hdlr", b"free") or not _text(data, (first, last)):
                return False
        return True
    children = _boxes(data, start, end)
    return children is not None and all(_tags(data, first, last, name) if name == b"meta" else
                                        name.isascii() and _text(data, (first, last))
                                        for name, first, last in children)  # fmt: skip


def _items(data: memoryview, start: int, end: int) -> bool:
    """ilst's items: each a box of ``data`` boxes (type, locale, then the value), every value valid UTF-8."""
    items = _boxes(data, start, end)
    for name, first, last in items or ():
        values = _boxes(data, first, last)
        if name == b"covr" or not values or any(kind != b"data" or last - first < 8 for kind, first, last in values):
            return False
        try:
            for _, first, last in values:
                bytes(data[first + 8 : last]).decode("utf-8")
        except UnicodeDecodeError:
            return False
    return items is not None


def _u32(data: memoryview, at: int) -> int:
    return int.from_bytes(data[at : at + 4], "big")


def _timescale(data: memoryview, span: tuple[int, int]) -> int | None:
    """mvhd's / mdhd's timescale (version 0: after two 32-bit times; version 1: after two 64-bit ones)."""
    start, end = span
    version = data[start]
    at = start + (12 if version == 0 else 20 if version == 1 else end)
    scale = _u32(data, at) if at + 4 <= end else 0
    return scale if 0 < scale < 1 << 31 else None  # an int in FFmpeg: <= 0 is "invalid, defaulting to 1"


def _read(data: memoryview, size: int) -> Mp4Audio | None:
    top = _boxes(data, 0, size)
    if top is None or any(kind == b"moof" for kind, _, _ in top) or (moov := _one(top, b"moov")) is None:
        return None
    if not _text(data, _one(top, b"ftyp")):
        return None  # brands become metadata, which PyAV refuses to open unless it is UTF-8
    if bytes(data[moov[0] : moov[1]]).find(b"iTunSMPB") >= 0:
        return None  # read after the track, it would set the AAC skip (mov_read_custom -> start_pad)
    children = _boxes(data, *moov)
    if children is None or _one(children, b"mvex") or (trak := _one(children, b"trak")) is None:
        return None
    if sum(kind == b"trak" for kind, _, _ in children) != 1 or (mvhd := _one(children, b"mvhd")) is None:
        return None
    if not all(_tags(data, start, end, kind) for kind, start, end in children if kind in (b"udta", b"meta")):
        return None  # tags: metadata, read as UTF-8 by PyAV, which refuses to open a file whose tags are not
    movie_scale = _timescale(data, mvhd)
    trak_boxes = _boxes(data, *trak)
    mdia = _one(trak_boxes, b"mdia")
    mdia_boxes = _boxes(data, *mdia) if mdia else None
    minf = _one(mdia_boxes, b"minf")
    minf_boxes = _boxes(data, *minf) if minf else None
    stbl = _one(minf_boxes, b"stbl")
    hdlr, mdhd = _one(mdia_boxes, b"hdlr"), _one(mdia_boxes, b"mdhd")
    names = [(start + 24, end) for kind, start, end in (mdia_boxes or []) + (minf_boxes or []) if kind == b"hdlr"]
    if not all(_text(data, name) for name in names) or not all(
            _tags(data, start, end, kind) for kind, start, end in trak_boxes or () if kind in (b"udta", b"meta")):
        return None  # a handler's name becomes the stream's handler_name: metadata, as above
    if not movie_scale or stbl is None or hdlr is None or mdhd is None or bytes(data[hdlr[0] + 8 : hdlr[0] + 12]) \
            != b"soun" or not _self_contained(data, _one(minf_boxes, b"dinf")):  # fmt: skip
        return None
    scale = _timescale(data, mdhd)
    duration = _mdhd_duration(data, mdhd)
    stbl_boxes = _boxes(data, *stbl)
    if not scale or duration is None or stbl_boxes is None or any(kind in _REFUSED_STBL for kind, _, _ in stbl_boxes):
        return None
    codec = _stsd(data, _one(stbl_boxes, b"stsd"))
    if codec is None or codec[1] != scale or not _groups_plain(data, stbl_boxes):
        return None
    table = _sample_table(data, stbl_boxes, size)
    if table is None:
        return None
    edit = _edit(data, trak_boxes, movie_scale, scale)
    if edit is False:
        return None
    dts, deltas, positions = table
    name, rate, channels, frame = codec
    if edit is None:  # no edit list: every entry kept, none discarded (mov_fix_index returns at once)
        discards, skip, kept, end = np.zeros(len(dts), dtype=bool), 0, len(dts), duration
    else:
        media_time, edit_duration = edit
        if name == "alac" and media_time:
            return None
        discards, skip, kept = _fixed(dts, media_time, edit_duration)
        end = min(duration, edit_duration)
    if name == "alac" and not _alac_frames_match(data, positions[:kept], deltas[:kept], frame, size):
        return None
    return Mp4Audio(codec=name, sample_rate=rate, channels=channels, discards=discards[:kept], skip=skip,
                    durations=int(deltas[:kept].sum()), claimed=end)  # fmt: skip


def _mdhd_duration(data: memoryview, span: tuple[int, int]) -> int | None:
    start, end = span
    version = data[start]
    at, width = (start + 16, 4) if version == 0 else (start + 24, 8)
    return int.from_bytes(data[at : at + width], "big") if at + width <= end else None


def _self_contained(data: memoryview, dinf: tuple[int, int] | None) -> bool:
    """The one data reference is this file (a ``url `` entry with flag 1): the samples' offsets are into it."""
    dref = _one(_boxes(data, *dinf), b"dref") if dinf else None
    if dref is None or _u32(data, dref[0]) != 0 or _u32(data, dref[0] + 4) != 1:
        return False
    entries = _boxes(data, dref[0] + 8, dref[1])
    return bool(entries) and len(entries) == 1 and entries[0][0] == b"url " and _u32(data, entries[0][1]) == 1


def _stsd(data: memoryview, span: tuple[int, int] | None) -> tuple[str, int, int, int] | None:
    """(codec, rate, channels, samples per frame) of the one sample entry: AAC-LC from its esds, ALAC from its config atom."""
    if span is None or _u32(data, span[0]) != 0 or _u32(data, span[0] + 4) != 1:
        return None
    entries = _boxes(data, span[0] + 8, span[1])
    if not entries or len(entries) != 1:
        return None
    kind, start, end = entries[0]
    version = int.from_bytes(data[start + 8 : start + 10], "big")  # SoundDescription: after reserved(6), dref(2)
    if version != 0:
        return None  # QuickTime's v1 / v2 sound descriptions: not what these writers make
    children = _boxes(data, start + 28, end)
    if children is None:
        return None
    if kind == b"mp4a":
        if any(name not in _STSD_CHILDREN for name, _, _ in children) or (esds := _one(children, b"esds")) is None:
            return None
        return _esds(data, *esds)
    if kind == b"alac":
        config = _one(children, b"alac")
        if config is None or len(children) != 1 or config[1] - config[0] != 28 or _u32(data, config[0]) != 0:
            return None  # version / flags, then ALACSpecificConfig (24 bytes): mov_read_alac's 36-byte extradata
        at = config[0] + 4
        frame, depth, channels, rate = _u32(data, at), data[at + 5], data[at + 9], _u32(data, at + 20)
        # alac.c's init: a bit depth of 16, 20, 24 or 32, 1-8 channels, a frame length up to 4096 * 4096
        plain = 0 < frame <= 4096 * 4096 and depth in (16, 20, 24, 32) and 1 <= channels <= 8 and 0 < rate < 1 << 31
        return ("alac", rate, channels, frame) if plain else None
    return None


def _descriptor(data: memoryview, at: int, end: int, tag: int) -> tuple[int, int] | None:
    """The payload span of the MPEG-4 descriptor ``tag`` at ``at`` (ff_mp4_read_descr: a length of up to 4 bytes,
    7 bits each)."""
    if at >= end or data[at] != tag:
        return None
    length, pos = 0, at + 1
    for _ in range(4):
        byte = data[pos]
        length, pos = (length << 7) | (byte & 0x7F), pos + 1
        if not byte & 0x80:
            break
    return (pos, pos + length) if pos + length <= end else None


def _esds(data: memoryview, start: int, end: int) -> tuple[str, int, int, int] | None:
    """AAC-LC's (rate, channels) from the esds's AudioSpecificConfig, where it is plain and marks SBR absent."""
    if _u32(data, start) != 0 or (es := _descriptor(data, start + 4, end, 0x03)) is None:
        return None
    if data[es[0] + 2] & 0xE0:  # streamDependence / URL / OCRstream: fields this reading skips
        return None
    config = _descriptor(data, es[0] + 3, es[1], 0x04)
    if config is None or data[config[0]] != 0x40:  # objectTypeIndication 0x40: MPEG-4 audio
        return None
    info = _descriptor(data, config[0] + 13, config[1], 0x05)
    if info is None:
        return None
    asc = bytes(data[info[0] : info[1]])
    if len(asc) != 5:
        return None
    bits = int.from_bytes(asc, "big")  # 40 bits, read from the top
    field = lambda at, width: (bits >> (40 - at - width)) & ((1 << width) - 1)  # noqa: E731
    aot, index, layout = field(0, 5), field(5, 4), field(9, 4)
    # GASpecificConfig: frameLengthFlag, dependsOnCoreCoder, extensionFlag all 0; then sync extension 0x2B7, the
    # extension object type 5 (SBR) with its flag 0: SBR signalled absent (mpeg4audio.c sets sbr = 0), 7 zero bits
    if aot != 2 or index >= len(AAC_RATES) or layout not in (1, 2) or field(13, 3) or field(16, 11) != 0x2B7 \
            or field(27, 5) != 5 or field(32, 1) or field(33, 7):  # fmt: skip
        return None
    return "aac", AAC_RATES[index], layout, 1024


def _sample_table(data: memoryview, stbl: list[tuple[bytes, int, int]],
                  size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:  # fmt: skip
    """(dts, duration, byte position) per sample from stts, once stsz / stsc / stco (or co64) agree on the sample count and put
    every sample inside the file; None otherwise."""
    stts, stsz, stsc = _one(stbl, b"stts"), _one(stbl, b"stsz"), _one(stbl, b"stsc")
    stco, co64 = _one(stbl, b"stco"), _one(stbl, b"co64")
    if stts is None or stsz is None or stsc is None or (stco is None) == (co64 is None):
        return None
    runs = _table(data, stts, 8)
    if runs is None or not len(runs) or np.any(runs[:, 1] == 0) or np.any(runs[:, 0] == 0):
        return None
    if len(runs) == 1 and runs[0, 1] == 1:
        return None  # stts of one run of duration 1: mov_build_index's uncompressed-audio chunk demuxing
    start = stsz[0]
    constant, count = _u32(data, start + 4), _u32(data, start + 8)
    if _u32(data, start) != 0 or not 0 < count <= size or count != int(runs[:, 0].astype(np.int64).sum()):
        return None  # stts and stsz disagree on the sample count, or it exceeds the file's bytes (before expanding)
    if not constant and stsz[1] - start != 12 + 4 * count:
        return None
    deltas = np.repeat(runs[:, 1].astype(np.int64), runs[:, 0].astype(np.int64))
    if constant:  # every sample that size (mov_read_stsz reads no table; a v0 sound entry sets no size of its own)
        if stsz[1] - start != 12:
            return None
        sizes = np.full(count, constant, dtype=np.int64)
    else:
        sizes = np.frombuffer(data[start + 12 : stsz[1]], dtype=">u4").astype(np.int64)
    offsets = _offsets(data, stco, co64)
    chunks = _table(data, stsc, 12)
    if offsets is None or chunks is None or not len(chunks) or np.any(sizes == 0):
        return None
    first, per, description = chunks[:, 0].astype(np.int64), chunks[:, 1].astype(np.int64), chunks[:, 2]
    if first[0] != 1 or np.any(np.diff(first) <= 0) or np.any(per == 0) or np.any(description != 1) \
            or first[-1] > len(offsets):  # fmt: skip
        return None
    spans = np.diff(np.append(first, len(offsets) + 1))  # chunks each stsc entry covers
    per_chunk = np.repeat(per, spans)
    if int(per_chunk.sum()) != count:
        return None
    chunk_of = np.repeat(np.arange(len(offsets)), per_chunk)
    ends = np.cumsum(sizes)
    chunk_first = np.cumsum(per_chunk) - per_chunk  # the first sample of each chunk
    within = ends - sizes - (ends - sizes)[chunk_first][chunk_of]
    positions = offsets[chunk_of] + within
    if np.any(positions + sizes > size):
        return None
    dts = np.cumsum(deltas) - deltas
    return dts, deltas, positions


def _table(data: memoryview, span: tuple[int, int], width: int) -> np.ndarray | None:
    """A full box's table of 32-bit fields, ``width`` bytes a row, as an array [rows, width // 4]."""
    start, end = span
    if _u32(data, start) != 0:
        return None
    rows = _u32(data, start + 4)
    if end - start != 8 + rows * width:
        return None
    return np.frombuffer(data[start + 8 : end], dtype=">u4").reshape(rows, width // 4)


def _offsets(data: memoryview, stco: tuple[int, int] | None, co64: tuple[int, int] | None) -> np.ndarray | None:
    span, width = (stco, 4) if stco is not None else (co64, 8)
    start, end = span
    if _u32(data, start) != 0:
        return None
    count = _u32(data, start + 4)
    if not count or end - start != 8 + count * width:
        return None
    return np.frombuffer(data[start + 8 : end], dtype=">u4" if width == 4 else ">u8").astype(np.int64)


def _edit(data: memoryview, trak: list[tuple[bytes, int, int]], movie_scale: int, scale: int):
    """None without an edit list; (media_time, duration in the track's timescale) for one plain entry; False for
    any other (several entries, an empty edit, a rate other than 1, a media time of a second or more)."""
    edts = _one(trak, b"edts")
    if edts is None:
        return None if not any(kind == b"edts" for kind, _, _ in trak) else False
    boxes = _boxes(data, *edts)
    elst = _one(boxes, b"elst")
    if elst is None or len(boxes) != 1:
        return False
    start, end = elst
    version, count = data[start], _u32(data, start + 4)
    entry = 12 if version == 0 else 20 if version == 1 else 0
    if count != 1 or not entry or end - start != 8 + entry:
        return False
    width = 4 if version == 0 else 8
    duration = int.from_bytes(data[start + 8 : start + 8 + width], "big")
    media_time = int.from_bytes(data[start + 8 + width : start + 8 + 2 * width], "big", signed=True)
    rate = _u32(data, start + 8 + 2 * width)
    if rate != 0x00010000 or not 0 <= media_time < scale or duration >= 1 << 40:
        return False
    # get_edit_list_entry: av_rescale(duration, timescale, mvhd's timescale), AV_ROUND_NEAR_INF
    return media_time, (duration * scale + movie_scale // 2) // movie_scale


def _groups_plain(data: memoryview, stbl: list[tuple[bytes, int, int]]) -> bool:
    """Sample groups, where there are any, are the AAC encoder's ``roll`` (pre-roll) group, which the index does
    not read; another grouping type (``rap ``, ``sync``, or one a damaged byte makes unknown) declines."""
    for kind, start, end in stbl:
        if kind in (b"sgpd", b"sbgp") and (end - start < 8 or bytes(data[start + 4 : start + 8]) != b"roll"):
            return False
    return True


def _alac_frames_match(data: memoryview, positions: np.ndarray, deltas: np.ndarray, frame: int, size: int) -> bool:
    """Each ALAC packet's first element header (alac.c ``decode_element``: a 3-bit element type, SCE or CPE, 4 + 12
    bits, has_size, 2 bits of extra bits, not_compressed, then the 32-bit sample count when has_size; else the
    config's frame length) counts the samples its stts duration says: the packets' durations, which the PyAV
    path sums, are then what the decoder hands out."""
    if np.any(positions + 7 > size):
        return False
    raw = np.frombuffer(data, dtype=np.uint8)
    head = raw[positions[:, None] + np.arange(7)].astype(np.int64)
    element = head[:, 0] >> 5
    has_size = (head[:, 2] >> 4) & 1
    # the 32 bits after the 23-bit header: from bit 23, i.e. byte 2's lowest bit on
    explicit = ((head[:, 2] & 1) << 31 | head[:, 3] << 23 | head[:, 4] << 15 | head[:, 5] << 7 | head[:, 6] >> 1)
    samples = np.where(has_size == 1, explicit, frame)
    return bool(np.all(element <= 1) and np.all(samples > 0) and np.all(samples <= frame)
                and np.array_equal(samples, deltas))  # fmt: skip


def _fixed(dts: np.ndarray, media_time: int, edit_duration: int) -> tuple[np.ndarray, int, int]:
    """mov_fix_index for one edit entry starting at entry 0: (discard flags, skip_samples, entries kept)."""
    frame = np.append(np.diff(dts), edit_duration)  # the last entry's duration is the edit's
    end = edit_duration + media_time
    reached = np.flatnonzero(dts + frame >= end)  # the loop breaks after the first entry that reaches the end
    kept = int(reached[0]) + 1 if len(reached) else len(dts)
    dts, frame = dts[:kept], frame[:kept]
    straddles = (dts < media_time) & (dts + frame > media_time)  # kept, its part before media_time skipped
    # outside the edit: before its start, or (the first entry only: the break follows) at or past its end; each
    # met before the edit's start adds its duration to skip_samples
    discards = ((dts < media_time) & ~straddles) | (dts >= end)
    skip = int(frame[discards].sum() + (media_time - dts[straddles]).sum())
    return discards, skip, kept
