"""Is a video file whole? Its container's top-level sizes against the file, then its packets against its header.

Two checks, both without decoding (the image formats are ``integrity.py``'s):

1. ``check_container`` (bytes, before the probe): the top-level structure each container declares must fit
   in the file. A cut MP4 is a box that runs past the end, whether its ``moov`` index is at the front or at the
   end (where the probe could not even open it); a Matroska / WebM file a ``Segment`` larger than the file; an
   AVI a ``RIFF`` chunk larger than the file::

       MP4 / MOV   size(4) type(4) [largesize(8)] payload | ... (ftyp, moov, mdat, free, ...) | end of file
       Matroska    EBML header element | Segment: id 18538067, size (vint; "unknown" when streamed) payload |
       AVI         "RIFF" size "AVI " chunks | ["RIFF" size "AVIX" ... (OpenDML)] | [anything]

2. ``check_packets`` (the ``PacketSpan`` the video probe demuxed, ``video_meta._demux``): the packets must reach
   the end the header claims, number as many as a header that counts frames says (MP4 ``stsz``, AVI
   ``dwLength``), and the last one must not be cut short. This is what tells a cut file in a container whose
   sizes say nothing: a Matroska ``Segment`` of unknown size, an AVI whose index was lost with its tail.

The walk runs before the probe, so a cut file never reaches a reader: decord 0.6 dies of a segmentation fault
opening some cut AVIs. A container not listed is left to the probe and ``scan.decode_check``, as before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..reasons import DropError, Reason
from .integrity import corrupt_error, cut_error

__all__ = ["PacketSpan", "check_container", "check_mp4", "check_matroska", "check_avi", "check_packets"]

_MP4_TOP = frozenset({b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"pnot", b"uuid", b"moof", b"styp"})
_BOX_TYPE = re.compile(rb"[\x20-\x7e]{4}")  # a top-level box type is four printable ASCII characters
_EBML = b"\x1a\x45\xdf\xa3"
_SEGMENT = 0x18538067


def check_container(data: bytes, *, part: str = "video") -> str | None:
    """Walk ``data``'s top-level container structure (module doc); returns the container walked or None."""
    if data[4:8] in _MP4_TOP:
        check_mp4(data, part=part)
        return "MP4"
    if data[:4] == _EBML:
        check_matroska(data, part=part)
        return "Matroska"
    if data[:4] == b"RIFF" and data[8:12] == b"AVI ":
        check_avi(data, part=part)
        return "AVI"
    return None


def check_mp4(data: bytes, *, part: str = "video") -> None:
    """Top-level boxes (ISO BMFF, QuickTime atoms) from byte 0: each one's size inside the file, and a ``moov``
    among them (the index a recorder writes last: a file that ends at a box boundary before it was cut there).
    Size 0 runs to the end of the file, size 1 has a 64-bit size after its type. Bytes that do not read as a
    box header (fewer than 8 left, a type that is not text) end the walk: trailing bytes are not ours to judge."""
    size, pos, index = len(data), 0, False
    while pos + 8 <= size:
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind = bytes(data[pos + 4 : pos + 8])
        if not _BOX_TYPE.fullmatch(kind):
            return
        index = index or kind == b"moov"
        header = 8
        if length == 1:
            if pos + 16 > size:
                raise cut_error(part, "MP4", f"the file ends inside box {kind.decode()!r}'s header at byte {pos}", size)
            length, header = int.from_bytes(data[pos + 8 : pos + 16], "big"), 16
        elif length == 0:  # to the end of the file
            pos = size
            break
        if length < header:
            raise corrupt_error(part, "MP4", f"box {kind.decode()!r} at byte {pos} declares {length} bytes")
        if pos + length > size:
            raise cut_error(part, "MP4", f"box {kind.decode()!r} at byte {pos} declares {length} bytes, the file "
                                         f"ends {pos + length - size} bytes before its end", size)  # fmt: skip
        pos += length
    if not index:  # the boxes ran to the end (or to a partial header) without it
        raise cut_error(part, "MP4", f"its boxes end at byte {pos} without the 'moov' index", size)


def _vint(data: bytes, pos: int, *, part: str) -> tuple[int, int]:
    """The EBML variable-length integer at ``pos`` as (its bytes as one number, marker bit included; its width).
    A first byte of 0 has no width marker: (-1, 0)."""
    if data[pos] == 0:
        return -1, 0
    width = 9 - data[pos].bit_length()  # leading zero bits + 1
    if pos + width > len(data):
        raise cut_error(part, "Matroska", f"the file ends inside an element header at byte {pos}", len(data))
    return int.from_bytes(data[pos : pos + width], "big"), width


def check_matroska(data: bytes, *, part: str = "video") -> None:
    """Top-level EBML elements (the EBML header, then the Segment that holds everything else): each one's size
    inside the file, and a Segment among them. A Segment of unknown size (written by a muxer that could not seek
    back) ends the walk, as do bytes that are not an element header (zero padding after the Segment)."""
    size, pos, segment = len(data), 0, False
    while pos < size:
        ident, id_width = _vint(data, pos, part=part)
        if not id_width or pos + id_width >= size:
            if id_width:
                raise cut_error(part, "Matroska", f"the file ends inside an element header at byte {pos}", size)
            return
        raw, width = _vint(data, pos + id_width, part=part)
        if not width:
            return  # not a size: the probe decides what this is
        mask = (1 << (7 * width)) - 1
        segment = segment or ident == _SEGMENT
        if raw & mask == mask:
            return  # "unknown" size, a streamed Segment: nothing declared to compare (check_packets still runs)
        start, value = pos + id_width + width, raw & mask
        if start + value > size:
            what = "Segment" if ident == _SEGMENT else f"element {ident:X}"
            raise cut_error(part, "Matroska", f"its {what} at byte {pos} declares {value} bytes, the file ends "
                                              f"{start + value - size} bytes before its end", size)  # fmt: skip
        pos = start + value
    if not segment:
        raise cut_error(part, "Matroska", f"the file ends at byte {pos}, before its Segment", size)


def check_avi(data: bytes, *, part: str = "video") -> None:
    """The RIFF chunks from byte 0 (``AVI `` then OpenDML's ``AVIX`` ones for files past 1 GiB): each one's
    size inside the file; bytes after them that are not another RIFF chunk are not read."""
    size, pos = len(data), 0
    while pos + 12 <= size and data[pos : pos + 4] == b"RIFF":
        end = pos + 8 + int.from_bytes(data[pos + 4 : pos + 8], "little")
        if end > size:
            form = bytes(data[pos + 8 : pos + 12]).decode("latin-1")
            raise cut_error(part, "AVI", f"its RIFF {form!r} chunk at byte {pos} declares {end - pos - 8} bytes, the "
                                         f"file ends {end - size} bytes before its end", size)  # fmt: skip
        pos = end + (end - pos) % 2


@dataclass(frozen=True, slots=True, kw_only=True)
class PacketSpan:
    """What the video probe's one demux pass saw of the video stream, against what the header claims."""

    packets: int  # video packets the demuxer returned before the data ended (AV_PKT_FLAG_DISCARD ones included)
    end: float  # seconds: the latest packet's pts + duration (0.0 with no packet)
    interval: float  # seconds: the mean spacing of those packets (0.0 with fewer than two)
    claimed_end: float | None  # seconds: start + duration from the header (video_meta._span), None if none
    claimed_packets: int | None  # frames the header counts (MP4 stsz, AVI dwLength), None where it counts none
    last_cut: bool  # the demuxer flagged the last packet corrupt: its bytes run past the end of the data


def tolerance(span: PacketSpan) -> float:
    """How far before the claimed end the packets may stop: half a frame, at least 5 ms. An intact file's last
    packet ends at the header's duration (MP4 ``mdhd`` is the sum of the sample durations; Matroska's per-track
    ``DURATION`` tag is the last timestamp + its duration) up to the container's rounding (Matroska stores
    milliseconds: 1 ms short in the tests' corpus of every container, offsets and variable rates included). A cut
    loses at least one whole frame, twice this up to 100 frames per second; above that the 5 ms floor lets a
    cut of up to 5 ms pass this test, and the frame count, the last packet's cut and the container walk remain."""
    return max(span.interval / 2, 0.005)


def check_packets(span: PacketSpan | None, *, part: str = "video") -> None:
    """``truncated_media`` when the demuxed packets are fewer than the header counts, stop short of the end it
    claims (beyond ``tolerance``), or end in a packet cut short; nothing when there was no demux to judge."""
    if span is None:
        return
    if span.last_cut:
        raise DropError(Reason.TRUNCATED_MEDIA, f"{part}: video cut short: its last packet (of {span.packets}) "
                                                "runs past the end of the file")  # fmt: skip
    if span.claimed_packets and span.packets < span.claimed_packets:
        raise DropError(Reason.TRUNCATED_MEDIA, f"{part}: video cut short: its header counts {span.claimed_packets} "
                                                f"frames, the file holds {span.packets}")  # fmt: skip
    if span.claimed_end is not None and span.claimed_end - span.end > tolerance(span):
        raise DropError(
            Reason.TRUNCATED_MEDIA,
            f"{part}: video cut short: its {span.packets} packets end at {span.end:.3f} s, its header claims "
            f"{span.claimed_end:.3f} s",
        )
