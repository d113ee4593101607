"""The one container that carries a pack's vision tensors, whatever the model family.

Qwen-VL processors produce ``pixel_values`` + ``image_grid_thw`` and
``pixel_values_videos`` + ``video_grid_thw`` (+ ``second_per_grid_ts`` for
Qwen2.5-VL videos); HF-encoder families produce other fields (``image_sizes``,
``pixel_attention_mask``, ...). The loader never names them one by one: it
keeps whatever the processor returned, concatenated over the pack's media in
order, so ``model(**batch.model_kwargs())`` passes them through unchanged.

A processor family (``processor_pack.py``) also keeps the per-token fields its processor hands the
model (``mm_token_type_ids``: Gemma 4's and Molmo2's bidirectional vision blocks; ERNIE-4.5-VL's
``moe_mm_token_type_ids``, which route its MoE experts): ``[1, S]`` over the pack's tokens
(``concat_token_fields``), beside the media fields of the processor's batch call.

It is read-only for users (a ``MappingProxyType`` view) and pickles as the plain
dict behind it, so batches cross DataLoader worker processes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import torch

__all__ = ["VisionInputs", "concat_vision_inputs", "concat_token_fields"]


@dataclass(frozen=True, slots=True)
class VisionInputs(Mapping):
    """Read-only mapping ``field name -> tensor``; empty for a text-only pack."""

    fields: Mapping[str, torch.Tensor] = field(default_factory=dict)  # processor output, concatenated over media

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", MappingProxyType(dict(self.fields)))

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.fields[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.fields)

    def __len__(self) -> int:
        return len(self.fields)

    def __reduce__(self):
        # the MappingProxyType view cannot be pickled (DataLoader workers): pickle the fields as a dict
        return (VisionInputs, (dict(self.fields),))

    def to(self, device: torch.device | str) -> VisionInputs:
        return VisionInputs({k: v.to(device) for k, v in self.fields.items()})


def concat_vision_inputs(parts: list[Mapping[str, torch.Tensor]]) -> VisionInputs:
    """Concatenate per-media processor outputs along dim 0, keeping every field any part has.

    Where the parts differ past dim 0 (Pixtral's per-image pixel sizes, LLaVA-OneVision's patch
    counts) each is zero-padded at the end of those dims to the largest, as the HF processors pad
    the images of one batch (their ``image_sizes`` say what is real). Video pixels are never padded:
    nothing tells the model which frames are real (LLaVA-OneVision's ``[videos, frames, ...]``), so a
    pack whose videos differ in frame count is refused with a ``ValueError`` saying how to avoid it."""
    names: list[str] = []
    for part in parts:
        names.extend(n for n in part if n not in names)
    out = {}
    for name in names:
        tensors = [part[name] for part in parts if name in part]
        if name in _UNPADDED and len({tuple(t.shape[1:]) for t in tensors}) > 1:
            shapes = ", ".join(str(tuple(t.shape[1:])) for t in tensors)
            raise ValueError(
                f"the pack's videos give {name} of shapes {shapes}: this model takes all of a pack's videos as "
                "one tensor, so they must have one frame count; set video.min_frames = video.max_frames and "
                "rerun scan -> write (the family's own recipe does: LLaVA-OneVision 32)"
            )
        out[name] = torch.cat(_padded_to_largest(tensors), dim=0)
    return VisionInputs(out)


def concat_token_fields(parts: list[Mapping[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Per-token fields ``[1, L]`` of each sub-sample, in pack order -> ``[1, S]`` each. Every sub-sample carries
    every field (the processor makes them for text-only samples too), so the tokens line up with ``input_ids``."""
    names = {name for part in parts for name in part}
    missing = [name for name in sorted(names) if any(name not in part for part in parts)]
    if missing:
        raise ValueError(f"per-token fields {missing} are missing for some sub-samples: they would not line up "
                         "with the pack's input_ids")  # fmt: skip
    return {name: torch.cat([part[name] for part in parts], dim=-1) for name in sorted(names)}


_UNPADDED = frozenset({"pixel_values_videos"})


def _padded_to_largest(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    shapes = {tuple(t.shape[1:]) for t in tensors}
    if len(shapes) <= 1:
        return tensors
    largest = [max(sizes) for sizes in zip(*shapes, strict=True)]
    padded = []
    for t in tensors:
        pad: list[int] = []  # F.pad order: last dim first, (before, after) each
        for size, target in zip(reversed(t.shape[1:]), reversed(largest), strict=True):
            pad += [0, target - size]
        padded.append(torch.nn.functional.pad(t, pad))
    return padded
