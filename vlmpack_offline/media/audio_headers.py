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
write into the first frame). ``audio.probe_audio`` turns these into sample counts where they prove one.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from .integrity import corrupt_error, cut_error
from .video_integrity import check_container

__all__ = ["Walked", "Mp3Tag", "walk", "mp3_tag"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Walked:
    """What the structure walk read; every field None where the format has no such thing."""

    wav_data: int | None = None  # WAV: bytes of sample data FFmpeg reads (the data chunk's, or to the end of file)
    wav_frame: int | None = None  # WAV: bytes per sample frame, when block_align == channels * bits / 8 agree
    ogg_granule: int | None = None  # Ogg: the last page's granule position (samples at 48 kHz for Opus)
    ogg_serials: int = 0  # Ogg: logical streams in the file (chained or multiplexed when more than one)
    opus_preskip: int | None = None  # Ogg: the OpusHead pre-skip when the first page holds one (RFC 7845)


@dataclass(frozen=True, slots=True, kw_only=True)
class Mp3Tag:
    """The first frame's Xing / Info header (LAME's, or FFmpeg's mp3 muxer's)."""

    frames: int  # MPEG frames in the file, the tag's own frame excluded
    audio_bytes: int | None  # bytes from the tag's frame to the last frame's end (None: the field is absent)
    gapless: bool  # a LAME / Lavf / Lavc extension (encoder delay and padding) follows: FFmpeg trims by it
    held: int  # bytes from the tag's frame to the end of the data, ID3v1 / APE trailers excluded


def walk(data: bytes, *, part: str) -> Walked:
    """Walk ``data``'s container structure to its end (module doc); ``DropError`` when it is cut short."""
    if check_container(data, part=part):  # MP4 / M4A, Matroska / WebM, AVI
        return Walked()
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
