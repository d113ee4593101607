"""What an audio file's own structure says about its length, read from its bytes without decoding.

``walk`` runs before PyAV opens the file (as ``video_integrity.check_container`` does for video) and raises
``truncated_media`` where the structure runs past the end of the data::

    WAV        "RIFF" size "WAVE" | "fmt " size format channels rate bytes/s block_align bits | ... |
               "data" size samples... (FFmpeg's demuxer clamps a size past the end and reads on: checked here)
    Ogg        pages: "OggS" version flags granule(8) serial(4) seq(4) crc(4) nsegs lacing[nsegs] body |
               each inside the file and matching its CRC (a damaged page is dropped by FFmpeg, samples and
               all); the last one flagged end-of-stream (RFC 3533), which a file cut at a page boundary lacks
    MP4 / M4A, Matroska / WebM, AVI: ``video_integrity.check_container``'s walks

and returns what it read (``Walked``): the WAV's data chunk, the Ogg stream's last granule position and Opus
pre-skip. ``mp3_tag`` reads an MP3's Xing / Info / VBRI header (the frame count and byte count LAME and FFmpeg
write into the first frame). ``adts_frames`` walks raw AAC's ADTS frame headers, ``matroska_blocks`` a Matroska /
WebM track's blocks (their frame counts and DiscardPadding), both without decoding. ``audio.probe_audio`` turns
these into sample counts where they prove one.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from .integrity import corrupt_error, cut_error
from .video_integrity import check_container

__all__ = ["Walked", "Mp3Tag", "Blocks", "MatroskaTrack", "walk", "mp3_tag", "adts_frames", "matroska_blocks",
           "matroska_track"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Walked:
    """What the structure walk read; every field None where the format has no such thing."""

    wav_data: int | None = None  # WAV: bytes of sample data FFmpeg reads (the data chunk's, or to the end of file)
    wav_frame: int | None = None  # WAV: bytes per sample frame, when block_align == channels * bits / 8 agree
    ogg_granule: int | None = None  # Ogg: the last page's granule position (samples at 48 kHz for Opus)
    ogg_serials: int = 0  # Ogg: logical streams in the file (chained or multiplexed when more than one)
    opus_preskip: int | None = None  # Ogg: the OpusHead pre-skip when the first page holds one (RFC 7845)
    container: str | None = None  # "MP4", "Matroska" or "AVI" where video_integrity.check_container walked it


@dataclass(frozen=True, slots=True)
class Blocks:
    """A Matroska audio track's blocks in file order: the samples each one's frame holds, and the DiscardPadding of
    those that carry one, in samples at the stream's rate (rounded to nearest, as FFmpeg's av_rescale_q does)."""

    samples: list[int]
    discards: dict[int, int]  # block index -> samples to discard from its end


@dataclass(frozen=True, slots=True, kw_only=True)
class MatroskaTrack:
    """A Matroska / WebM file's one audio TrackEntry, each field None where its element is absent (Matroska's
    defaults: 8000 Hz, one channel, no delay)."""

    codec_id: str  # CodecID, e.g. "A_FLAC", "A_OPUS", "A_AAC"
    private: bytes  # CodecPrivate (FLAC: "fLaC" and its metadata blocks; Opus: the OpusHead)
    rate: float | None = None  # Audio/SamplingFrequency in Hz
    output_rate: float | None = None  # Audio/OutputSamplingFrequency in Hz (SBR: twice the rate)
    channels: int | None = None  # Audio/Channels
    delay: int | None = None  # CodecDelay in ns: FFmpeg skips it at the start (as its first packet's skip_samples)


@dataclass(frozen=True, slots=True, kw_only=True)
class Mp3Tag:
    """The first frame's Xing / Info header (LAME's, or FFmpeg's mp3 muxer's)."""

    frames: int  # MPEG frames in the file, the tag's own frame excluded
    audio_bytes: int | None  # bytes from the tag's frame to the last frame's end (None: the field is absent)
    gapless: bool  # a LAME / Lavf / Lavc extension (encoder delay and padding) follows: FFmpeg trims by it
    held: int  # bytes from the tag's frame to the end of the data, ID3v1 / APE trailers excluded


def walk(data: bytes, *, part: str) -> Walked:
    """Walk ``data``'s container structure to its end (module doc); ``DropError`` when it is cut short."""
    if container := check_container(data, part=part):  # MP4 / M4A, Matroska / WebM, AVI
        return Walked(container=container)
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return _walk_wav(data, part)
    if data[:4] == b"OggS":
        return _walk_ogg(data, part)
    return Walked()


def _walk_wav(data: bytes, part: str) -> Walked:
    """RIFF chunks from byte 12 to the ``data`` chunk, whose size must fit in the file. A size of 0 or 0xFFFFFFFF
    (a writer that could not seek back) means "to the end of the file", as FFmpeg's ``wavdec.c`` reads it."""
    pos, size, align, frame = 12, len(data), 0, None
    while pos + 8 <= size:
        kind, length = bytes(data[pos : pos + 4]), int.from_bytes(data[pos + 4 : pos + 8], "little")
        if kind == b"fmt " and pos + 24 <= size:
            channels = int.from_bytes(data[pos + 10 : pos + 12], "little")
            align = int.from_bytes(data[pos + 20 : pos + 22], "little")  # nBlockAlign: bytes per sample frame
            bits = int.from_bytes(data[pos + 22 : pos + 24], "little")
            frame = align if align and bits % 8 == 0 and align == channels * bits // 8 else None
        if kind == b"data":
            held = size - pos - 8
            if length in (0, 0xFFFFFFFF):
                return Walked(wav_data=held, wav_frame=frame)
            if length > held:
                what = (f"the header says {length // align} samples, the data holds {held // align}" if align
                        else f"its data chunk declares {length} bytes, the file holds {held}")  # fmt: skip
                raise cut_error(part, "WAV", what, size)
            return Walked(wav_data=length, wav_frame=frame)
        pos += 8 + length + (length & 1)
    if pos > size:
        raise cut_error(part, "WAV", f"a chunk before the audio data runs {pos - size} bytes past the end", size)
    raise corrupt_error(part, "WAV", "no data chunk")


def _walk_ogg(data: bytes, part: str) -> Walked:
    """Ogg pages from byte 0, each inside the file, the last flagged end-of-stream. Bytes that are not a page end
    the walk (trailing bytes are not ours to judge). FFmpeg takes a clip's length from the last page it finds, so
    a cut Ogg opens as a shorter clip: only this walk tells."""
    pos, size, last, serials = 0, len(data), -1, set()
    while pos + 27 <= size and data[pos : pos + 4] == b"OggS":
        segments = data[pos + 26]
        if pos + 27 + segments > size:
            break
        end = pos + 27 + segments + sum(data[pos + 27 : pos + 27 + segments])
        if end > size:
            raise cut_error(part, "Ogg", f"its page at byte {pos} declares {end - pos} bytes, the file ends "
                                         f"{end - size} bytes before its end", size)  # fmt: skip
        if _ogg_crc(data, pos, end) != int.from_bytes(data[pos + 22 : pos + 26], "little"):
            raise corrupt_error(part, "Ogg", f"its page at byte {pos} fails its CRC (damaged data: FFmpeg drops "
                                             "the page and its samples)")  # fmt: skip
        serials.add(bytes(data[pos + 14 : pos + 18]))
        last, pos = pos, end
    if last < 0:
        return Walked()
    if pos < size and data[pos : pos + 4] == b"OggS"[: size - pos]:
        raise cut_error(part, "Ogg", f"the file ends inside a page header at byte {pos}", size)
    if not data[last + 5] & 0x04:
        raise cut_error(part, "Ogg", f"its last page (at byte {last}) does not end the stream (no end-of-stream "
                                     "flag)", size)  # fmt: skip
    body = 27 + data[26]  # the first page's first packet: OpusHead version channels pre-skip(LE16) ...
    head = data[body : body + 12]
    preskip = int.from_bytes(head[10:12], "little") if head[:8] == b"OpusHead" else None
    granule = int.from_bytes(data[last + 6 : last + 14], "little", signed=True)
    return Walked(ogg_granule=granule, ogg_serials=len(serials), opus_preskip=preskip)


_BIT_REVERSED = bytes(int(f"{byte:08b}"[::-1], 2) for byte in range(256))


def _ogg_crc(data: bytes, start: int, end: int) -> int:
    """The CRC-32 of the page ``data[start:end]`` with its CRC field as zeros, as Ogg defines it (polynomial
    0x04C11DB7, MSB first, initial value and final XOR 0), computed by zlib's C loop: zlib's CRC-32 is the same
    polynomial bit-reversed, so on bit-reversed bytes it gives the bit-reversed CRC, and XOR-ing the CRC of as many
    zero bytes removes its initial value and final XOR (CRCs are linear)."""
    page = data[start : start + 22] + b"\0\0\0\0" + data[start + 26 : end]
    raw = zlib.crc32(page.translate(_BIT_REVERSED)) ^ zlib.crc32(bytes(len(page)))
    return int(f"{raw:032b}"[::-1], 2)


def mp3_tag(data: bytes) -> Mp3Tag | None:
    """The Xing / Info header of ``data``'s first MPEG audio frame (after any ID3v2 tag), at the offset the
    frame's version and channel mode put it (after the side information), with its frame count; None without."""
    pos = 0
    if data[:3] == b"ID3" and len(data) >= 10:  # ID3v2: 10-byte header, synchsafe size, optional footer
        pos = 10 + int.from_bytes(bytes(b & 0x7F for b in data[6:10]), "big") + (10 if data[5] & 0x10 else 0)
    while pos < len(data) and data[pos] == 0:  # padding before the first frame
        pos += 1
    if pos + 4 > len(data) or data[pos] != 0xFF or data[pos + 1] & 0xE0 != 0xE0:
        return None
    mpeg1, mono = (data[pos + 1] >> 3) & 3 == 3, data[pos + 3] >> 6 == 3
    at = pos + 4 + (32 if mpeg1 and not mono else 17 if mpeg1 or not mono else 9)
    if data[at : at + 4] not in (b"Xing", b"Info") or len(data) < at + 8:
        return None
    flags, field = int.from_bytes(data[at + 4 : at + 8], "big"), at + 8
    if not flags & 1:  # no frame count
        return None
    frames = int.from_bytes(data[field : field + 4], "big")
    field += 4
    audio_bytes = None
    if flags & 2:
        audio_bytes, field = int.from_bytes(data[field : field + 4], "big"), field + 4
    field += (100 if flags & 4 else 0) + (4 if flags & 8 else 0)  # table of contents, quality
    gapless = data[field : field + 4] in (b"LAME", b"Lavf", b"Lavc")  # the versions FFmpeg's mp3dec.c trusts
    end = len(data) - (128 if data[-128:-125] == b"TAG" else 0)  # an ID3v1 trailer
    if data[end - 32 : end - 24] == b"APETAGEX":  # an APEv2 footer: its size counts the items and the footer
        end -= int.from_bytes(data[end - 20 : end - 16], "little") + (32 if data[end - 9] & 0x80 else 0)
    return Mp3Tag(frames=frames, audio_bytes=audio_bytes, gapless=gapless, held=max(0, end - pos))


def adts_frames(data: bytes) -> int | None:
    """The number of ADTS frames in raw AAC ``data`` when it is nothing but a chain of them, from byte 0 to its last
    byte, each header (ISO 14496-3 1.A.2: syncword FFF, layer 0, ..., frame_length(13), ...,
    number_of_raw_data_blocks(2)) with the first one's fixed part (profile, rate, channels: no change part-way),
    one raw data block (FFmpeg's decoder refuses more) and a length that holds its header. None for anything else
    (ID3 tags, trailing bytes, a cut last frame): then the decoder counts. Each frame is a packet FFmpeg's ``aac``
    demuxer reads by that same length, which its decoder turns into one frame of 1024 samples."""
    size, pos, frames = len(data), 0, 0
    if size < 7 or data[0] != 0xFF or data[1] & 0xF6 != 0xF0 or (data[2] >> 2) & 0x0F > 12:
        return None
    # bytes 0-3 less the frame length's top bits: sync, id, layer, protection; profile, rate, private, channels
    head = int.from_bytes(data[:4], "big") & 0xFFFFFFF0
    minimum = 7 if data[1] & 1 else 9  # protection_absent = 0: a CRC follows the header
    header = _ADTS.unpack_from  # bytes 0-3, 4-5, 6: one call per frame (a minute of 44.1 kHz is 2600 of them)
    while pos + 7 <= size:
        fixed, middle, last = header(data, pos)
        if fixed & 0xFFFFFFF0 != head or last & 3:
            return None
        length = ((fixed & 3) << 11) | (middle >> 5)  # frame_length: 2 bits of byte 3, byte 4, 3 bits of byte 5
        if length < minimum:
            return None
        pos, frames = pos + length, frames + 1
    return frames if pos == size else None


_ADTS = struct.Struct(">IHB")


_EBML_SEGMENT, _EBML_TRACKS, _EBML_CLUSTER = 0x18538067, 0x1654AE6B, 0x1F43B675
_EBML_TRACK_ENTRY, _EBML_TRACK_NUMBER, _EBML_TRACK_TYPE, _EBML_ENCODINGS = 0xAE, 0xD7, 0x83, 0x6D80
_EBML_SIMPLE_BLOCK, _EBML_BLOCK_GROUP, _EBML_BLOCK, _EBML_DISCARD = 0xA3, 0xA0, 0xA1, 0x75A2
_EBML_VOID, _EBML_CRC = 0xEC, 0xBF
_EBML_AUDIO = 0xE1
# TrackEntry children and Audio's children that MatroskaTrack holds (CodecID, CodecPrivate, CodecDelay; Channels,
# SamplingFrequency, OutputSamplingFrequency)
_TRACK_FACTS = {0x86: "codec_id", 0x63A2: "private", 0x56AA: "delay"}
_AUDIO_FACTS = {0x9F: "channels", 0xB5: "rate", 0x78B5: "output_rate"}
# the children each level may hold (Matroska's schema, RFC 9559 5.1): any other id is damage the walk does not judge
_SEGMENT_CHILDREN = frozenset({0x114D9B74, 0x1549A966, _EBML_TRACKS, _EBML_CLUSTER, 0x1C53BB6B, 0x1941A469,
                               0x1043A770, 0x1254C367, _EBML_VOID, _EBML_CRC})  # fmt: skip
_CLUSTER_CHILDREN = frozenset({0xE7, 0x5854, 0xA7, 0xAB, _EBML_SIMPLE_BLOCK, _EBML_BLOCK_GROUP, 0xAF, _EBML_VOID,
                               _EBML_CRC})  # fmt: skip
_NUMBERS = frozenset({0xE7, 0xA7, 0xAB, 0x9B, 0xFA, 0xFB, 0xFD, 0x75A2})  # integer elements: 8 bytes at most
_GROUP_CHILDREN = frozenset({_EBML_BLOCK, 0xA2, 0x75A1, 0x9B, 0xFA, 0xFB, 0xFD, 0xA4, 0x75A2, 0x8E, _EBML_VOID,
                             _EBML_CRC})  # fmt: skip


def _element(data: bytes, pos: int, end: int) -> tuple[int, int, int] | None:
    """(id, payload start, payload end) of the EBML element at ``pos``; None when it is not one that fits before
    ``end`` or its size is "unknown" (a streamed Segment or Cluster: its end is not declared)."""
    if pos >= end or not data[pos]:
        return None
    id_width = 9 - data[pos].bit_length()
    if id_width > 4 or pos + id_width >= end or not data[pos + id_width]:
        return None
    width = 9 - data[pos + id_width].bit_length()
    start = pos + id_width + width
    mask = (1 << (7 * width)) - 1
    value = int.from_bytes(data[pos + id_width : start], "big") & mask
    if value == mask or start + value > end:
        return None
    return int.from_bytes(data[pos : pos + id_width], "big"), start, start + value


def matroska_blocks(data: bytes, *, codec: str, rate: int) -> Blocks | None:
    """The blocks of the file's one audio track in file order, each with its frame's samples (``codec``: ``opus``
    from its TOC byte, RFC 6716 3.1; ``flac`` from its frame header's block size; ``aac``, LC, 1024) and
    DiscardPadding. None where the walk cannot stand for FFmpeg's demuxer: an element of unknown size or past its
    parent's end, bytes after the Segment, more or fewer than one audio track, laced blocks, a track with
    ContentEncodings (its bytes are not the codec's), an empty or malformed frame."""
    if (segment := _segment(data)) is None:
        return None
    blocks = Blocks(samples=[], discards={})
    (pos, end), track = segment, None
    while pos < end:
        element = _element(data, pos, end)
        if element is None:
            return None
        ident, start, stop = element
        if ident == _EBML_TRACKS:
            if track is not None or (found := _audio_track(data, start, stop)) is None:
                return None
            track = found[:2]
        elif ident == _EBML_CLUSTER:
            if track is None or not _cluster_blocks(data, start, stop, track, codec, rate, blocks):
                return None
        elif ident not in _SEGMENT_CHILDREN:
            return None
        pos = stop
    return blocks if track is not None else None


def matroska_track(data: bytes) -> MatroskaTrack | None:
    """The facts of the file's one audio track (``MatroskaTrack``) from the Segment's Tracks element, read as
    matroskadec.c reads them; None where ``matroska_blocks`` would decline the file's header or tracks (the
    Clusters are ``matroska_blocks``' to walk)."""
    if (segment := _segment(data)) is None:
        return None
    pos, end = segment
    while pos < end:
        element = _element(data, pos, end)
        if element is None or element[0] not in _SEGMENT_CHILDREN:
            return None
        if element[0] == _EBML_TRACKS:
            found = _audio_track(data, element[1], element[2])
            return None if found is None else found[2]
        pos = element[2]
    return None


def _segment(data: bytes) -> tuple[int, int] | None:
    """The payload span of the Segment that follows the EBML header and ends the file; None for anything else."""
    top = _element(data, 0, len(data))
    if top is None or top[0] != 0x1A45DFA3:
        return None
    segment = _element(data, top[2], len(data))
    if segment is None or segment[0] != _EBML_SEGMENT or segment[2] != len(data):
        return None
    return segment[1], segment[2]


def _audio_track(data: bytes, pos: int, end: int) -> tuple[int, frozenset[int], MatroskaTrack] | None:
    """The number of the Tracks element's one audio entry (TrackType 2), every entry's number and the audio entry's
    facts; None when there is not exactly one audio entry or it has ContentEncodings."""
    found: list[tuple[int | None, bool, MatroskaTrack]] = []
    numbers: set[int] = set()
    while pos < end:
        element = _element(data, pos, end)
        if element is None:
            return None
        ident, start, stop = element
        if ident == _EBML_TRACK_ENTRY:
            number, kind, encoded, at, facts = None, None, False, start, {}
            while at < stop:
                child = _element(data, at, stop)
                if child is None:
                    return None
                value = int.from_bytes(data[child[1] : child[2]], "big")
                number = value if child[0] == _EBML_TRACK_NUMBER else number
                kind = value if child[0] == _EBML_TRACK_TYPE else kind
                encoded = encoded or child[0] == _EBML_ENCODINGS
                if child[0] in _TRACK_FACTS:
                    facts[_TRACK_FACTS[child[0]]] = bytes(data[child[1] : child[2]])
                elif child[0] == _EBML_AUDIO:
                    facts.update(_audio_facts(data, child[1], child[2]))
                at = child[2]
            if kind == 2:
                found.append((number, encoded, _track_facts(facts)))
            if number is not None:
                numbers.add(number)
        pos = stop
    if len(found) != 1 or found[0][0] is None or found[0][1] or found[0][2] is None:
        return None
    return found[0][0], frozenset(numbers), found[0][2]


def _audio_facts(data: bytes, pos: int, end: int) -> dict[str, bytes]:
    facts = {}
    while pos < end and (child := _element(data, pos, end)) is not None:
        if child[0] in _AUDIO_FACTS:
            facts[_AUDIO_FACTS[child[0]]] = bytes(data[child[1] : child[2]])
        pos = child[2]
    return facts


def _track_facts(raw: dict[str, bytes]) -> MatroskaTrack | None:
    """The entry's raw elements read as numbers (RFC 9559: an unsigned integer of 8 bytes at most, a float of 4 or
    8); None where one does not read so."""
    numbers = {}
    for name in ("channels", "delay"):
        if name in raw:
            if len(raw[name]) > 8:
                return None
            numbers[name] = int.from_bytes(raw[name], "big")
    for name in ("rate", "output_rate"):
        if name in raw:
            if len(raw[name]) not in (4, 8):
                return None
            numbers[name] = struct.unpack(">f" if len(raw[name]) == 4 else ">d", raw[name])[0]
    return MatroskaTrack(codec_id=raw.get("codec_id", b"").rstrip(b"\0").decode("ascii", "replace"),
                         private=raw.get("private", b""), **numbers)  # fmt: skip


def _cluster_blocks(data: bytes, pos: int, end: int, tracks: tuple[int, frozenset[int]], codec: str, rate: int,
                    out: Blocks) -> bool:  # fmt: skip
    """Append the cluster's blocks of the audio track to ``out``; False where one cannot be read as FFmpeg's
    matroskadec.c reads it (``matroska_blocks``; a number past 8 bytes, or a block of a track the file does not
    declare, is an error there that skips the rest of the cluster). A SimpleBlock with a one- or two-byte size
    is read inline: a minute of 20 ms Opus frames is 3000 of them."""
    samples, frames = out.samples, _OPUS_FRAME if codec == "opus" else None
    mine = 0x80 | tracks[0] if tracks[0] < 0x7F else -1  # the audio track's number as a one-byte vint
    while pos < end:
        if data[pos] == 0xA3 and pos + 2 < end and data[pos + 1] & 0xC0:  # a SimpleBlock, a 1- or 2-byte size
            head = data[pos + 1]
            if head & 0x80:
                start, value, unknown = pos + 2, head & 0x7F, 0x7F
            else:
                start, value, unknown = pos + 3, (head & 0x3F) << 8 | data[pos + 2], 0x3FFF
            pos = start + value
            if value == unknown or pos > end:
                return False
            # the common block: the audio track, not laced, an Opus packet of code 0 (one frame, at most 1275
            # bytes after its TOC byte: what _opus_samples accepts for code 0)
            if frames and value > 4 and data[start] == mine and not data[start + 3] & 6 and not data[start + 4] & 3 \
                    and value - 5 <= _OPUS_MAX_BYTES:  # fmt: skip
                samples.append(frames[data[start + 4] >> 3])
                continue
            if (got := _block_samples(data, start, pos, tracks, codec)) is None:
                return False
            if got:
                samples.append(got)
            continue
        element = _element(data, pos, end)
        if element is None or element[0] not in _CLUSTER_CHILDREN or (element[0] in _NUMBERS and
                                                                      element[2] - element[1] > 8):  # fmt: skip
            return False
        ident, start, stop = element
        if ident == _EBML_SIMPLE_BLOCK:
            got = _block_samples(data, start, stop, tracks, codec)
            if got is None:
                return False
            if got:
                samples.append(got)
        elif ident == _EBML_BLOCK_GROUP:
            got, discard, at = None, None, start
            while at < stop:
                child = _element(data, at, stop)
                if child is None or child[0] not in _GROUP_CHILDREN or (child[0] in _NUMBERS and
                                                                        child[2] - child[1] > 8):  # fmt: skip
                    return False
                if child[0] == _EBML_BLOCK:
                    got = _block_samples(data, child[1], child[2], tracks, codec)
                    if got is None:
                        return False
                elif child[0] == _EBML_DISCARD:
                    nanoseconds = int.from_bytes(data[child[1] : child[2]], "big", signed=True)
                    if nanoseconds <= 0:
                        return False
                    discard = (nanoseconds * rate + 500_000_000) // 1_000_000_000  # av_rescale_q: to nearest
                at = child[2]
            if got is None:
                return False
            if got and discard is not None:  # side data even when it rounds to 0: it still resets a pending skip
                out.discards[len(samples)] = discard
            if got:
                samples.append(got)
        pos = stop
    return True


def _block_samples(data: bytes, pos: int, end: int, tracks: tuple[int, frozenset[int]], codec: str) -> int | None:
    """The samples of a block of the audio track (``tracks``: its number, every declared one); 0 for another
    declared track's block; None when it is laced, of an undeclared track, or its frame does not read. Block:
    track number (vint), timecode (2), flags (lacing in bits 1-2), then the frame."""
    if pos >= end or not data[pos]:
        return None
    width = 9 - data[pos].bit_length()
    number = int.from_bytes(data[pos : pos + width], "big") & ((1 << (7 * width)) - 1)
    if number != tracks[0]:
        return 0 if number in tracks[1] and pos + width + 3 <= end else None
    frame = pos + width + 3
    if frame >= end or (data[frame - 1] >> 1) & 3:
        return None
    if codec == "aac":  # AAC-LC: every packet decodes to one frame of 1024 samples
        return 1024
    return (_opus_samples if codec == "opus" else _flac_block_size)(data, frame, end) or None


_OPUS_FRAME = (480, 960, 1920, 2880) * 3 + (480, 960) * 2 + (120, 240, 480, 960) * 4  # TOC config -> 48 kHz
_OPUS_MAX_BYTES = 1275  # a frame's bytes at most (RFC 6716 3.2.1)


def _opus_samples(data: bytes, pos: int, end: int) -> int | None:
    """An Opus packet's samples at 48 kHz (RFC 6716 3.1: the TOC's config gives the frame size; code 0: one frame,
    1 and 2: two, 3: the count in the next byte), or None where FFmpeg's ``ff_opus_parse_packet``
    (libavcodec/opus/parse.c) refuses the packet (its parser then drops it, its decoder fails) or might: the
    same checks of the frame lengths, padding and 120 ms limit, a negative remainder refused outright."""
    size, toc = end - pos, data[pos]
    code = toc & 3
    if code == 0:
        count = 1 if size - 1 <= _OPUS_MAX_BYTES else 0
    elif code == 1:
        count = 2 if (size - 1) % 2 == 0 and (size - 1) // 2 <= _OPUS_MAX_BYTES else 0
    elif code == 2:
        first, at = _lacing16(data, pos + 1, end)
        count = 2 if first >= 0 and 0 <= end - at - first <= _OPUS_MAX_BYTES else 0
    else:
        count = _opus_code3_frames(data, pos, end)
    samples = count * _OPUS_FRAME[toc >> 3]
    return samples if 0 < samples <= 5760 else None


def _opus_code3_frames(data: bytes, pos: int, end: int) -> int:
    """The frame count of a code 3 packet (RFC 6716 3.2.5), 0 where ``ff_opus_parse_packet`` would refuse it."""
    if end - pos < 2:
        return 0
    count, padded, vbr, at, padding = data[pos + 1] & 0x3F, data[pos + 1] & 0x40, data[pos + 1] & 0x80, pos + 2, 0
    if not 1 <= count <= 48:
        return 0
    while padded:  # padding length: bytes of 255 add 254 each, the first byte below 255 ends it
        if at >= end:
            return 0
        padding, padded, at = padding + (254 if data[at] == 255 else data[at]), data[at] == 255, at + 1
    if vbr:
        total = 0
        for _ in range(count - 1):
            length, at = _lacing16(data, at, end)
            if length < 0:
                return 0
            total += length
        return count if 0 <= total <= end - at - padding else 0
    frame_bytes = end - at - padding
    return count if frame_bytes >= 0 and frame_bytes % count == 0 and frame_bytes // count <= _OPUS_MAX_BYTES else 0


def _lacing16(data: bytes, at: int, end: int) -> tuple[int, int]:
    """A 1- or 2-byte Opus frame length at ``at`` and the position after it; (-1, at) when the packet ends first."""
    if at >= end:
        return -1, at
    if data[at] < 252:
        return data[at], at + 1
    if at + 1 >= end:
        return -1, at
    return data[at] + 4 * data[at + 1], at + 2


_FLAC_SIZES = (0, 192, 576, 1152, 2304, 4608, -8, -16) + tuple(256 << k for k in range(8))


def _flac_block_size(data: bytes, pos: int, end: int) -> int | None:
    """A FLAC frame's block size from its header (RFC 9639 9.1: sync 0xFFF8/9, block size code, rate code, ...,
    the coded frame or sample number (1-7 bytes, UTF-8 style), then an 8- or 16-bit size - 1 where the code says).
    None where the header does not read."""
    if pos + 5 > end or data[pos] != 0xFF or data[pos + 1] & 0xFE != 0xF8:
        return None
    size = _FLAC_SIZES[data[pos + 2] >> 4]
    if size >= 0:
        return size or None
    lead = data[pos + 4]
    if 0x80 <= lead < 0xC0 or lead == 0xFF:
        return None
    width = 8 - (lead ^ 0xFF).bit_length() if lead >= 0x80 else 1  # leading 1 bits: the coded number's bytes
    at = pos + 4 + width
    if at + (1 if size == -8 else 2) > end:
        return None
    return int.from_bytes(data[at : at + (1 if size == -8 else 2)], "big") + 1
