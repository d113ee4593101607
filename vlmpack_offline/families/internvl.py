"""InternVL (``internvl``): an image is cut into tiles from its size alone; each tile is a fixed run of tokens.

Mirrors transformers' ``InternVLProcessor`` (``processing_internvl.py``) with the
``GotOcr2ImageProcessor`` (``image_processing_pil_got_ocr2.py``). The chat template renders one
``<IMG_CONTEXT>`` per image (the pad; the ``context_image_token`` of the tokenizer folder), which the
processor replaces by::

    <img> <IMG_CONTEXT> * (image_seq_length * tiles) </img>

``tiles`` is what ``crop_image_to_patches`` makes of the image: the grid (columns, rows) that
``get_optimal_tiled_canvas`` (imported from transformers, not rewritten) picks for the image's
height and width among the grids of ``min_patches`` .. ``max_patches`` tiles of ``size``, plus one
thumbnail when the grid has more than one tile::

    300 x 1000 (h x w), 448 px tiles, 1..12   grid 3 x 1 -> 3 tiles + thumbnail = 4 -> 1024 <IMG_CONTEXT>
    448 x 448                                  grid 1 x 1 -> 1 tile, no thumbnail -> 256

``max_patches <= 1`` gives one resized tile. ``InternVLProcessor`` passes ``crop_to_patches=True``
on every call (its class-level ``images_kwargs``), so the folder's ``crop_to_patches`` (``false`` in
the InternVL3-hf folders) does not change what the processor makes, and it is not read here. A
``crop_to_patches`` in ``model.processor_kwargs`` does: ``from_pretrained`` hands it to the tokenizer
too, whose init kwargs win over the class default in the processor call, so ``false`` there gives
one resized tile per image (counted as ``max_patches`` 1).

All three tokens are special, so the tokenizer splits the text at them: the compact text is the
rendered text itself (one pad per image) and an image adds ``image_seq_length * tiles + 2`` tokens
where its pad stands. Settings, first found wins: ``image_seq_length`` from
``model.processor_kwargs``, ``processor_config.json``'s top level, the image settings, else 256;
``size`` / ``min_patches`` / ``max_patches`` from ``model.processor_kwargs``, the image settings, else
the image processor's defaults (384 x 384, 1, 12).

Vision encoder (``Size.encoder_*``): every tile (thumbnail included) and every video frame is one batch item of
``InternVLVisionModel`` (``modeling_internvl.py``: ``get_image_features`` runs the vision tower on the tiles of
``pixel_values``), so each is one attention block of its ``(tile / patch)**2`` patches (448 / 14: 1024) plus
the class token ``InternVLVisionEmbeddings`` prepends (1025 tokens). The patch edge is the model's
(``vision_config.patch_size`` of the folder's ``config.json``, else ``InternVLVisionConfig``'s default 14,
that of every published InternVL-hf checkpoint): the processor settings do not carry it.

Video: ``InternVLProcessor.replace_video_token`` puts one block per frame the video processor
returns, joined by newlines, where the template renders ``<video>``::

    <video> -> Frame1: <img> <IMG_CONTEXT> * image_seq_length </img> \n Frame2: <img> ... </img> ...

Every frame is one tile, whatever its size (the video processor resizes it to its own ``size``). The
frames are the shared sampler's (``video:``, then the recipe: 2 fps, 4..768 frames; no pairing, InternVL
has no temporal patches) where the folder's video settings say ``do_sample_frames: false`` (the published
InternVL-hf folders) or nothing. Where they (or ``model.processor_kwargs``) say ``true``, the frames are the
ones ``InternVLVideoProcessor.sample_frames`` (transformers 5.24 ``models/internvl/video_processing_internvl.py``)
picks from the container's frame count and rate, with the folder's ``num_frames`` / ``fps`` / ``initial_shift``
(``processor_frames.py``, written out there: the module imports torchvision)::

    k = num_frames, else int(n_frames / native_fps * fps);  indices = arange(shift, n_frames, n_frames / k)
    3 frames at 5 fps, fps 2: k = 1, frame 1 (the shared sampler takes 3)

and a video it refuses (``k`` 0 or above the frame count) is dropped as ``unsupported_media`` naming the rule;
``video:`` then takes ``sampler`` / ``reader`` alone (``video.sampler: qwen_vl_utils`` keeps the shared sampler).
Either way the loader hands exactly these frames to ``InternVLVideoProcessor`` with ``do_sample_frames=False``
(``VideoSampling.frame_indices``). ``Frame1: ``
joins the text before ``<video>`` in the tokenizer's pre-split (``this:Frame1`` is one piece), so the
compact text keeps it in place (``compact_text``); the rest of the block lies between special tokens and
adds ``frames * (image_seq_length + 2)`` tokens plus ``\nFrame{i}: `` for frames 2..n. The count needs
no torchvision; the loader's video tensors do (``InternVLVideoProcessor`` imports it).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError
from .base import Size, SpecialTokens, encoder_blocks, first_setting, tokenizer_token, vision_patch_size
from .processor_frames import frame_rule

if TYPE_CHECKING:
    from ..tokens.media_info import MediaInfo
    from ..tokens.rules import ModelRules

__all__ = ["INTERNVL", "InternVLFamily", "tiles_for"]

_DEFAULT_SEQ_LENGTH = 256  # InternVLProcessor(image_seq_length=256)
_DEFAULT_TILE = (384, 384)  # GotOcr2ImageProcessor.size (InternVL folders set 448 x 448)
_DEFAULT_MIN_TILES, _DEFAULT_MAX_TILES = 1, 12  # GotOcr2ImageProcessor.min_patches / max_patches
_FRAME = "Frame{}: "  # InternVLProcessor.replace_video_token's text before each frame's <img>


def tiles_for(height: int, width: int, *, tile: tuple[int, int], min_tiles: int, max_tiles: int) -> int:
    """Tiles ``crop_image_to_patches`` makes of a ``height`` x ``width`` image (thumbnail included)."""
    from transformers.models.got_ocr2.image_processing_pil_got_ocr2 import get_optimal_tiled_canvas

    if max_tiles <= 1:  # the image processor resizes to one tile instead of cropping
        return 1
    columns, rows = get_optimal_tiled_canvas((height, width), tile, min_tiles, max_tiles)
    grid = columns * rows
    return grid + 1 if grid != 1 else 1  # the thumbnail joins any grid of more than one tile


class InternVLFamily:
    name = "internvl"
    model_types = frozenset({"internvl"})
    takes_video = True
    # every frame is resized to the tile size by the processor: only the frame choice is ours
    video_fields = frozenset({"fps", "min_frames", "max_frames", "sampler"})
    positions = "1d"

    def settings(self, path: Path, image: dict, kwargs: dict, processor: dict) -> dict:
        seq = first_setting((kwargs, processor, image), "image_seq_length")
        size = first_setting((kwargs, image), "size")
        if size is None:
            tile = _DEFAULT_TILE
        elif isinstance(size, dict) and isinstance(size.get("height"), int) and isinstance(size.get("width"), int):
            tile = (size["height"], size["width"])
        else:
            raise ConfigError(
                f"{path}: the InternVL image processor's size is {size!r}; vlmpack counts tiles of "
                '{"height": H, "width": W} (e.g. {"height": 448, "width": 448}). Fix size in the folder or '
                "model.processor_kwargs"
            )
        low, high = first_setting((kwargs, image), "min_patches"), first_setting((kwargs, image), "max_patches")
        if "crop_to_patches" in kwargs and not kwargs["crop_to_patches"]:  # one resized tile (see the module doc)
            low, high = 1, 1
        from transformers.models.internvl.configuration_internvl import InternVLVisionConfig

        patch = InternVLVisionConfig.patch_size  # (14, 14): the class default, the published checkpoints' value
        return {
            "patch_size": vision_patch_size(path, patch[0] if isinstance(patch, (list, tuple)) else patch),
            "temporal_patch_size": 1,  # a video frame is one tile: the sampler keeps odd frame counts
            "tokens_per_image": int(seq) if seq is not None else _DEFAULT_SEQ_LENGTH,
            "tile_size": tile,
            "min_tiles": int(low) if low is not None else _DEFAULT_MIN_TILES,
            "max_tiles": int(high) if high is not None else _DEFAULT_MAX_TILES,
            # InternVLVideoProcessor's own sampling where its settings say do_sample_frames: true (module doc)
            "frame_rule": frame_rule(path, kwargs, processor="InternVL", internvl=True),
        }

    def special_tokens(self, tokenizer) -> SpecialTokens:
        context = tokenizer_token(tokenizer, "context_image_token", "<IMG_CONTEXT>")
        return SpecialTokens(
            image_pad=context,  # what the template renders and the processor expands
            video_pad=tokenizer_token(tokenizer, "video_token", "<video>"),
            vision_start=tokenizer_token(tokenizer, "start_image_token", "<img>"),
            vision_end=tokenizer_token(tokenizer, "end_image_token", "</img>"),
            image_soft=context,
        )

    def compact_text(self, text: str, special: SpecialTokens) -> str:
        # <img> and </img> are special: they only add tokens where the pad stands; a video's first
        # "Frame1: " is tokenized with the text before it (see the module doc)
        return text.replace(special.video_pad, _FRAME.format(1) + special.video_pad)

    def check(self, rules: ModelRules, media: MediaInfo, *, part: str) -> None:
        return None  # any image or frame size: the processors resize into their tiles

    def tiles(self, rules: ModelRules, media: MediaInfo) -> int:
        """Tiles (thumbnail included) the image processor makes of this image."""
        return tiles_for(media.height, media.width, tile=rules.tile_size, min_tiles=rules.min_tiles,
                         max_tiles=rules.max_tiles)  # fmt: skip

    def replacement_text(self, rules: ModelRules, special: SpecialTokens, media: MediaInfo) -> str:
        if media.kind == "video":  # InternVLProcessor.replace_video_token
            tile = f"{special.vision_start}{special.image_soft * rules.tokens_per_image}{special.vision_end}"
            return "\n".join(_FRAME.format(i + 1) + tile for i in range(media.sampling.n_frames))
        context = special.image_soft * (rules.tokens_per_image * self.tiles(rules, media))
        return f"{special.vision_start}{context}{special.vision_end}"

    def replacement_size(self, rules: ModelRules, media: MediaInfo, count_text: Callable[[str], int]) -> Size:
        height, width = rules.tile_size
        per_tile = (height // rules.patch_size) * (width // rules.patch_size)  # one block each, + the class token
        if media.kind == "video":  # "Frame1: " is in the compact text; "\nFrame{i}: " between </img> and <img>
            frames = media.sampling.n_frames
            text = sum(count_text("\n" + _FRAME.format(i)) for i in range(2, frames + 1))
            media_tokens = rules.tokens_per_image * frames
            return Size(tokens=media_tokens + 2 * frames + text, media_tokens=media_tokens,
                        **encoder_blocks(frames, per_tile, prepended=1))  # fmt: skip
        tiles = self.tiles(rules, media)
        media_tokens = rules.tokens_per_image * tiles
        return Size(tokens=media_tokens + 2, media_tokens=media_tokens,  # + <img> and </img>
                    **encoder_blocks(tiles, per_tile, prepended=1))  # fmt: skip

    def describe(self, rules: ModelRules) -> str:
        """How ``vlmpack scan`` names the count."""
        height, width = rules.tile_size
        if rules.max_tiles <= 1:
            return f"{rules.tokens_per_image} tokens per image, one {height}x{width} tile"
        return (f"{rules.tokens_per_image} tokens per {height}x{width} tile, "
                f"{rules.min_tiles}..{rules.max_tiles} tiles + thumbnail")  # fmt: skip


INTERNVL = InternVLFamily()
