"""Image width and height from the container's own header bytes, or None where PIL must decide.

``image_size`` (``image_info.py``) asks this module first and falls back to ``PIL.Image.open`` whenever
it answers None. So the one rule here: **a size is returned only where ``Image.open`` would return that
same size without raising**; anything unusual, truncated or not mirrored declines. Each reader follows the
steps of Pillow's own plugin ``_open`` (``PIL/JpegImagePlugin.py``, ``PngImagePlugin.py``,
``GifImagePlugin.py``, ``WebPImagePlugin.py`` and, for WebP, libwebp's ``src/demux/demux.c``) as far as the
point where PIL has the size, and declines at each place the plugin could raise::

    JPEG  FFD8FF, markers as PIL walks them (non-FF bytes skipped, FFFF fill, FF00 skipped) up to SOS;
          the last SOFn's size (EXIF thumbnails sit inside APP1 and are skipped by length); an MPO's size is
          its first frame's, as PIL's MpoImageFile keeps it; EXIF without a JFIF dpi is run through PIL's
          own ``_read_dpi_from_exif`` (it may raise on a hostile EXIF: then PIL decides)
    PNG   signature, IHDR first, then every chunk to the first IDAT whole and CRC-checked, as PIL reads them
          (iCCP / zTXt inflated with PIL's own bounded inflate; iTXt, IEND or fdAT before IDAT decline)
    GIF   screen descriptor, blocks to the first image descriptor as GifImageFile.data() reads sub-blocks
          (PIL grows the size to hold that first frame)
    WebP  RIFF, one VP8 / VP8L frame (simple) or a VP8X canvas with its chunks (a still image of the canvas
          size, or ANIM then ANMF frames inside the canvas), each frame header checked the way libwebp's
          VP8GetInfo / VP8LGetInfo check it (PIL's size is the demuxer's canvas)
    BMP   file header, OS/2 or Windows info header (PIL's unsigned width, its top-down height rule);
          bit-field masks and JPEG / PNG inside a BMP decline

TIFF, HEIF/AVIF and every other format decline: PIL reads them as before (TIFF's IFD rules and HEIF's
boxes are not mirrored here). Sizes are untransposed (EXIF orientation is not applied), as PIL reports
them from the header. PIL's decompression-bomb rule: a size above ``Image.MAX_IMAGE_PIXELS`` (read at call
time) declines, so PIL warns or raises exactly as it would. One difference is left on purpose: a malformed
MPO index makes PIL warn and open the file as a plain JPEG of the same size; here there is no warning.
"""

from __future__ import annotations

import re
import zlib

from PIL import Image

__all__ = ["header_size"]

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PNG_CID = re.compile(rb"\w\w\w\w")  # PngImagePlugin.is_cid: PIL raises on any other chunk name
# (bit depth, colour type) -> the mode PIL gives (PngImagePlugin._MODES; 16-bit LA opens as RGBA): the spec's 15
_PNG_MODES = {(1, 0): "1", (2, 0): "L", (4, 0): "L", (8, 0): "L", (16, 0): "I;16", (8, 2): "RGB",
              (16, 2): "RGB", (1, 3): "P", (2, 3): "P", (4, 3): "P", (8, 3): "P", (8, 4): "LA",
              (16, 4): "RGBA", (8, 6): "RGBA", (16, 6): "RGBA"}  # fmt: skip
# chunks whose PIL handler (PngStream.chunk_*) raises below this length
_PNG_MIN_LENGTH = {b"gAMA": 4, b"cHRM": 32, b"sRGB": 1, b"pHYs": 9}
_PNG_DECLINED = {b"iTXt", b"IEND", b"fdAT"}  # PIL decodes / stops / checks more here: it decides
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF, 0xDE}  # DHP too
_JPEG_NO_LENGTH = {0xC8, *range(0xD0, 0xDA), *range(0xF0, 0xFE)}  # PIL's MARKER table: no handler
_WEBP_AREA_LIMIT = 1 << 32  # libwebp's MAX_IMAGE_AREA


def header_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) as ``PIL.Image.open(data).size`` reports it, or None: let PIL open it."""
    if data[:3] == b"\xff\xd8\xff":
        size = _jpeg(data)
    elif data[:8] == _PNG_SIGNATURE:
        size = _png(data)
    elif data[:6] in (b"GIF87a", b"GIF89a"):
        size = _gif(data)
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        size = _webp(data)
    elif data[:2] == b"BM":
        size = _bmp(data)
    else:
        return None
    if size is None or size[0] <= 0 or size[1] <= 0:
        return None
    limit = Image.MAX_IMAGE_PIXELS  # read now: a caller may have changed it
    if limit is not None and size[0] * size[1] > limit:
        return None  # PIL warns (above 1x) or raises DecompressionBombError (above 2x): let it
    return size


def _be16(data: bytes, at: int) -> int:
    return (data[at] << 8) | data[at + 1]


def _jpeg(data: bytes) -> tuple[int, int] | None:
    """JpegImageFile._open's marker loop, to its SOS."""
    end, pos, after_ff = len(data), 3, True  # PIL read FFD8FF and treats the third byte as a marker's FF
    size, exif, dpi, icc = None, None, False, []
    while True:
        if not after_ff:  # PIL reads single bytes until an FF
            pos = data.find(b"\xff", pos) + 1
            if pos == 0:
                return None  # the file ends before SOS: PIL's own verdict (it may still open it)
        if pos >= end:
            return None
        code, pos, after_ff = data[pos], pos + 1, False
        if code == 0xFF:  # fill byte: the next one is the marker code
            after_ff = True
            continue
        if code == 0x00 or code in _JPEG_NO_LENGTH:  # stuffed byte / RSTn, SOI, EOI, JPGn: nothing read
            continue
        if code < 0xC0:
            return None  # PIL: "no marker found"
        if pos + 2 > end:
            return None
        length = _be16(data, pos) - 2
        start, pos = pos + 2, pos + 2 + max(length, 0)
        if length < 0 or pos > end:
            return None  # PIL: a short read raises
        if code in _JPEG_SOF:
            if length < 6 or data[start] != 8 or data[start + 5] not in (1, 3, 4) or (length - 6) % 3:
                return None  # PIL raises: short segment, not 8-bit, odd layer count, ragged component list
            if icc and len(min(icc)) < 14:
                return None  # PIL indexes byte 13 of the first ICC fragment
            size, icc = (_be16(data, start + 3), _be16(data, start + 1)), []
        elif code == 0xDB and not _dqt_ok(data, start, pos):
            return None
        elif 0xE0 <= code <= 0xEF:
            if code == 0xE0 and data.startswith(b"JFIF", start, pos):
                if length < 7:
                    return None
                dpi = dpi or (length >= 12 and data[start + 7] in (1, 2))
            elif code == 0xE1 and data.startswith(b"Exif\0\0", start, pos):
                exif = data[start:pos] if exif is None else exif + data[start + 6 : pos]
            elif code == 0xE2 and data.startswith(b"ICC_PROFILE\0", start, pos):
                icc.append(data[start:pos])
            elif code == 0xED and data.startswith(b"Photoshop 3.0\0", start, pos):
                if not _photoshop_ok(data[start:pos]):
                    return None
            elif code == 0xEE and data.startswith(b"Adobe", start, pos) and length < 7:
                return None
        elif code == 0xDA:  # SOS: PIL stops here
            break
    if size is None:
        return None  # SOS before any SOF: PIL has no mode
    if exif is not None and not dpi and not _exif_dpi_ok(exif):
        return None
    return size


def _dqt_ok(data: bytes, pos: int, end: int) -> bool:
    """DQT's tables fit its segment (PIL: "bad quantization table marker")."""
    while pos < end:
        pos += 1 + (64 if data[pos] < 16 else 128)
        if pos > end:
            return False
    return True


def _photoshop_ok(segment: bytes) -> bool:
    """APP13 "8BIM" resources as PIL reads them: a short number ends its walk quietly (struct.error is
    caught), a missing name-length byte raises (IndexError is not)."""
    offset, size = 14, len(segment)
    while segment[offset : offset + 4] == b"8BIM":
        code, offset = segment[offset + 4 : offset + 6], offset + 6
        if offset > size:
            return True
        if offset >= size:
            return False
        offset += 1 + segment[offset]
        offset += offset & 1
        if offset + 4 > size:
            return True
        length, offset = int.from_bytes(segment[offset : offset + 4], "big"), offset + 4
        if code == b"\x03\xed" and len(segment[offset : offset + length]) < 14:
            return True  # ResolutionInfo too short: struct.error, caught
        offset += length
        offset += offset & 1
    return True


def _exif_dpi_ok(exif: bytes) -> bool:
    """PIL reads the dpi from an EXIF block at open when no JFIF dpi came first; some hostile blocks make
    that raise (outside the errors it catches). Run PIL's own method on a bare image to know."""
    from PIL import JpegImagePlugin

    probe = Image.Image()
    probe.info = {"exif": exif}
    try:
        JpegImagePlugin.JpegImageFile._read_dpi_from_exif(probe)  # type: ignore[arg-type]
    except Exception:
        return False
    return True


def _png(data: bytes) -> tuple[int, int] | None:
    """PngImageFile._open: every chunk before the first IDAT, whole and CRC-checked, each as its handler
    (PngStream.chunk_*) would take it."""
    from PIL import PngImagePlugin

    end, pos, size, mode, text, seen = len(data), 8, None, "", 0, set()
    while True:
        if pos + 8 > end:
            return None
        length, cid = int.from_bytes(data[pos : pos + 4], "big"), data[pos + 4 : pos + 8]
        if not _PNG_CID.match(cid) or (size is None and cid != b"IHDR"):
            return None  # PIL raises on the name; an IHDR not first is left to PIL
        if cid == b"IDAT":
            return size  # PIL stops before reading it
        body, crc = pos + 8, pos + 8 + length
        if crc + 4 > end or zlib.crc32(data[pos + 4 : crc]) != int.from_bytes(data[crc : crc + 4], "big"):
            return None
        if cid == b"IHDR":
            mode = _PNG_MODES.get((data[body + 8], data[body + 9]), "") if length == 13 else ""
            if size is not None or not mode or data[body + 11]:
                return None  # second IHDR, odd length, no PIL mode, unknown filter method
            size = (
                int.from_bytes(data[body : body + 4], "big"),
                int.from_bytes(data[body + 4 : body + 8], "big"),
            )
        elif cid in _PNG_DECLINED:
            return None
        elif cid in (b"acTL", b"fcTL"):
            if cid in seen or not _apng_ok(data, cid, body, length, size):
                return None
        elif length < _PNG_MIN_LENGTH.get(cid, 0):
            return None
        elif cid == b"tRNS" and length < {"1": 2, "L": 2, "I;16": 2, "RGB": 6}.get(mode, 0):
            return None
        elif cid in (b"iCCP", b"zTXt"):
            value = _png_inflated(data[body:crc], cid)
            if value is None:
                return None
            text += len(value) if cid == b"zTXt" and data.find(b"\0", body, crc) != body else 0
        elif cid == b"tEXt":
            zero = data.find(b"\0", body, crc)
            text += crc - zero - 1 if zero > body else 0  # the value's length, where there is a key
        if text > PngImagePlugin.MAX_TEXT_MEMORY:
            return None  # PIL: "Too much memory used in text chunks"
        seen.add(cid)
        pos = crc + 4


def _png_inflated(chunk: bytes, cid: bytes) -> bytes | None:
    """An iCCP profile or zTXt text inflated the way PIL inflates it at open (its own
    ``_safe_zlib_decompress``, bounded by ``MAX_TEXT_CHUNK``), or None where PIL would raise: an unknown
    compression method, or more than that bound. Bad zlib data PIL ignores (the value is dropped)."""
    from PIL import PngImagePlugin

    zero = chunk.find(b"\0")
    if cid == b"iCCP" and (zero < 0 or zero + 1 >= len(chunk)):
        return None  # PIL indexes the method byte after the name
    if zero < 0 or zero + 1 >= len(chunk):
        return b""  # zTXt without a value: method 0, nothing inflated
    if chunk[zero + 1] != 0:
        return None
    try:
        return PngImagePlugin._safe_zlib_decompress(chunk[zero + 2 :])
    except ValueError:
        return None
    except zlib.error:
        return b""


def _apng_ok(data: bytes, cid: bytes, body: int, length: int, size: tuple[int, int]) -> bool:
    """acTL / fcTL before the first IDAT (an APNG whose default image is its first frame), the first of
    each, with what PIL's handlers check (a second one, or a frame count it rejects, makes PIL warn)."""
    if cid == b"acTL":
        return length >= 8 and 0 < int.from_bytes(data[body : body + 4], "big") <= 0x80000000
    if length < 26:
        return False
    seq, width, height, x, y = (int.from_bytes(data[body + i : body + i + 4], "big") for i in range(0, 20, 4))
    return seq == 0 and x + width <= size[0] and y + height <= size[1]


def _gif(data: bytes) -> tuple[int, int] | None:
    """GifImageFile._open and ``_seek(0)``: the screen, then blocks to the first image descriptor."""
    end = len(data)
    if end < 13:
        return None
    width, height, flags = data[6] | data[7] << 8, data[8] | data[9] << 8, data[10]
    pos = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    while pos < end:
        block = data[pos]
        if block == 0x3B:  # trailer before any image: PIL raises
            return None
        if block == 0x2C:  # image descriptor: PIL grows the size to hold the first frame
            if pos + 10 > end:
                return None
            local = data[pos + 9]
            if pos + 10 + (3 << ((local & 7) + 1) if local & 0x80 else 0) >= end:
                return None  # PIL reads the LZW code size byte after the local palette
            right = (data[pos + 1] | data[pos + 2] << 8) + (data[pos + 5] | data[pos + 6] << 8)
            bottom = (data[pos + 3] | data[pos + 4] << 8) + (data[pos + 7] | data[pos + 8] << 8)
            return max(width, right), max(height, bottom)
        if block == 0x21:  # extension: a label, then sub-blocks read as PIL reads them (below)
            if pos + 2 >= end:
                return None
            label = data[pos + 1]
            first, pos = _gif_sub_block(data, pos + 2)
            if label == 0xF9 and first is not None and (len(first) < 3 or first[0] & 1 and len(first) < 4):
                return None  # PIL indexes the delay (and the transparent index) of a short control block
            if label == 0xFE:  # comment: PIL reads sub-blocks to the first empty one
                while first:
                    first, pos = _gif_sub_block(data, pos)
                continue
            if label == 0xFF and first is not None and first.startswith(b"NETSCAPE2.0"):
                _, pos = _gif_sub_block(data, pos)  # the loop count block
            while True:  # then sub-blocks to an empty one: past a first one that was already empty
                block_data, pos = _gif_sub_block(data, pos)
                if not block_data:
                    break
        else:
            pos += 1  # PIL skips any other byte
    return None


def _gif_sub_block(data: bytes, pos: int) -> tuple[bytes | None, int]:
    """GifImageFile.data(): one sub-block (a size byte, that many bytes; short at the end of the file),
    None for a size of 0 or no byte left; and the position after it."""
    if pos >= len(data) or not data[pos]:
        return None, pos + 1
    return data[pos + 1 : pos + 1 + data[pos]], pos + 1 + data[pos]


def _bmp(data: bytes) -> tuple[int, int] | None:
    """BmpImageFile._bitmap: OS/2 (12-byte) or Windows (40+) headers, uncompressed or RLE. PIL reads the
    width as unsigned and a height whose top byte is FF as top-down (2**32 - height); bit-field masks,
    JPEG / PNG inside a BMP and unknown depths decline (PIL checks them against its own tables)."""
    header = int.from_bytes(data[14:18], "little")
    if 14 + max(header, 4) > len(data):
        return None  # PIL: truncated header read
    if header == 12:
        width, height = int.from_bytes(data[18:20], "little"), int.from_bytes(data[20:22], "little")
        bits, compression, colors = int.from_bytes(data[24:26], "little"), 0, 0
    elif header in (40, 52, 56, 64, 108, 124):
        width, height = int.from_bytes(data[18:22], "little"), int.from_bytes(data[22:26], "little")
        height = 2**32 - height if data[25] == 0xFF else height
        bits, compression = int.from_bytes(data[28:30], "little"), int.from_bytes(data[30:34], "little")
        colors = int.from_bytes(data[46:50], "little")
    else:
        return None
    if bits not in (1, 4, 8, 16, 24, 32) or compression not in (0, 1, 2):
        return None
    if bits <= 8 and not 0 < (colors or 1 << bits) <= 65536:
        return None  # PIL: unsupported palette size
    return width, height


def _webp(data: bytes) -> tuple[int, int] | None:
    """The RIFF container as libwebp's demuxer parses it (WebPAnimDecoder, which PIL opens with)."""
    from PIL import WebPImagePlugin

    if not WebPImagePlugin.SUPPORTED:
        return None  # this PIL cannot open WebP at all
    riff_end = 8 + int.from_bytes(data[4:8], "little")
    if riff_end > len(data) or riff_end < 20 or riff_end & 1:
        return None
    chunks = []
    pos = 12
    while pos < riff_end:
        if pos + 8 > riff_end:
            return None
        length = int.from_bytes(data[pos + 4 : pos + 8], "little")
        if pos + 8 + length + (length & 1) > riff_end:
            return None
        chunks.append((data[pos : pos + 4], pos + 8, length))
        pos += 8 + length + (length & 1)
    fourcc = chunks[0][0]
    if fourcc in (b"VP8 ", b"VP8L"):
        return _webp_frame(data, *chunks[0]) if len(chunks) == 1 else None
    if fourcc != b"VP8X" or chunks[0][2] < 10:
        return None
    body = chunks[0][1]
    flags = data[body]
    canvas = (1 + int.from_bytes(data[body + 4 : body + 7], "little"),
              1 + int.from_bytes(data[body + 7 : body + 10], "little"))  # fmt: skip
    if canvas[0] * canvas[1] >= _WEBP_AREA_LIMIT or flags & 0xC1:
        return None  # too large for libwebp, or reserved / fragment bits
    kinds = [kind for kind, _, _ in chunks[1:]]
    if flags & 0x02:  # animation: ANIM, then ANMF frames inside the canvas
        return canvas if _webp_animation_ok(data, chunks[1:], canvas) else None
    images = [(kind, at, length) for kind, at, length in chunks[1:] if kind in (b"VP8 ", b"VP8L")]
    if len(images) != 1 or b"ANMF" in kinds or b"ANIM" in kinds or b"VP8X" in kinds:
        return None
    index = kinds.index(images[0][0])
    if b"ALPH" in kinds and (
        kinds.count(b"ALPH") != 1 or kinds.index(b"ALPH") != index - 1 or images[0][0] != b"VP8 "
    ):
        return None  # alpha must come just before a lossy image
    return canvas if _webp_frame(data, *images[0]) == canvas else None


def _webp_animation_ok(data: bytes, chunks: list[tuple[bytes, int, int]], canvas: tuple[int, int]) -> bool:
    kinds = [kind for kind, _, _ in chunks]
    if kinds.count(b"ANIM") != 1 or b"ANMF" not in kinds or kinds.index(b"ANIM") > kinds.index(b"ANMF"):
        return False
    if (
        any(kind in (b"VP8 ", b"VP8L", b"ALPH", b"VP8X") for kind in kinds)
        or chunks[kinds.index(b"ANIM")][2] < 6
    ):
        return False
    for kind, at, length in chunks:
        if kind != b"ANMF":
            continue
        if length < 16 + 8:
            return False
        x, y = (
            2 * int.from_bytes(data[at : at + 3], "little"),
            2 * int.from_bytes(data[at + 3 : at + 6], "little"),
        )
        width = 1 + int.from_bytes(data[at + 6 : at + 9], "little")
        height = 1 + int.from_bytes(data[at + 9 : at + 12], "little")
        if x + width > canvas[0] or y + height > canvas[1]:
            return False
        sub, pos, stop = [], at + 16, at + length
        while pos < stop:
            size = int.from_bytes(data[pos + 4 : pos + 8], "little")
            if pos + 8 + size > stop:
                return False
            sub.append((data[pos : pos + 4], pos + 8, size))
            pos += 8 + size + (size & 1)
        if pos != stop:
            return False
        names = [name for name, _, _ in sub]
        if names not in ([b"VP8 "], [b"VP8L"], [b"ALPH", b"VP8 "]):
            return False
        if _webp_frame(data, *sub[-1]) != (width, height):
            return False
    return True


def _webp_frame(data: bytes, fourcc: bytes, at: int, length: int) -> tuple[int, int] | None:
    """A VP8 key frame header or a VP8L header, checked as libwebp's VP8GetInfo / VP8LGetInfo check them."""
    if fourcc == b"VP8 ":
        if length < 10 or data[at + 3 : at + 6] != b"\x9d\x01\x2a":
            return None
        bits = data[at] | data[at + 1] << 8 | data[at + 2] << 16
        if bits & 1 or (bits >> 1) & 7 > 3 or not (bits >> 4) & 1 or bits >> 5 >= length:
            return None  # not a key frame, unknown profile, not shown, first partition past the chunk
        width = int.from_bytes(data[at + 6 : at + 8], "little") & 0x3FFF
        height = int.from_bytes(data[at + 8 : at + 10], "little") & 0x3FFF
    else:
        if length < 5 or data[at] != 0x2F:
            return None
        bits = int.from_bytes(data[at + 1 : at + 5], "little")
        if bits >> 29:
            return None  # version must be 0
        width, height = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return (width, height) if width and height else None
