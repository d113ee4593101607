"""Is a media file whole? A walk of its own structure to its end, without decoding a pixel.

The scan reads a header to count tokens, so a file whose header is intact but whose data was cut
(a copy killed half-way, a download that stopped) would count fine and then fail in a DataLoader
worker mid-epoch. Each format below is walked from its first byte to the end its own structure
declares, in time linear in its size (C loops: ``re`` for JPEG's markers, ``zlib.crc32`` for PNG's
chunks; the rest are a few Python steps per chunk). A walk that runs off the end of the bytes is a
``truncated_media`` drop; structure that cannot be a file of that format is ``corrupt_media``::

    JPEG  SOI  segments skipped by length (APPn: an EXIF thumbnail's own FFD9 stays inside)  SOS
          entropy-coded data (FF00 stuffing, FFD0-D7 restarts)  [DHT/SOS ... more scans: progressive]
          EOI (FFD9): the image ends; bytes after it (padding, trailers) are not read, but an MPO's
          further images are, each from where its index (APP2 "MPF") places it
    PNG   signature  IHDR  ...chunks: length, type, data, CRC-32 (each checked)...  IEND  (APNG: same chunks)
    WebP  RIFF <size> WEBP  chunks (fourcc, size, data padded to even) inside the RIFF size, which the file holds
    GIF   header  screen descriptor  [colour table]  blocks: extension / image (sub-blocks to a 0) ...  trailer 3B
    BMP   file header  DIB header: pixel data at its offset, of the size its width, height, depth say (or the
          header's image size, RLE), inside the file

Which format is read from the magic bytes, not the part's extension. Any other format PIL opens (TIFF,
HEIF, ICO, ...) is not walked: its header alone is read, as before, and a cut one shows only under
``scan.decode_check: true``. Videos: ``video_integrity.py``.
"""

from __future__ import annotations

import re
import zlib

from ..reasons import DropError, Reason

__all__ = ["check_image", "check_jpeg", "check_png", "check_webp", "check_gif", "check_bmp"]

# FF then a marker code: not 00 (a stuffed FF data byte), D0-D7 (restart markers inside the entropy-coded data)
# or FF (fill bytes before a marker)
_JPEG_MARKER = re.compile(rb"\xff[\x01-\xcf\xd8-\xfe]")
_MARKER_CODE = bytes(_JPEG_MARKER.fullmatch(bytes([0xFF, c])) is not None for c in range(256))  # by lookup
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def cut_error(part: str, fmt: str, what: str, size: int) -> DropError:
    """``truncated_media``: the walk of ``part`` (a ``fmt`` file of ``size`` bytes) ran off its end at ``what``."""
    return DropError(Reason.TRUNCATED_MEDIA, f"{part}: {fmt} cut short: {what} ({size} bytes)")


def corrupt_error(part: str, fmt: str, what: str) -> DropError:
    """``corrupt_media``: ``part`` holds ``what``, which no ``fmt`` file has."""
    return DropError(Reason.CORRUPT_MEDIA, f"{part}: not a valid {fmt}: {what}")


def check_image(data: bytes, *, part: str = "image") -> str | None:
    """Walk ``data`` by its format (module doc); raises ``DropError`` (``truncated_media`` / ``corrupt_media``).
    Returns the format walked, or None for a format this module does not walk."""
    if data[:2] == b"\xff\xd8":
        check_jpeg(data, part=part)
        return "JPEG"
    if data[:8] == _PNG_SIGNATURE:
        check_png(data, part=part)
        return "PNG"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        check_webp(data, part=part)
        return "WebP"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        check_gif(data, part=part)
        return "GIF"
    if data[:2] == b"BM":
        check_bmp(data, part=part)
        return "BMP"
    return None


def check_jpeg(data: bytes, *, part: str = "image") -> None:
    """Markers from SOI to the first EOI, then each further image an MPO's index lists, the same way::

        FFD8 | FFE1 len EXIF..(thumbnail FFD8..FFD9).. | [FFE2 len "MPF" index] | FFDB len | FFC0 len | FFC4 len
             | FFDA len | entropy-coded data: bytes, FF00, FFD0..FFD7 | (FFC4 len | FFDA len | data)* | FFD9 | ...

    A segment is skipped by its length; after an SOS the next marker is searched past stuffed bytes and
    restarts. The first EOI ends the image: padding and trailers after it are not read, except the images
    an MPO's index (APP2 ``MPF``) places there, each walked from its offset (the index's sizes are not
    trusted: Pillow's own MPO writer records a wrong size for the last image).
    """
    others = _walk_jpeg(data, 0, part=part)
    for number, start in enumerate(others, 2):
        if start >= len(data):
            raise cut_error(part, "MPO", f"its index places image {number} at byte {start}, past the end", len(data))
        _walk_jpeg(data, start, part=part, fmt=f"MPO image {number} of {len(others) + 1}")


def _walk_jpeg(data: bytes, start: int, *, part: str, fmt: str = "JPEG") -> list[int]:
    """Walk one JPEG from its SOI at ``start`` to its EOI; returns where its MPO index places further images."""
    size, pos, scans, others = len(data), start + 2, 0, []
    if data[start : start + 2] != b"\xff\xd8":
        raise corrupt_error(part, fmt, f"no start-of-image marker at byte {start}")
    while True:
        # a segment's marker most often starts right where the previous one ends: read there first (the same
        # match the search gives, without a search), search only past entropy-coded data and stray bytes
        if pos + 1 < size and data[pos] == 0xFF and _MARKER_CODE[data[pos + 1]]:
            at = pos
        else:
            found = _JPEG_MARKER.search(data, pos)
            if found is None:
                where = f"scan {scans}'s entropy-coded data runs" if scans else "its header runs"
                raise cut_error(part, fmt, f"{where} to the end of the file without the end-of-image marker FFD9",
                                size)  # fmt: skip
            at = found.start()
        code = data[at + 1]
        if code == 0xD9:  # EOI
            if not scans:
                raise corrupt_error(part, fmt, f"end-of-image marker at byte {at} before any image data (no SOS)")
            return others
        if code == 0xD8:
            raise corrupt_error(part, fmt, f"a second start-of-image marker at byte {at}, inside the image")
        if code == 0x01:  # TEM: a marker without a length
            pos = at + 2
            continue
        if at + 4 > size:
            raise cut_error(part, fmt, f"the file ends inside marker FF{code:02X} at byte {at}", size)
        length = (data[at + 2] << 8) | data[at + 3]
        if length < 2:
            raise corrupt_error(part, fmt, f"marker FF{code:02X} at byte {at} declares a length of {length}")
        end = at + 2 + length
        if end > size:
            raise cut_error(part, fmt, f"segment FF{code:02X} at byte {at} declares {length} bytes, "
                                     f"the file ends {end - size} bytes before its end", size)  # fmt: skip
        if code == 0xE2 and start == 0 and data[at + 4 : at + 8] == b"MPF\0":
            others = _mpo_offsets(data, at + 8, end)
        scans += code == 0xDA  # SOS: its entropy-coded data follows the segment
        pos = end


def _mpo_offsets(data: bytes, tiff: int, end: int) -> list[int]:
    """Where an MP index (a TIFF IFD at ``tiff``, inside an APP2 segment ending at ``end``) places the images
    after the first: tag B002 holds 16-byte entries (attribute, size, offset from ``tiff``, two links).
    An index this cannot read gives none: PIL's own MPO reader then decides."""
    order = {b"II": "little", b"MM": "big"}.get(bytes(data[tiff : tiff + 2]))
    if order is None or tiff + 8 > end:
        return []

    def number(at: int, width: int) -> int:
        return int.from_bytes(data[at : at + width], order)

    ifd = tiff + number(tiff + 4, 4)
    if ifd + 2 > end:
        return []
    for entry in range(ifd + 2, min(ifd + 2 + 12 * number(ifd, 2), end - 11), 12):
        if number(entry, 2) == 0xB002:
            first, count = tiff + number(entry + 8, 4), number(entry + 4, 4) // 16
            if first + 16 * count > end:
                return []
            return [tiff + number(first + 16 * i + 8, 4) for i in range(1, count)]
    return []


def check_png(data: bytes, *, part: str = "image") -> None:
    """Chunks from the signature to IEND, each CRC-32 checked (APNG's acTL / fcTL / fdAT are chunks too)::

        89 50 4E 47 0D 0A 1A 0A | len(4) "IHDR" data crc(4) | len "IDAT" data crc | ... | 0 "IEND" crc | [anything]
    """
    size, pos, view = len(data), 8, memoryview(data)
    while True:
        if pos + 8 > size:
            last = "the signature" if pos == 8 else "its last whole chunk"
            raise cut_error(part, "PNG", f"the file ends after {last} at byte {pos}, without the IEND chunk", size)
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind = bytes(data[pos + 4 : pos + 8])
        name = kind.decode("latin-1")
        if length >= 2**31:
            raise corrupt_error(part, "PNG", f"chunk {name!r} at byte {pos} declares {length} bytes (over 2**31 - 1)")
        end = pos + 12 + length
        if end > size:
            raise cut_error(part, "PNG", f"chunk {name!r} at byte {pos} declares {length} bytes, "
                                    f"the file ends {end - size} bytes before its end", size)  # fmt: skip
        if zlib.crc32(view[pos + 4 : end - 4]) != int.from_bytes(data[end - 4 : end], "big"):
            raise corrupt_error(part, "PNG", f"chunk {name!r} at byte {pos} fails its CRC-32")
        if pos == 8 and kind != b"IHDR":
            raise corrupt_error(part, "PNG", f"the first chunk is {name!r}, not 'IHDR'")
        if kind == b"IEND":
            return
        pos = end


def check_webp(data: bytes, *, part: str = "image") -> None:
    """The RIFF container: its size field against the file, each chunk inside it::

        "RIFF" size(4, LE) "WEBP" | fourcc(4) size(4, LE) payload [pad byte if size is odd] | ... |  <- 8 + size
        (VP8 / VP8L alone, or VP8X then ICCP, ANIM, ANMF frames, ALPH, VP8 / VP8L, EXIF, XMP)
    """
    size = len(data)
    riff_end = 8 + int.from_bytes(data[4:8], "little")
    if riff_end > size:
        raise cut_error(part, "WebP", f"its RIFF header says {riff_end} bytes, the file holds {size}", size)
    pos, chunks = 12, 0
    while pos < riff_end:
        if pos + 8 > riff_end:
            raise corrupt_error(part, "WebP", f"{riff_end - pos} stray bytes at byte {pos}, too few for a chunk header")
        length = int.from_bytes(data[pos + 4 : pos + 8], "little")
        end = pos + 8 + length
        if end > riff_end:
            fourcc = bytes(data[pos : pos + 4]).decode("latin-1")
            raise corrupt_error(part, "WebP", f"chunk {fourcc!r} at byte {pos} declares {length} bytes, past the RIFF "
                                         f"size ({end} > {riff_end})")  # fmt: skip
        pos, chunks = end + (length & 1), chunks + 1
    if not chunks:
        raise corrupt_error(part, "WebP", "no chunk inside the RIFF container")


def _gif_sub_blocks(data: bytes, pos: int, *, part: str, what: str) -> int:
    """The position after the 0-sized block that ends a run of sub-blocks (size byte + that many bytes)."""
    size = len(data)
    while pos < size:
        length = data[pos]
        pos += 1 + length
        if length == 0:
            return pos
    raise cut_error(part, "GIF", f"the data of {what} runs to the end of the file without its terminator", size)


def check_gif(data: bytes, *, part: str = "image") -> None:
    """Blocks from the screen descriptor to the trailer::

        "GIF89a" | width height flags bg aspect (7) | [global colour table] |
        ( 21 label sub-blocks.. 00  |  2C descriptor(9) [local colour table] lzw-size sub-blocks.. 00 )* | 3B
    """
    size = len(data)
    if size < 13:
        raise cut_error(part, "GIF", "the file ends inside its logical screen descriptor", size)
    flags = data[10]
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    images = 0
    while True:
        if pos >= size:
            raise cut_error(part, "GIF", f"the file ends after {images} image(s) without the trailer byte 3B", size)
        block = data[pos]
        if block == 0x3B:  # trailer
            if not images:
                raise corrupt_error(part, "GIF", "the trailer comes before any image")
            return
        if block == 0x21:  # extension: label, then sub-blocks
            pos = _gif_sub_blocks(data, pos + 2, part=part, what=f"extension {data[pos + 1:pos + 2].hex()}")
        elif block == 0x2C:  # image descriptor: 9 bytes, local colour table, LZW code size, sub-blocks
            if pos + 10 > size:
                raise cut_error(part, "GIF", f"the file ends inside image {images + 1}'s descriptor", size)
            local = data[pos + 9]
            pos += 10 + (3 << ((local & 7) + 1) if local & 0x80 else 0) + 1
            pos = _gif_sub_blocks(data, pos, part=part, what=f"image {images + 1}")
            images += 1
        else:
            raise corrupt_error(part, "GIF", f"byte {pos} is {block:#04x}, neither an extension, an image nor the trailer")


def check_bmp(data: bytes, *, part: str = "image") -> None:
    """The pixel array the headers declare, inside the file::

        "BM" file-size(4) reserved(4) pixel-offset(4) | DIB header: size(4) width height planes bpp
        compression image-size ... | [palette] | pixel rows, each padded to 4 bytes  <- offset + rows * stride
    """
    size = len(data)
    if size < 26:
        raise cut_error(part, "BMP", "the file ends inside its headers", size)
    offset = int.from_bytes(data[10:14], "little")
    header = int.from_bytes(data[14:18], "little")
    if header == 12:  # BITMAPCOREHEADER: 16-bit width and height, no compression
        width, height = int.from_bytes(data[18:20], "little"), int.from_bytes(data[20:22], "little")
        bits, compression, stored = int.from_bytes(data[24:26], "little"), 0, 0
    elif header >= 40:
        if size < 38:
            raise cut_error(part, "BMP", "the file ends inside its headers", size)
        width = int.from_bytes(data[18:22], "little", signed=True)
        height = abs(int.from_bytes(data[22:26], "little", signed=True))
        bits = int.from_bytes(data[28:30], "little")
        compression, stored = int.from_bytes(data[30:34], "little"), int.from_bytes(data[34:38], "little")
    else:
        return  # a header this walk does not know: left to the decoder, as formats that are not walked
    if compression in (0, 3, 6):  # BI_RGB, BI_BITFIELDS, BI_ALPHABITFIELDS: rows of pixels, no compression
        pixels = (width * bits + 31) // 32 * 4 * height
    elif compression in (1, 2):  # RLE8 / RLE4: the header's image size is the compressed size
        pixels = stored
    else:  # JPEG / PNG inside a BMP: not walked
        return
    if offset + pixels > size:
        raise cut_error(part, "BMP", f"its pixel data at byte {offset} needs {pixels} bytes, the file ends "
                                f"{offset + pixels - size} bytes before their end", size)  # fmt: skip
