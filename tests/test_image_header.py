"""Image sizes from the container's own header bytes (``media/image_header.py``), checked against PIL.

The oracle everywhere is Pillow itself: ``Image.open(...).size`` on the same bytes, and for bad input the
outcome ``image_size`` had before the header reader existed (PIL's size, or ``corrupt_media`` where PIL
raises or reports an empty size). The corpus is real encoder output written here: Pillow's JPEG / PNG /
WebP / GIF / BMP / TIFF writers and FFmpeg's (through PyAV) for the same formats.
"""

from __future__ import annotations

import io
import random
import struct
import warnings
import zlib
from collections import Counter
from fractions import Fraction

import av
import numpy as np
import pytest
from PIL import Image, ImageCms, ImageOps, PngImagePlugin

from vlmpack_offline.media import image_size
from vlmpack_offline.media.image_header import header_size
from vlmpack_offline.reasons import DropError

SIZES = [(1, 1), (2, 3), (17, 31), (64, 48), (333, 7), (7, 333), (10000, 3), (3, 4000)]
MUST_READ = {"JPEG", "MPO", "PNG", "WEBP", "GIF"}  # the formats a scan meets: never left to PIL


def picture(width: int, height: int, mode: str = "RGB", seed: int = 0) -> Image.Image:
    """Noise with a gradient: real entropy-coded data, not a flat block."""
    rng = np.random.default_rng(seed + width * 7 + height)
    pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels, "RGB").convert(mode)


def with_alpha(image: Image.Image) -> Image.Image:
    """RGBA whose alpha varies (an opaque alpha is dropped by the WebP encoder: no VP8X, no ALPH)."""
    rgba = image.convert("RGBA")
    rgba.putalpha(image.convert("L"))
    return rgba


def encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def exif_block(orientation: int = 6) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation  # Orientation
    exif[0x011A] = 300.0  # XResolution
    exif[0x0128] = 2  # ResolutionUnit: inches
    exif[0x010F] = "a camera"  # Make
    return exif.tobytes()


def ffmpeg_image(codec: str, width: int, height: int, pix_fmt: str) -> bytes:
    """One frame through FFmpeg's own image encoder (PyAV), as a second, independent writer."""
    context = av.CodecContext.create(codec, "w")
    context.width, context.height, context.pix_fmt = width, height, pix_fmt
    context.time_base = Fraction(1, 25)
    frame = av.VideoFrame.from_ndarray(np.asarray(picture(width, height)), format="rgb24").reformat(
        format=pix_fmt
    )
    packets = context.encode(frame) + context.encode(None)
    return b"".join(bytes(packet) for packet in packets)


def corpus() -> list[tuple[str, bytes]]:
    """(name, bytes) for every kind of file the spec covers."""
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    files: list[tuple[str, bytes]] = []
    for width, height in SIZES:
        rgb = picture(width, height)
        tag = f"{width}x{height}"
        files += [
            (f"jpeg baseline {tag}", encode(rgb, "JPEG", quality=90)),
            (f"jpeg progressive {tag}", encode(rgb, "JPEG", progressive=True)),
            (f"jpeg grayscale {tag}", encode(rgb.convert("L"), "JPEG")),
            (f"jpeg cmyk (Adobe APP14) {tag}", encode(rgb.convert("CMYK"), "JPEG")),
            (f"jpeg exif orientation 6 {tag}", encode(rgb, "JPEG", exif=exif_block())),
            (f"jpeg icc {tag}", encode(rgb, "JPEG", icc_profile=srgb)),
            (f"jpeg dpi + comment {tag}", encode(rgb, "JPEG", dpi=(72, 72), comment=b"hello")),
            (f"png rgb {tag}", encode(rgb, "PNG")),
            (f"png tEXt + zTXt {tag}", encode(rgb, "PNG", pnginfo=text_info())),
            (f"png icc {tag}", encode(rgb, "PNG", icc_profile=srgb)),
            (f"png dpi + exif {tag}", encode(rgb, "PNG", dpi=(96, 96), exif=exif_block())),
            (f"webp lossy {tag}", encode(rgb, "WEBP", quality=80)),
            (f"webp lossless {tag}", encode(rgb, "WEBP", lossless=True)),
            (f"webp lossy alpha (VP8X + ALPH) {tag}", encode(with_alpha(rgb), "WEBP", quality=80)),
            (f"webp lossless alpha {tag}", encode(with_alpha(rgb), "WEBP", lossless=True)),
            (f"webp icc + exif (VP8X) {tag}", encode(rgb, "WEBP", icc_profile=srgb, exif=exif_block())),
            (f"gif {tag}", encode(rgb, "GIF")),
            (f"bmp 24-bit {tag}", encode(rgb, "BMP")),
            (f"tiff raw {tag}", encode(rgb, "TIFF")),
        ]
        if width < 10000:  # libjpeg's optimize pass runs out of buffer on a 10000-pixel row (PIL's encoder)
            files.append((f"jpeg optimize 4:4:4 {tag}", encode(rgb, "JPEG", optimize=True, subsampling=0)))
        for mode in ("1", "L", "LA", "P", "RGBA", "I;16"):
            files.append((f"png mode {mode} {tag}", encode(rgb.convert(mode), "PNG")))
        for mode in ("1", "L", "P", "RGBA"):
            files.append((f"bmp mode {mode} {tag}", encode(rgb.convert(mode), "BMP")))
        files.append((f"gif with alpha {tag}", encode(with_alpha(rgb), "GIF")))
    frames = [picture(40, 30, seed=i) for i in range(3)]
    mpo_frames = [picture(40, 30), picture(20, 10, seed=1)]
    files += [
        ("mpo 2 frames", encode(mpo_frames[0], "MPO", save_all=True, append_images=mpo_frames[1:])),
        ("png apng", encode(frames[0], "PNG", save_all=True, append_images=frames[1:])),
        (
            "png apng default image",
            encode(frames[0], "PNG", save_all=True, append_images=frames[1:], default_image=True),
        ),  # fmt: skip
        ("png transparency P", encode(frames[0].convert("P"), "PNG", transparency=3)),
        ("png transparency RGB", encode(frames[0], "PNG", transparency=(1, 2, 3))),
        ("png 16-bit RGB", png_16bit_rgb(23, 9)),
        ("png adam7 interlaced", png_interlaced(frames[0])),
        ("webp animated", encode(frames[0], "WEBP", save_all=True, append_images=frames[1:], duration=50)),
        (
            "webp animated lossless",
            encode(frames[0], "WEBP", save_all=True, append_images=frames[1:], lossless=True),
        ),  # fmt: skip
        (
            "gif animated",
            encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=40, loop=0),
        ),
        ("gif animated with offsets", gif_offset_frames()),
        ("gif first frame beyond the logical screen", gif_small_screen()),
        ("gif comment + transparency", encode(frames[0].convert("P"), "GIF", comment=b"hi", transparency=0)),
        ("bmp top-down", bmp_top_down(frames[0])),
        ("bmp os/2 core header", bmp_core_header(11, 5)),
        ("tiff lzw", encode(frames[0], "TIFF", compression="tiff_lzw")),
        ("tiff deflate", encode(frames[0], "TIFF", compression="tiff_adobe_deflate")),
        ("tiff jpeg", encode(frames[0], "TIFF", compression="jpeg")),
        ("tiff packbits", encode(frames[0], "TIFF", compression="packbits")),
        ("tiff multipage", encode(frames[0], "TIFF", save_all=True, append_images=frames[1:])),
        ("tiff big-endian", tiff_big_endian(frames[0])),
        (
            "jpeg large exif + icc + xmp",
            encode(frames[0], "JPEG", exif=exif_block(3), icc_profile=srgb * 30, xmp=b"<x:xmpmeta/>"),
        ),  # fmt: skip
    ]
    for codec, pix_fmt in [("mjpeg", "yuvj420p"), ("mjpeg", "yuvj444p"), ("png", "rgb24"), ("png", "gray"),
                           ("libwebp", "yuv420p"), ("gif", "rgb8"), ("bmp", "bgr24"), ("tiff", "rgb24")]:  # fmt: skip
        for width, height in [(1, 1), (33, 17), (320, 240)]:
            files.append(
                (f"ffmpeg {codec} {pix_fmt} {width}x{height}", ffmpeg_image(codec, width, height, pix_fmt))
            )
    return files


def text_info() -> PngImagePlugin.PngInfo:
    info = PngImagePlugin.PngInfo()
    info.add_text("Title", "plain tEXt")
    info.add_text("Comment", "compressed zTXt " * 20, zip=True)
    return info


def png_16bit_rgb(width: int, height: int) -> bytes:
    """Pillow writes no 16-bit RGB PNG: the chunks by hand, the pixels deflated for real."""
    rows = b"".join(b"\0" + bytes(range(6 * width)) for _ in range(height))
    return png_from_chunks([(b"IHDR", struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0)),
                            (b"IDAT", zlib.compress(rows)), (b"IEND", b"")])  # fmt: skip


def png_interlaced(image: Image.Image) -> bytes:
    """Adam7: the IHDR's interlace flag set (the header size is the same; PIL reads it from IHDR)."""
    data = bytearray(encode(image, "PNG"))
    data[8 + 8 + 12] = 1
    data[8 + 8 + 13 : 8 + 8 + 17] = zlib.crc32(bytes(data[12:29])).to_bytes(4, "big")
    return bytes(data)


def png_from_chunks(chunks: list[tuple[bytes, bytes]]) -> bytes:
    out = b"\x89PNG\r\n\x1a\n"
    for kind, body in chunks:
        out += len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")
    return out


def gif_offset_frames() -> bytes:
    """Frames that differ only in a corner: Pillow's writer crops them and places them by offset."""
    base = picture(50, 40).convert("P")
    moved = base.copy()
    moved.paste(0, (30, 20, 50, 40))
    return encode(base, "GIF", save_all=True, append_images=[moved], duration=40)


def gif_small_screen() -> bytes:
    """A logical screen smaller than the first frame: PIL reports the frame's extent."""
    data = bytearray(encode(picture(30, 20).convert("P"), "GIF"))
    data[6:10] = struct.pack("<HH", 10, 25)
    return bytes(data)


def bmp_top_down(image: Image.Image) -> bytes:
    """A negative height: rows stored top-down (the same bytes, the sign flipped)."""
    data = bytearray(encode(image, "BMP"))
    height = int.from_bytes(data[22:26], "little", signed=True)
    data[22:26] = (-height).to_bytes(4, "little", signed=True)
    return bytes(data)


def bmp_core_header(width: int, height: int) -> bytes:
    """An OS/2 1.x BMP (12-byte BITMAPCOREHEADER, 16-bit width and height), 24-bit rows."""
    stride = (width * 3 + 3) // 4 * 4
    pixels = bytes(stride * height)
    header = struct.pack("<IHHHH", 12, width, height, 1, 24)
    return b"BM" + struct.pack("<IHHI", 26 + len(pixels), 0, 0, 26) + header + pixels


def tiff_big_endian(image: Image.Image) -> bytes:
    """Motorola byte order ("MM"): libtiff writes it when asked through the tag PIL passes on."""
    from PIL import TiffImagePlugin

    TiffImagePlugin.WRITE_LIBTIFF = False
    out = io.BytesIO()
    image.save(out, "TIFF")
    little = out.getvalue()
    # rewrite the header and every IFD entry of the uncompressed little-endian file in big-endian
    ifd = int.from_bytes(little[4:8], "little")
    count = int.from_bytes(little[ifd : ifd + 2], "little")
    big = bytearray(little)
    big[0:8] = b"MM\0*" + ifd.to_bytes(4, "big")
    big[ifd : ifd + 2] = count.to_bytes(2, "big")
    sizes = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8}
    for entry in range(ifd + 2, ifd + 2 + 12 * count, 12):
        tag, kind, number = struct.unpack_from("<HHI", little, entry)
        width = sizes[kind]
        struct.pack_into(">HHI", big, entry, tag, kind, number)
        inline = width * number <= 4
        values = entry + 8 if inline else int.from_bytes(little[entry + 8 : entry + 12], "little")
        if not inline:
            big[entry + 8 : entry + 12] = values.to_bytes(4, "big")
        step = 4 if kind == 5 else width
        for at in range(values, values + width * number, step):
            if step > 1:
                big[at : at + step] = little[at : at + step][::-1]
    next_ifd = ifd + 2 + 12 * count
    big[next_ifd : next_ifd + 4] = little[next_ifd : next_ifd + 4][::-1]
    return bytes(big)


def pil_outcome(data: bytes) -> tuple[int, int] | str:
    """What PIL alone says (the oracle): its header size, or ``corrupt_media`` where it raises or the size
    is empty (``image_size``'s rule before the header reader)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(io.BytesIO(data)) as image:
                size = image.size
    except Exception:
        return "corrupt_media"
    return size if min(size) > 0 else "corrupt_media"


def our_outcome(data: bytes) -> tuple[int, int] | str:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            size = image_size(data)
    except DropError as exc:
        return exc.reason.value
    return size.width, size.height


@pytest.fixture(scope="module")
def files() -> list[tuple[str, bytes]]:
    return corpus()


def pil_format(data: bytes) -> str:
    with Image.open(io.BytesIO(data)) as image:
        return image.format


def test_every_real_file_gives_pils_size_or_is_left_to_pil(files):
    declined = Counter()
    for name, data in files:
        fast = header_size(data)
        with Image.open(io.BytesIO(data)) as image:
            assert fast is None or fast == image.size, f"{name}: header {fast}, PIL {image.size}"
            fmt = image.format
        if fast is None:
            declined[fmt] += 1
    assert not {fmt: n for fmt, n in declined.items() if fmt in MUST_READ}, declined
    assert declined["TIFF"] > 0  # TIFF is PIL's: the reader does not mirror its IFD rules
    assert len(files) > 250


def test_image_size_agrees_with_pil_on_the_whole_corpus(files):
    for name, data in files:
        assert our_outcome(data) == pil_outcome(data), name


def test_the_size_is_the_untransposed_header_size():
    data = encode(picture(40, 20), "JPEG", exif=exif_block(orientation=6))  # "rotate 90": shown 20x40
    with Image.open(io.BytesIO(data)) as image:
        assert ImageOps.exif_transpose(image).size == (20, 40)
    assert header_size(data) == (40, 20)


def test_an_mpo_reports_its_first_frame():
    data = encode(picture(40, 30), "MPO", save_all=True, append_images=[picture(20, 10, seed=1)])
    assert pil_format(data) == "MPO"
    assert header_size(data) == (40, 30)


def test_a_gif_frame_beyond_the_logical_screen_grows_the_size_as_pil_does():
    data = gif_small_screen()
    assert data[6:10] == struct.pack("<HH", 10, 25)
    assert header_size(data) == (30, 25) == pil_outcome(data)


def test_bmp_top_down_and_os2_headers():
    top_down = bmp_top_down(picture(9, 4))
    assert int.from_bytes(top_down[22:26], "little", signed=True) == -4
    assert header_size(top_down) == (9, 4) == pil_outcome(top_down)
    assert header_size(bmp_core_header(11, 5)) == (11, 5) == pil_outcome(bmp_core_header(11, 5))


SMALL = {
    "jpeg exif": lambda: encode(picture(24, 16), "JPEG", exif=exif_block()),
    "jpeg progressive": lambda: encode(picture(24, 16), "JPEG", progressive=True),
    "png": lambda: encode(picture(24, 16), "PNG", pnginfo=text_info()),
    "webp lossy": lambda: encode(picture(24, 16), "WEBP"),
    "webp alpha": lambda: encode(with_alpha(picture(12, 8)), "WEBP"),
    "webp animated": lambda: encode(
        picture(8, 6), "WEBP", save_all=True, append_images=[picture(8, 6, seed=1)]
    ),
    "gif": lambda: encode(picture(24, 16), "GIF"),
    "bmp": lambda: encode(picture(6, 4), "BMP"),
}


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_every_prefix_of_a_file_gives_pils_outcome(kind):
    """A file cut at every length: the same size or the same drop reason as PIL alone, never a crash."""
    data = SMALL[kind]()
    for cut in range(len(data) + 1):
        assert our_outcome(data[:cut]) == pil_outcome(data[:cut]), f"{kind} cut at {cut} of {len(data)}"


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_every_header_byte_overwritten_gives_pils_outcome(kind):
    """Lying headers: each of the first 200 bytes set to 00, FF and its bits flipped."""
    data = SMALL[kind]()
    for at in range(min(200, len(data))):
        for value in (0x00, 0xFF, data[at] ^ 0xFF, data[at] ^ 0x01):
            lied = data[:at] + bytes([value]) + data[at + 1 :]
            assert our_outcome(lied) == pil_outcome(lied), f"{kind}: byte {at} set to {value:#04x}"


def test_a_65535_square_jpeg_of_2kb_is_the_decompression_bomb_pil_refuses():
    data = bytearray(encode(picture(16, 16), "JPEG"))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 9] = struct.pack(">HH", 65535, 65535)
    assert len(data) < 2048
    assert pil_outcome(bytes(data)) == our_outcome(bytes(data)) == "corrupt_media"


def test_the_bomb_limit_is_read_at_call_time(monkeypatch):
    data = encode(picture(20, 20), "PNG")  # 400 pixels
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 150)  # over 2x: PIL raises
    assert our_outcome(data) == pil_outcome(data) == "corrupt_media"
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 300)  # over 1x: PIL only warns
    with pytest.warns(Image.DecompressionBombWarning):
        assert image_size(data).width == 20
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)
    assert header_size(data) == (20, 20)


def test_a_png_whose_ihdr_is_not_first_is_left_to_pil():
    good = encode(picture(5, 3), "PNG")
    chunks, pos = [], 8
    while pos < len(good):
        length = int.from_bytes(good[pos : pos + 4], "big")
        chunks.append((good[pos + 4 : pos + 8], good[pos + 8 : pos + 8 + length]))
        pos += 12 + length
    text_first = png_from_chunks([(b"tEXt", b"k\0v"), *chunks])
    assert header_size(text_first) is None
    assert our_outcome(text_first) == pil_outcome(text_first)


@pytest.mark.parametrize(
    "magic", [b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF89a", b"RIFF\0\0\0\0WEBPVP8 ", b"BM"]
)
def test_random_bytes_behind_a_magic_give_pils_outcome(magic):
    rng = random.Random(38)
    for length in list(range(0, 64)) + [rng.randrange(64, 4096) for _ in range(200)]:
        data = magic + rng.randbytes(length)
        assert our_outcome(data) == pil_outcome(data), data[:40]


def test_an_exif_block_that_breaks_pils_dpi_read_is_left_to_pil():
    """PIL reads the dpi from EXIF at open when JFIF gave none; an XResolution of one undefined byte makes
    that raise IndexError, which PIL does not catch: the file is ``corrupt_media`` there, so here too."""
    block = exif_block()
    assert block.startswith(b"Exif\0\0MM") and block.count(b"\x01\x1a\x00\x05") == 1  # XResolution, RATIONAL
    block = block.replace(b"\x01\x1a\x00\x05", b"\x01\x1a\x00\x07")  # ... now UNDEFINED: one byte
    data = encode(picture(24, 16), "JPEG", exif=block)
    assert pil_outcome(data) == "corrupt_media"
    assert header_size(data) is None
    assert our_outcome(data) == "corrupt_media"


def test_a_jfif_segment_too_short_for_its_version_is_left_to_pil():
    good = encode(picture(24, 16), "JPEG")
    assert good[2:4] == b"\xff\xe0" and good[6:11] == b"JFIF\0"
    short = good[:2] + b"\xff\xe0\x00\x06JFIF" + good[4 + int.from_bytes(good[4:6], "big") :]
    assert header_size(short) is None
    assert our_outcome(short) == pil_outcome(short) == "corrupt_media"


def test_every_ihdr_depth_colour_type_and_filter_gives_pils_outcome():
    """IHDR fields with their CRC fixed: only PIL's (depth, colour type) pairs and filter method 0 open."""
    rows = zlib.compress(b"\0" * 13 * 3)
    opened = 0
    for depth in (0, 1, 2, 3, 4, 8, 16, 32):
        for colour in range(8):
            for filtering in (0, 1):
                ihdr = struct.pack(">IIBBBBB", 4, 3, depth, colour, 0, filtering, 0)
                data = png_from_chunks([(b"IHDR", ihdr), (b"IDAT", rows), (b"IEND", b"")])
                assert our_outcome(data) == pil_outcome(data), (depth, colour, filtering)
                opened += pil_outcome(data) == (4, 3)
    assert opened == 15  # the PNG spec's 15 valid pairs, filter method 0


def test_a_graphic_control_block_too_short_for_pil_gives_pils_outcome():
    """PIL indexes a GIF's graphic control block (delay at bytes 1-2, the transparent index at 3 when flag
    bit 0 is set): shorter blocks make it raise."""
    good = encode(picture(6, 4).convert("P"), "GIF", duration=100)
    at = good.index(b"\x21\xf9\x04")
    for flags in (0, 1):
        for size in range(6):
            block = bytes([0x21, 0xF9, size, flags]) + b"\0" * max(size - 1, 0) + b"\0"
            data = good[:at] + block + good[at + 8 :]
            assert our_outcome(data) == pil_outcome(data), (flags, size)


@pytest.mark.parametrize("kind", sorted(SMALL))
def test_random_damage_anywhere_gives_pils_outcome(kind):
    """1 to 4 random bytes overwritten anywhere in the file, 300 times (seeded): never a crash, never a
    size PIL would not give."""
    data, rng = SMALL[kind](), random.Random(kind)
    for _ in range(300):
        damaged = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(len(data))] = rng.randrange(256)
        assert our_outcome(bytes(damaged)) == pil_outcome(bytes(damaged)), bytes(damaged)[:64]
