"""``media.integrity``: every image PIL writes passes whole; the same file cut at any byte does not.

The oracle is PIL's own full decode (every frame, ``LOAD_TRUNCATED_IMAGES`` False). It agrees with the walk
on every cut file but one class, asserted exactly: a cut that removes only structure after the last pixel
(a PNG's IEND chunk, its last data chunk's CRC and the zlib stream's closing checksum; a GIF's last block
terminator and trailer byte). PIL decodes those to the original's very pixels, because it reads neither; the
walk drops them as ``truncated_media``, because the file was cut and what else was lost cannot be told.
"""

from __future__ import annotations

import io

import pytest
from _cut_media import cut_offsets, damaged, images, pil_decodes
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import ExifTags, Image

from vlmpack_offline.media import check_image, image_size
from vlmpack_offline.reasons import DropError, Reason

IMAGES = images()


def _verdict(data: bytes) -> DropError | None:
    """What the scan says of an image part: the walk, then the header probe (``image_size``)."""
    try:
        check_image(data, part="img0")
        image_size(data, part="img0")
    except DropError as exc:
        return exc
    return None


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_every_image_pil_writes_is_walked_whole(name):
    data = IMAGES[name]
    assert pil_decodes(data) is not None
    assert check_image(data, part=name) in ("JPEG", "PNG", "WebP", "GIF", "BMP")


def test_the_corpus_holds_the_traps_a_naive_check_falls_into():
    """What the walk must not be fooled by is really in these files."""
    thumb = IMAGES["exif_thumbnail.jpg"]
    app1 = thumb.index(b"\xff\xe1")
    app1_end = app1 + 2 + int.from_bytes(thumb[app1 + 2 : app1 + 4], "big")
    assert app1 < thumb.index(b"\xff\xd9") < app1_end  # the thumbnail's own EOI, inside APP1
    assert thumb.index(b"\xff\xd9") < len(thumb) - 2
    assert IMAGES["progressive.jpg"].count(b"\xff\xda") > 1  # several scans
    assert sum(IMAGES["restarts.jpg"].count(bytes([0xFF, code])) for code in range(0xD0, 0xD8)) > 0
    mpo = IMAGES["three.mpo"]
    assert Image.open(io.BytesIO(mpo)).n_frames == 3 and mpo.count(b"\xff\xd9") >= 3  # three EOIs, the first early
    assert b"acTL" in IMAGES["animated.apng"] and b"fdAT" in IMAGES["animated.apng"]
    assert b"ANMF" in IMAGES["animated.webp"]
    assert IMAGES["lossless.webp"][12:16] == b"VP8L" and IMAGES["lossy.webp"][12:16] == b"VP8 "
    assert Image.open(io.BytesIO(IMAGES["animated.gif"])).n_frames == 3


def test_padding_after_the_end_is_not_a_cut():
    """Bytes after a JPEG's EOI, a PNG's IEND, a WebP's RIFF or a GIF's trailer (a camera's trailer, zero
    padding from a block device) are not read; PIL decodes such files too."""
    for name in ("baseline.jpg", "rgb.png", "lossy.webp", "still.gif"):
        padded = IMAGES[name] + b"\0" * 100 + b"\xff\xd8 trailer"
        assert pil_decodes(padded) is not None and _verdict(padded) is None, name


@pytest.mark.parametrize("name", sorted(IMAGES))
def test_no_cut_passes_and_pil_agrees_but_on_cuts_after_the_last_pixel(name):
    data = IMAGES[name]
    whole = pil_decodes(data)
    after_last_pixel = []
    for cut in cut_offsets(len(data)):
        piece = data[:cut]
        verdict = _verdict(piece)
        assert verdict is not None, f"{name} cut at {cut} of {len(data)} passes"
        if cut >= 12:  # the format's signature is there, so the walk ran: a cut is called a cut
            assert verdict.reason is Reason.TRUNCATED_MEDIA, (cut, str(verdict))
            assert "img0: " in str(verdict) and "cut short" in str(verdict)
        decoded = pil_decodes(piece)
        if decoded is not None:  # PIL decodes it: only when nothing of the picture was lost
            assert decoded == whole, f"{name} cut at {cut}: PIL decodes other pixels and the walk drops it"
            after_last_pixel.append(len(data) - cut)
    if name.endswith((".png", ".apng")):  # IEND (12), the last IDAT's CRC (4), zlib's adler-32 (4) and end
        assert after_last_pixel and max(after_last_pixel) <= 24
    elif name.endswith(".gif"):  # the last image's block terminator and the trailer
        assert sorted(after_last_pixel) == [1, 2]
    else:
        assert after_last_pixel == []


def test_a_damaged_file_that_is_not_cut_is_corrupt_media():
    png = bytearray(IMAGES["rgb.png"])
    png[60] ^= 0xFF  # inside IDAT: its CRC no longer matches
    assert pil_decodes(bytes(png)) is None  # zlib's own checksum fails in PIL too
    assert _verdict(bytes(png)).reason is Reason.CORRUPT_MEDIA and "CRC" in str(_verdict(bytes(png)))
    assert _verdict(b"\xff\xd8\xff\xd9").reason is Reason.CORRUPT_MEDIA  # SOI, EOI: no image data
    gif = bytearray(IMAGES["still.gif"])
    gif[-1] = 0x00  # the trailer byte replaced: a block that is nothing GIF knows
    assert _verdict(bytes(gif)).reason is Reason.CORRUPT_MEDIA


@pytest.mark.parametrize("name", sorted(n for n in IMAGES if n.endswith(".jpg")))  # (an MPO: its index would move)
@pytest.mark.parametrize("between", [b"\xff", b"\xff\xff\xff", b"\x00\x17"], ids=["fill", "fills", "stray"])
def test_fill_and_stray_bytes_before_a_marker_are_walked_past(name, between):
    """JPEG lets fill bytes (FF) precede a marker, and PIL skips stray bytes before one: the walk finds the
    marker after them too, as PIL's full decode reads the file (the walk reads a marker that starts right where
    the previous segment ends without a search; these bytes make it search there)."""
    data = IMAGES[name]
    starts, at = {}, 2  # each header segment's start by code, walked by the lengths (an EXIF thumbnail's markers
    while data[at + 1] != 0xDA:  # sit inside APP1)
        starts.setdefault(data[at + 1], at)
        at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
    for where in (starts[0xDB], starts[0xC4], at):  # the first DQT and DHT, and SOS
        changed = data[:where] + between + data[where:]
        assert pil_decodes(changed) == pil_decodes(data)
        assert check_image(changed, part=name) == "JPEG"


def test_an_mpo_is_walked_through_every_image_its_index_lists():
    """Cut inside the second or third image: PIL fails on that frame, the walk on that image; the index's
    sizes are not what the walk trusts (PIL's own writer records a wrong size for the last image)."""
    mpo = IMAGES["three.mpo"]
    second = mpo.index(b"\xff\xd8", 2)
    cut = mpo[: second + (len(mpo) - second) // 3]
    assert pil_decodes(cut) is None
    assert "image 2 of 3" in str(_verdict(cut)) or "image 3 of 3" in str(_verdict(cut))


def test_a_format_that_is_not_walked_is_left_to_the_header_probe():
    """TIFF is not walked (docs/errors.md): a cut one passes this check as before; decode_check sees it."""
    out = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 10, 10)).save(out, format="TIFF")
    tiff = out.getvalue()
    assert check_image(tiff) is None and check_image(tiff[: len(tiff) // 2]) is None


def test_the_exif_thumbnail_is_one_pil_reads():
    """The corpus' EXIF block is real EXIF: PIL finds IFD1's JPEGInterchangeFormat and its length, and the bytes
    there are a whole JPEG."""
    data = IMAGES["exif_thumbnail.jpg"]
    ifd1 = Image.open(io.BytesIO(data)).getexif().get_ifd(ExifTags.IFD.IFD1)
    tiff = data.index(b"Exif\0\0") + 6  # EXIF offsets count from the TIFF header
    thumbnail = data[tiff + ifd1[0x0201] : tiff + ifd1[0x0201] + ifd1[0x0202]]
    assert thumbnail.startswith(b"\xff\xd8") and thumbnail.endswith(b"\xff\xd9") and pil_decodes(thumbnail)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(IMAGES)), cut=st.floats(0.0, 1.0),
       flips=st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 255)), max_size=4))  # fmt: skip
def test_damage_of_any_kind_is_a_drop_reason_never_a_crash(name, cut, flips):
    """Cut anywhere and bytes flipped anywhere: the walk returns or raises DropError, nothing else (an
    exception of another type would drop the sample as unreadable_sample, naming nothing useful)."""
    try:
        check_image(damaged(IMAGES[name], cut, flips), part="img0")
    except DropError as exc:
        assert exc.reason in (Reason.TRUNCATED_MEDIA, Reason.CORRUPT_MEDIA)
