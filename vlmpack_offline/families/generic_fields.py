"""The fields a processor's ``replace_image_token`` / ``replace_video_token`` read, built from sizes alone.

transformers 5.24 splices every media item's text in one place: ``ProcessorMixin.__call__`` runs the image /
video processor, then asks ``replace_image_token(image_inputs, idx)`` / ``replace_video_token(video_inputs,
idx)`` for the item's string (tf/processing_utils.py, ``_process_images`` / ``_process_videos``). That string
is a function of a few fields of the sub-processor's output, never of the pixels. Each adapter here builds
those fields for one output shape from the sub-processor's own size functions, so the processor's own
``replace_*_token`` gives the exact string (start / end / row / timestamp tokens included) with no pixel::

    adapter     picked when the image processor returns   image fields (h, w)            video fields (n frames, h, w)
    grid_thw    image_grid_thw  (Qwen-VL shaped: GLM-5,   image_grid_thw from            video_grid_thw [t, 1, p / t] from
                ERNIE, LFM3, the omni models, HunYuan,    get_number_of_image_patches    get_num_of_video_patches (p), t
                PaddleOCR-VL)                             ([1, 1, p], or [1, gh, gw])    = ceil(n / temporal_patch_size)
    soft_tokens num_soft_tokens_per_image (Gemma4)        _get_num_multimodal_tokens     per-frame soft tokens, the same
                                                          (image_sizes)                  call with video_sizes [(1, h, w)]
    molmo_grids image_grids (Molmo2)                      get_image_grid_and_crops       [n, gh, gw]: each frame resized to
                                                                                         the video processor's square size

Every video field set also carries ``video_metadata`` (the reader's numbers, ``frames_indices`` = the sampled
frames) for the timestamps. The fields are only as good as the proof that checks the whole replacement
against the real processor on generated media (``tokens/proof.py``): an adapter that reads a grid too
coarsely for some processor shows up there, never in a count.

Encoder fields (``Size.encoder_*``, the plan's cost model): the vision encoder's patches before any merge or
pooling, in blocks: one block per temporal patch (grid_thw, as Qwen-VL's ``cu_seqlens``), per image or frame
(soft tokens: soft tokens x pooling**2), per crop (Molmo2: crops x (crop / patch)**2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["FieldAdapter", "ItemFields", "adapter_for"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ItemFields:
    fields: dict[str, Any]  # what replace_image_token / replace_video_token read, for item index 0
    encoder_patches: int  # vision-encoder patches of the item (before merge / pooling)
    encoder_attention: int  # sum over its attention blocks of (patches in the block)**2


def _blocks(blocks: int, patches: int) -> dict[str, int]:
    return {"encoder_patches": blocks * patches, "encoder_attention": blocks * patches**2}


def _setting(kwargs: dict, owner, name: str):
    """A size setting as the sub-processor's size helpers read it: the call's keyword, else the instance's."""
    value = kwargs.get(name)
    return value if value is not None else getattr(owner, name, None)


class _GridThw:
    name = "grid_thw"

    def image(self, processor, height: int, width: int, images_kwargs: dict) -> ItemFields:
        import numpy as np

        patches = processor.image_processor.get_number_of_image_patches(height, width, dict(images_kwargs))
        grid = [1, *patches] if isinstance(patches, tuple | list) else [1, 1, int(patches)]  # HunYuan: (gh, gw)
        total = math.prod(int(g) for g in grid)
        return ItemFields(fields={"image_grid_thw": [np.array(grid)]}, **_blocks(1, total))

    def video(self, processor, n_frames: int, height: int, width: int, metadata, videos_kwargs: dict) -> ItemFields:
        import numpy as np

        video_processor = processor.video_processor
        patches = int(video_processor.get_num_of_video_patches(n_frames, height, width, dict(videos_kwargs)))
        temporal = int(_setting(videos_kwargs, video_processor, "temporal_patch_size") or 1)
        t = -(-n_frames // temporal)
        grid = np.array([t, 1, patches // t])
        return ItemFields(fields={"video_grid_thw": [grid], "video_metadata": [metadata]}, **_blocks(t, patches // t))


class _SoftTokens:
    name = "soft_tokens"

    def image(self, processor, height: int, width: int, images_kwargs: dict) -> ItemFields:
        tokens = int(processor._get_num_multimodal_tokens(image_sizes=[(height, width)]).num_image_tokens[0])
        pooling = int(_setting(images_kwargs, processor.image_processor, "pooling_kernel_size") or 1)
        return ItemFields(fields={"num_soft_tokens_per_image": [tokens]}, **_blocks(1, tokens * pooling**2))

    def video(self, processor, n_frames: int, height: int, width: int, metadata, videos_kwargs: dict) -> ItemFields:
        per_frame = int(processor._get_num_multimodal_tokens(video_sizes=[(1, height, width)]).num_video_tokens[0])
        pooling = int(_setting(videos_kwargs, processor.video_processor, "pooling_kernel_size") or 1)
        fields = {"num_soft_tokens_per_video": [per_frame], "video_metadata": [metadata]}
        return ItemFields(fields=fields, **_blocks(n_frames, per_frame * pooling**2))


class _MolmoGrids:
    name = "molmo_grids"

    def image(self, processor, height: int, width: int, images_kwargs: dict) -> ItemFields:
        image_processor = processor.image_processor
        grid, crops = image_processor.get_image_grid_and_crops(height, width, dict(images_kwargs))
        size = _setting(images_kwargs, image_processor, "size")
        patch = int(_setting(images_kwargs, image_processor, "patch_size"))
        crop = (size["height"] // patch) * (size["width"] // patch)
        return ItemFields(fields={"image_grids": [list(grid)]}, **_blocks(int(crops), crop))

    def video(self, processor, n_frames: int, height: int, width: int, metadata, videos_kwargs: dict) -> ItemFields:
        """Molmo2VideoProcessor resizes every frame to its square ``size`` and pools its patch grid by
        ``pooling_size`` (tf/models/molmo2/video_processing_molmo2.py, ``_preprocess``: ``arange_for_pooling``
        pads the grid up to whole windows): [n, ceil(rows / pool_h), ceil(cols / pool_w)]."""
        import numpy as np

        video_processor = processor.video_processor
        size = _setting(videos_kwargs, video_processor, "size")
        patch = int(_setting(videos_kwargs, video_processor, "patch_size"))
        pool_h, pool_w = _setting(videos_kwargs, video_processor, "pooling_size")
        rows, cols = size["height"] // patch, size["width"] // patch
        grid = np.array([n_frames, -(-rows // pool_h), -(-cols // pool_w)])
        return ItemFields(fields={"video_grids": [grid], "video_metadata": [metadata]}, **_blocks(n_frames, rows * cols))


FieldAdapter = _GridThw | _SoftTokens | _MolmoGrids

_BY_OUTPUT = (("image_grid_thw", _GridThw()), ("num_soft_tokens_per_image", _SoftTokens()), ("image_grids", _MolmoGrids()))
_BY_VIDEO_OUTPUT = (("video_grid_thw", _GridThw()), ("video_grids", _MolmoGrids()))


def adapter_for(processor) -> tuple[FieldAdapter | None, str]:
    """The adapter for this processor's output shape, from the field names its image processor (else its video
    processor) says it returns (``model_input_names``), and why there is none."""
    image_processor = getattr(processor, "image_processor", None)
    video_processor = getattr(processor, "video_processor", None)
    names = set(getattr(image_processor, "model_input_names", None) or ())
    for field, adapter in _BY_OUTPUT:
        if field in names:
            return adapter, ""
    video_names = set(getattr(video_processor, "model_input_names", None) or ())
    for field, adapter in _BY_VIDEO_OUTPUT:
        if image_processor is None and field in video_names:
            return adapter, ""
    owner = image_processor if image_processor is not None else video_processor
    return None, (f"no generic rule: {type(owner).__name__} returns {sorted(names or video_names)}, none of the "
                  f"fields the generic path builds from sizes ({', '.join(f for f, _ in _BY_OUTPUT)})")  # fmt: skip
