"""Media bytes -> vision tensors, the way the model's processor makes them.

Images: ``PIL.Image.open`` (no EXIF transpose: the scan counted tokens from the
untransposed header size) and HF's ``Qwen2VLImageProcessorPil`` loaded from the
processor directory (``AutoProcessor`` needs torchvision, which we do not
require).

Videos (``ProcessorImages``, every family but Qwen-VL): the family's own video processor on the
sampled frames with their ``VideoMetadata`` (needs torchvision; see ``ProcessorImages.frames``).

Videos (``MediaProcessor``, Qwen-VL): HF's video processor needs torchvision too, so frames go through the
same image processor with ``do_resize=False`` (rescale, normalize, patchify of
each frame) after decord decoded them at the shared sampler's frame indices and
PIL resized them (bicubic, like the image path) to the sampler's size. The
per-frame patches are then regrouped in time exactly as HF's
``Qwen2VLVideoProcessor.patchify`` lays them out::

    HF video layout per row:  (grid_t, gh/m, gw/m, m, m) rows x (C, temporal_patch, p, p) values
    image processor per frame: (gh/m, gw/m, m, m)        rows x (C, temporal_patch*, p, p)
                               (* the single frame broadcast over temporal_patch)

so row r of temporal group g takes channel block ``[:, 0]`` of frame ``g*tp + i``
for ``i < tp``; a frame count that is not a multiple of ``tp`` repeats the last
frame (as HF does). Pixel values can differ from torchvision's resize in the
last bits; the grid and the token count are the same.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from ..remote_code import load_pretrained, trusted

__all__ = ["MediaProcessor", "ProcessorImages", "media_processor_for", "regroup_frames"]


def regroup_frames(frame_patches: list[torch.Tensor], *, channels: int, temporal_patch_size: int, patch_size: int) -> torch.Tensor:
    """Per-frame image patches ``[N, C*tp*p*p]`` -> HF video patches ``[ceil(T/tp)*N, C*tp*p*p]``."""
    frames = list(frame_patches)
    if pad := -len(frames) % temporal_patch_size:
        frames += [frames[-1]] * pad
    n = frames[0].shape[0]
    single = [f.view(n, channels, temporal_patch_size, patch_size, patch_size)[:, :, 0] for f in frames]
    groups = []
    for g in range(0, len(single), temporal_patch_size):
        stacked = torch.stack(single[g : g + temporal_patch_size], dim=2)  # [N, C, tp, p, p]
        groups.append(stacked.reshape(n, -1))
    return torch.cat(groups, dim=0)


class MediaProcessor:
    """Turns one media part into the processor's tensors (one image or one video)."""

    def __init__(self, image_processor: Qwen2VLImageProcessorPil) -> None:
        self.image_processor = image_processor
        self.patch_size = int(image_processor.patch_size)
        self.merge_size = int(image_processor.merge_size)
        self.temporal_patch_size = int(image_processor.temporal_patch_size)

    @classmethod
    def from_processor_dir(cls, path: str | Path, **processor_kwargs) -> MediaProcessor:
        """The image processor of ``path``; ``processor_kwargs`` (``min_pixels``, ...) override it as in HF."""
        return cls(Qwen2VLImageProcessorPil.from_pretrained(str(path), **processor_kwargs))

    def image(self, data: bytes, **overrides) -> dict[str, torch.Tensor]:
        """``pixel_values`` ``[N, D]`` and ``image_grid_thw`` ``[1, 3]`` of one image (as opened: no EXIF transpose)."""
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            out = self.image_processor(images=[img], return_tensors="pt", **overrides)
        return dict(out)

    def token_type_ids(self, input_ids: torch.Tensor) -> None:
        """Qwen-VL models take no ``token_type_ids``."""
        return None

    resized_frames = True  # frames() takes the sampled frames already resized to the sampler's size

    def frames(self, frames: np.ndarray, sampling=None) -> dict[str, torch.Tensor]:
        """``pixel_values_videos`` + ``video_grid_thw`` of frames ``[T, H, W, 3]`` already at the sampler's size."""
        t, h, w, _ = frames.shape
        factor = self.patch_size * self.merge_size
        if h % factor or w % factor:
            raise ValueError(f"video frames {h}x{w} are not multiples of {factor}: resize them with the shared sampler first")
        per_frame = self.image_processor(images=list(frames), do_resize=False, return_tensors="pt")
        grid = per_frame["image_grid_thw"][0]
        n = int(grid[1] * grid[2])
        chunks = list(per_frame["pixel_values"].split(n, dim=0))
        patches = regroup_frames(
            chunks, channels=3, temporal_patch_size=self.temporal_patch_size, patch_size=self.patch_size
        )
        grid_t = -(-t // self.temporal_patch_size)
        grid_thw = torch.tensor([[grid_t, int(grid[1]), int(grid[2])]], dtype=torch.long)
        return {"pixel_values_videos": patches, "video_grid_thw": grid_thw}


class ProcessorImages:
    """Image tensors made by the family's own HF processor, for every family but Qwen-VL (GLM-4V's grids too).

    ``AutoProcessor`` of the folder (transformers picks the PIL image processor when
    torchvision is missing); where ``AutoProcessor`` needs torchvision for the family's video
    processor (InternVL, GLM-4V), the folder's own processor class without its video processor
    (``_images_only_processor``). Each image goes through the processor's own call, with a text
    of the one pad token the chat template renders, so the processor's own image defaults
    apply (Gemma3's ``do_convert_rgb``: null in the folder, True in the processor); the
    output keeps the vision fields it hands to the model (``model_input_names`` minus the
    text ones: Gemma3's ``pixel_values``, not its ``num_crops``). Text-aligned fields
    (``token_type_ids``: 1 on the image tokens) are rebuilt per sub-sample by ``token_type_ids``.
    """

    _TEXT_FIELDS = frozenset({"input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids"})

    def __init__(self, processor, image_pad: str) -> None:
        self.processor = processor
        self.image_pad = image_pad
        self.fields = frozenset(processor.model_input_names)
        self._image_ids = tuple(getattr(processor, "image_token_ids", ()) or ())

    @classmethod
    def from_processor_dir(cls, path: str | Path, image_pad: str, **processor_kwargs) -> ProcessorImages:
        from transformers import AutoProcessor
        from transformers.utils import is_torchvision_available

        try:
            processor = load_pretrained(AutoProcessor.from_pretrained, str(path),
                                        **{**processor_kwargs, "trust_remote_code": trusted(processor_kwargs)})
        except (ValueError, OSError, ImportError):  # without torchvision a family's video processor cannot load
            # (InternVL: ValueError; GLM-4V: ImportError from Glm4vVideoProcessor)
            processor = None if is_torchvision_available() else _images_only_processor(Path(path), **processor_kwargs)
            if processor is None:
                raise
        return cls(processor, image_pad)

    def image(self, data: bytes, **overrides) -> dict[str, torch.Tensor]:
        """The model's image fields for one image (as opened: no EXIF transpose, like the scan)."""
        with Image.open(io.BytesIO(data)) as img:
            img.load()
            out = self.processor(text=[self.image_pad], images=[img], return_tensors="pt", **overrides)
        return {name: value for name, value in out.items() if name in self.fields - self._TEXT_FIELDS}

    def images(self, datas: list[bytes]) -> dict[str, torch.Tensor]:
        """The image fields of one sub-sample's images from ONE processor call, the images as one list (as
        ``apply_chat_template`` passes a conversation's): for a family whose processor treats a sample's images
        together (LLaVA-OneVision: ``batch_num_images``; a sample's only image is tiled, the others not)."""
        opened = [Image.open(io.BytesIO(data)) for data in datas]  # as opened: no EXIF transpose, like the scan
        out = self.processor(text=[self.image_pad * len(opened)], images=[opened], return_tensors="pt")
        return {name: value for name, value in out.items() if name in self.fields - self._TEXT_FIELDS}

    resized_frames = False  # frames() takes the sampled frames at their decoded size: the video processor resizes

    def frames(self, frames: np.ndarray, sampling) -> dict[str, torch.Tensor]:
        """The model's video fields (``pixel_values_videos``, ``video_grid_thw``, ...) for one video, made by the
        family's own HF video processor (``processor.video_processor``).

        ``frames``: ``[T, H, W, 3]`` uint8, the frames ``sampling`` (a ``media.VideoSampling``) picked, at
        their decoded size. They go in with their ``VideoMetadata`` (``total_num_frames`` and ``fps`` of the
        source, ``frames_indices``: the sampled indices) and ``do_sample_frames=False``: the processor takes
        exactly these frames, resizes and patchifies them itself, and reads the timestamps from the metadata.
        The family module's count assumed the size ``sampling.resized_*``: a processor that resizes to
        another size raises here instead of handing the model tokens and patches that disagree.
        HF's video processors need torchvision: without it (or for a family without a video processor)
        this raises ``ValueError`` saying so.
        """
        from transformers.video_utils import VideoMetadata

        video_processor = getattr(self.processor, "video_processor", None)
        if video_processor is None:
            from transformers.utils import is_torchvision_available

            why = ("its video processor needs torchvision, which is not installed"
                   if not is_torchvision_available() else "it has no video processor")  # fmt: skip
            raise ValueError(f"{type(self.processor).__name__} cannot make video tensors here: {why}")
        total = sampling.total_frames or max(sampling.frame_indices) + 1
        metadata = VideoMetadata(
            total_num_frames=total, fps=sampling.native_fps, duration=total / sampling.native_fps,
            width=int(frames.shape[2]), height=int(frames.shape[1]), frames_indices=list(sampling.frame_indices),
        )  # fmt: skip
        video_token = getattr(self.processor, "video_token", None)
        if "pixel_values_videos" not in self.fields and isinstance(video_token, str):
            # the processor merges its video processor's output into its own fields (InternVL: each frame
            # is a tile of pixel_values): its own call on the one video token, as image() does for images
            out = self.processor(text=[video_token], videos=[frames], video_metadata=[metadata],
                                 do_sample_frames=False, return_tensors="pt")  # fmt: skip
            return {name: value for name, value in out.items() if name in self.fields - self._TEXT_FIELDS}
        out = video_processor(videos=[frames], video_metadata=[metadata], do_sample_frames=False, return_tensors="pt")
        # the fields the model takes (Kimi-K2.5's processor keeps num_chunks_per_video from it)
        fields = set(video_processor.model_input_names) - set(getattr(self.processor, "unused_input_names", ()))
        result = {name: value for name, value in out.items() if name in fields}
        grid = result.get("video_grid_thw")
        if grid is not None:
            patch, tp, n = int(video_processor.patch_size), int(video_processor.temporal_patch_size), sampling.n_frames
            size = [sampling.resized_height // patch, sampling.resized_width // patch]
            if "num_chunks_per_video" in out:  # Kimi-K2.5: one row per chunk of tp frames (the last may be shorter)
                expected = [[min(tp, n - start), *size] for start in range(0, n, tp)]
            else:  # one row per video, ceil(frames / tp) temporal patches
                expected = [[-(-n // tp), *size]]
            if grid.tolist() != expected:
                raise ValueError(
                    f"{type(video_processor).__name__} made a video grid {grid.tolist()}, the count assumed "
                    f"{expected}: its video settings differ from the scan's"
                )
        return result

    def token_type_ids(self, input_ids: torch.Tensor) -> torch.Tensor | None:
        """``[L]`` 1 on the image tokens, else 0, when the model takes ``token_type_ids`` (Gemma3); else None."""
        if "token_type_ids" not in self.fields:
            return None
        return torch.isin(input_ids, torch.tensor(self._image_ids, dtype=input_ids.dtype)).long()


def _images_only_processor(path: Path, **processor_kwargs):
    """The folder's processor class (by its ``config.json`` model_type) loaded by its own ``from_pretrained``
    with every part but the video processor: images and text go through transformers' own code. None when
    the folder names no processor class transformers has."""
    import json

    import transformers
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING_NAMES

    config = path / "config.json"
    model_type = json.loads(config.read_text()).get("model_type") if config.is_file() else None
    base = getattr(transformers, PROCESSOR_MAPPING_NAMES.get(model_type) or "", None)
    if base is None:
        return None
    parts = [name for name in base.get_attributes() if name != "video_processor"]
    images_only = type(base.__name__, (base,), {"get_attributes": classmethod(lambda cls: list(parts))})
    try:
        return images_only.from_pretrained(str(path), **processor_kwargs)
    except (ValueError, ImportError) as exc:  # the image processor itself needs torchvision (Kimi-K2.5's)
        if "torchvision" not in str(exc):
            raise
        from ..errors import ConfigError

        raise ConfigError(
            f"{path}: the {model_type} image processor needs torchvision, which this environment lacks; the loader "
            f"makes vision tensors with the family's own processor, so install torchvision where the loader runs "
            f"(the scan counts {model_type} without it)"
        ) from None


def media_processor_for(
    family, path: str | Path, *, image_pad: str, **processor_kwargs
) -> MediaProcessor | ProcessorImages:
    """Qwen-VL grids (the Qwen family module only) by ``MediaProcessor``; any other family's images by its own
    processor (``ProcessorImages``), mRoPE or not: GLM-4V's grids come from its own image processor
    (``Glm4vImageProcessorPil``: another smart_resize and pixel bounds than Qwen's)."""
    from ..families.qwen import QwenFamily

    if isinstance(family, QwenFamily):
        return MediaProcessor.from_processor_dir(path, **processor_kwargs)
    from transformers.utils import is_torchvision_available

    from ..families.pixtral import PixtralFamily

    if isinstance(family, PixtralFamily) and not is_torchvision_available():  # PixtralProcessor imports torchvision
        from .pixtral_images import PixtralImages

        return PixtralImages.from_processor_dir(path, **processor_kwargs)
    return ProcessorImages.from_processor_dir(path, image_pad, **processor_kwargs)
