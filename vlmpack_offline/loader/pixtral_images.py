"""Pixtral / Mistral3 image tensors without torchvision: the PIL image processor as PixtralProcessor drives it.

``PixtralProcessor``'s module imports torchvision, so without it ``AutoProcessor`` cannot build the
processor at all (``ProcessorImages`` needs it). What the processor does with an image is one call of its
image processor with one override (``PixtralProcessor._process_images``)::

    image_processor(images, patch_size=processor.patch_size * processor.spatial_merge_size)
        -> pixel_values [1, 3, H, W] (resized to fit size.longest_edge, sides rounded up to that patch),
           image_sizes  [1, 2]       ((H, W))

so this class loads the folder's image processor with ``AutoImageProcessor`` (transformers picks
``PixtralImageProcessorPil`` without torchvision; it reads either folder layout) and makes that call. The
processor's ``patch_size`` / ``spatial_merge_size`` come from ``model.processor_kwargs``, else
``processor_config.json``'s top level, else PixtralProcessor's defaults (16, 1), as ``families/pixtral.py``
reads them for the count. With torchvision the loader runs the real processor (``ProcessorImages``);
``tests/test_loader_mistral3.py`` checks this class against it image by image.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import torch
from PIL import Image

from ..remote_code import load_pretrained, trusted

__all__ = ["PixtralImages"]

_PROCESSOR_ONLY = ("patch_size", "spatial_merge_size", "image_token", "image_break_token", "image_end_token")


class PixtralImages:
    """``pixel_values`` + ``image_sizes`` of one image, as ``PixtralProcessor`` makes them."""

    fields = frozenset({"pixel_values", "image_sizes"})  # what Mistral3ForConditionalGeneration takes

    def __init__(self, image_processor, patch: int) -> None:
        self.image_processor = image_processor
        self.patch = patch  # processor.patch_size * processor.spatial_merge_size

    @classmethod
    def from_processor_dir(cls, path: str | Path, **processor_kwargs) -> PixtralImages:
        from transformers import AutoImageProcessor

        config_file = Path(path) / "processor_config.json"
        top = json.loads(config_file.read_text()) if config_file.is_file() else {}
        settings = {**top, **processor_kwargs}
        patch = int(settings.get("patch_size") or 16) * int(settings.get("spatial_merge_size") or 1)
        image_kwargs = {k: v for k, v in processor_kwargs.items() if k not in _PROCESSOR_ONLY}
        image_kwargs["trust_remote_code"] = trusted(image_kwargs)
        return cls(load_pretrained(AutoImageProcessor.from_pretrained, str(path), **image_kwargs), patch)

    def image(self, data: bytes, **overrides) -> dict[str, torch.Tensor]:
        """The model's image fields for one image (as opened: no EXIF transpose, like the scan)."""
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            out = self.image_processor(images=[img], patch_size=self.patch, return_tensors="pt", **overrides)
        return {name: out[name] for name in self.fields}

    resized_frames = True  # as MediaProcessor: the encoder reads it before frames(), which refuses any video

    def frames(self, frames, sampling=None) -> dict[str, torch.Tensor]:
        raise ValueError("Pixtral / Mistral3 take no video (the scan drops video samples as unsupported_media)")

    def token_type_ids(self, input_ids: torch.Tensor) -> None:
        """Mistral3 takes no ``token_type_ids``."""
        return None
