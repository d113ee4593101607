"""Image sizes from header bytes (``media/image_header.py``) against PIL's ``Image.open(...).size``, per kind.

For each kind of file (written here by Pillow's encoders at photo-like sizes), the time per image of:
  * ``header_size(data)``: the header reader alone (None where it leaves the file to PIL);
  * ``image_size(data)``: what the scan calls (the reader, PIL where it declines);
  * ``Image.open(BytesIO(data)).size``: what ``image_size`` did before (the baseline).
Each is the best of ``--repeats`` passes over ``--copies`` copies; the ratios come from the same run. The
sizes are checked equal to PIL's for every file before anything is timed.

    python benchmarks/bench_image_header.py [--copies 200] [--repeats 5]
"""

from __future__ import annotations

import argparse
import io
import time
from collections.abc import Callable

import numpy as np
from PIL import Image, ImageCms

from vlmpack_offline.media import image_size
from vlmpack_offline.media.image_header import header_size


def photo(width: int, height: int, seed: int = 0) -> Image.Image:
    """Smooth gradients with noise: compresses like a photograph, not like a flat block."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x * 255 // max(width, 1), y * 255 // max(height, 1), (x + y) % 256], axis=-1)
    noise = rng.integers(0, 24, (height, width, 3))
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8), "RGB")


def encode(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def kinds() -> dict[str, bytes]:
    small, large = photo(640, 480), photo(1920, 1080, seed=1)
    exif = Image.Exif()
    exif[0x0112], exif[0x010F], exif[0x011A], exif[0x0128] = 6, "a camera", 300.0, 2
    srgb = ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes()
    frames = [photo(320, 240, seed=i) for i in range(3)]
    alpha = small.convert("RGBA")
    alpha.putalpha(small.convert("L"))  # an alpha that varies: VP8X + ALPH (an opaque one is dropped)
    return {
        "jpeg 640x480 (JFIF)": encode(small, "JPEG", quality=90),
        "jpeg 1920x1080 (JFIF)": encode(large, "JPEG", quality=90),
        "jpeg progressive": encode(small, "JPEG", progressive=True),
        "jpeg exif, no JFIF dpi": encode(small, "JPEG", exif=exif.tobytes()),
        "jpeg icc": encode(small, "JPEG", icc_profile=srgb),
        "jpeg cmyk": encode(small.convert("CMYK"), "JPEG"),
        "mpo 2 frames": encode(small, "MPO", save_all=True, append_images=[photo(320, 240)]),
        "png rgb": encode(small, "PNG"),
        "png icc": encode(small, "PNG", icc_profile=srgb),
        "png apng": encode(frames[0], "PNG", save_all=True, append_images=frames[1:]),
        "webp lossy": encode(small, "WEBP", quality=80),
        "webp lossless": encode(small, "WEBP", lossless=True),
        "webp alpha": encode(alpha, "WEBP"),
        "webp animated": encode(frames[0], "WEBP", save_all=True, append_images=frames[1:]),
        "gif": encode(small, "GIF"),
        "bmp": encode(small, "BMP"),
        "tiff (left to PIL)": encode(small, "TIFF"),
    }


def best_per_image(call: Callable[[bytes], object], data: bytes, copies: int, repeats: int) -> float:
    """Seconds per call, best of ``repeats`` passes of ``copies`` calls (distinct bytes objects)."""
    inputs = [bytes(data) for _ in range(copies)]
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for item in inputs:
            call(item)
        best = min(best, time.perf_counter() - start)
    return best / copies


def pil_size(data: bytes) -> tuple[int, int]:
    with Image.open(io.BytesIO(data)) as image:
        return image.size


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--copies", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(
        f"{'kind':26} {'bytes':>8} {'header':>9} {'image_size':>11} {'PIL open':>9} {'PIL/size':>9}  read by"
    )
    for name, data in kinds().items():
        fast = header_size(data)
        size = image_size(data)
        assert (size.width, size.height) == pil_size(data) and fast in (None, pil_size(data)), name
        header = best_per_image(header_size, data, args.copies, args.repeats)
        ours = best_per_image(image_size, data, args.copies, args.repeats)
        pil = best_per_image(pil_size, data, args.copies, args.repeats)
        print(
            f"{name:26} {len(data):8d} {header * 1e6:7.2f}us {ours * 1e6:9.2f}us {pil * 1e6:7.2f}us "
            f"{pil / ours:8.1f}x  {'header' if fast else 'PIL'}"
        )


if __name__ == "__main__":
    main()
