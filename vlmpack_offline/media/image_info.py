"""Image size from the file header only: no pixel decode, no EXIF transpose.

Why no transpose: the loader hands the PIL image as opened (untransposed) to the
image processor, and transformers' processors do not transpose a PIL image they
are given, so the header size is exactly the size the processor resizes from.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

from PIL import Image

from ..reasons import DropError, Reason
from .image_header import header_size

__all__ = ["ImageSize", "image_size", "open_image"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageSize:
    width: int  # pixels, as PIL reports them from the header
    height: int  # pixels


def open_image(data: bytes, *, part: str = "image") -> Image.Image:
    """``PIL.Image.open`` on bytes (lazy: pixels are decoded on first access); errors -> ``corrupt_media``."""
    try:
        return Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:  # the loader's PIL would refuse it the same way
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: image too large for PIL ({exc})") from None
    except Exception as exc:  # PIL raises many types for bad files (UnidentifiedImageError, SyntaxError, ...)
        text = re.sub(r"<_io\.BytesIO object at 0x[0-9a-f]+>", "the bytes", str(exc))  # no addresses in rows
        raise DropError(
            Reason.CORRUPT_MEDIA, f"{part}: not a readable image ({type(exc).__name__}: {text})"
        ) from None


def image_size(data: bytes, *, part: str = "image") -> ImageSize:
    """Width and height from the header; raises ``DropError(corrupt_media)`` for unreadable or empty images.

    The container's own header bytes first (``image_header.py``: JPEG, PNG, GIF, WebP, where it is certain
    PIL would report the same size without raising); PIL's ``Image.open`` for everything else."""
    fast = header_size(data)
    if fast is not None:
        return ImageSize(width=fast[0], height=fast[1])
    with open_image(data, part=part) as image:
        width, height = image.size
    if width <= 0 or height <= 0:
        raise DropError(Reason.CORRUPT_MEDIA, f"{part}: image has an empty size {width}x{height}")
    return ImageSize(width=width, height=height)
