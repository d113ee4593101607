"""NeMo Automodel: a vlmpack pack as the item its VLM neat packing builds, collated by its own collater.

Automodel packs online (``components/datasets/vlm/neat_packing_vlm.py``): each sample is tokenized
alone, shifted (``_shift_sample``: ``input_ids[:-1]``, ``labels[1:]``, mRoPE ``position_ids[:, :-1]``)
and the shifted samples are concatenated (``_build_packed_vlm_sample``); ``neat_packed_vlm_collater``
(or ``packed_sequence_thd_vlm_collater``) then pads the packs of a micro-batch to one length. The
same pack from a vlmpack directory::

    vlmpack sub-samples   A (token_len 4)   B (3)        labels HF-style, unshifted
    pack()  input_ids     [a0 a1 a2 | b0 b1]             each sub-sample's last token dropped
            labels        [a1 a2 a3 | b1 b2]             each sub-sample's labels shifted by one
            attention_mask[1  1  1  | 2  2 ]             indexed: sub-sample number, 0 = padding
            position_ids  the sub-sample's own (mRoPE [3, L-1] from the model's rope index, else 0..L-2)
            seq_lens [3, 2], seq_lens_padded [3, 2], n_images, n_videos (per pack), media tensors

So a sub-sample of ``token_len`` L is ``L - 1`` long in Automodel's pack, and a pack of n sub-samples
and ``token_len`` T is ``T - n`` long: never more than the plan's capacity. Nothing is lost: the
dropped position is each sub-sample's last, whose next-token target would be the next sub-sample.
``n_images`` / ``n_videos`` count per pack (Automodel's ``n_images_per_sample`` is per pack row);
``mm_token_type_ids`` mark image (1) and video (2) tokens as the Qwen-VL processors do, zeros for
families whose processors do not return them. ``sequence_alignment`` > 1 pads each sub-sample like
Automodel's THD context parallelism (which it refuses for mRoPE models, as here).

``AutomodelAdapter`` is the DataLoader's ``collate_fn`` over ``PackBatch`` es: it builds each
pack's dict and hands the list to Automodel's own collater, so the batch is exactly what
Automodel's recipes read. Several packs per micro-batch are rows of ``[B, S]`` (padded, never
concatenated), as with Automodel's ``local_batch_size``. Or keep Automodel's collate function and
give it ``PackSequence(..., transform=adapter.pack)`` items.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import torch

from ...errors import ConfigError
from ...optional import require
from ...packed_settings import written_counts
from ..batch import PackBatch
from ..encoder import PackEncoder
from ..labels import IGNORE_INDEX
from .base import Adapter, check_model_family

__all__ = ["AutomodelAdapter", "MEDIA_KEYS"]

# the media fields Automodel's packed sample carries (neat_packing_vlm.MEDIA_KEYS), None when absent
MEDIA_KEYS = ("pixel_values", "image_grid_thw", "image_position_ids", "pixel_values_videos", "video_grid_thw",
              "second_per_grid_ts")  # fmt: skip
COLLATERS = {"neat": "neat_packed_vlm_collater", "thd": "packed_sequence_thd_vlm_collater"}


_AUDIO = ("{what}, and NeMo Automodel's VLM collaters keep only the image and video fields "
          "(neat_packing_vlm.MEDIA_KEYS): its input_features would be dropped without a word. Train audio packs with "
          "the Trainer or PyTorch adapters (docs/training/), or pack without audio")


class AutomodelAdapter(Adapter):
    """``PackBatch`` es -> Automodel's neat-packing micro-batch (module doc)."""

    framework = "NeMo Automodel"

    def __init__(self, encoder: PackEncoder, *, packing_format: Literal["neat", "thd"] = "neat",
                 padding_idx: int = 0, sequence_alignment: int = 1, **collater_kwargs: Any) -> None:
        if packing_format not in COLLATERS:
            raise ConfigError(f"AutomodelAdapter: packing_format must be 'neat' or 'thd', got {packing_format!r}")
        if not isinstance(sequence_alignment, int) or sequence_alignment < 1:
            raise ConfigError(f"AutomodelAdapter: sequence_alignment must be a positive integer, got {sequence_alignment!r}")
        if sequence_alignment > 1 and encoder.rope.is_mrope:
            raise ConfigError(
                "AutomodelAdapter: Automodel has no context-parallel THD packing for mRoPE models (neat_packing_vlm "
                f"refuses it; {encoder.rules.model_type} is one): use packing_format='neat', or cp_size=1"
            )
        packed = encoder.config.data.packed_wds_dir
        if packed and (written_counts(packed) or {}).get("audios"):
            raise ConfigError(_AUDIO.format(what=f"{packed} holds audio"))  # before any step
        self.encoder = encoder
        self.packing_format = packing_format
        self.padding_idx = padding_idx
        self.sequence_alignment = sequence_alignment
        self.collater_kwargs = collater_kwargs

    @classmethod
    def for_packed_dir(cls, packed_wds_dir: str | Path, *, model: Any = None, processor_path: str | Path | None = None,
                       packing_format: Literal["neat", "thd"] = "neat", cp_size: int = 1, padding_idx: int = 0,
                       **collater_kwargs: Any) -> AutomodelAdapter:
        """The adapter for a packed directory; ``model`` is refused when of another family.

        ``cp_size``: Automodel's THD packing aligns every sub-sample to ``2 * cp_size`` (its
        ``NeatPackConfig.build``); the neat format needs no alignment.
        """
        encoder = PackEncoder.from_packed_dir(packed_wds_dir, processor_path)
        if model is not None:
            check_model_family("AutomodelAdapter", packed_wds_dir, encoder.rules.model_type, model)
        alignment = 2 * cp_size if packing_format == "thd" and cp_size > 1 else 1
        return cls(encoder, packing_format=packing_format, padding_idx=padding_idx, sequence_alignment=alignment,
                   **collater_kwargs)  # fmt: skip

    # -- one pack as Automodel's packed item ----------------------------------------------------
    def pack(self, batch: PackBatch) -> dict[str, Any]:
        """The dict ``_build_packed_vlm_sample`` makes for these sub-samples (module doc)."""
        if batch.n_dummy_segments:
            raise ConfigError(
                f"pack {batch.pack_id} has a dummy image segment (EncoderOptions.dummy_image_for_text_packs): "
                "shifted it has no token left for its image; build the encoder without it (Automodel injects "
                "its own fake images: PreTokenizedDatasetWrapper(inject_fake_images=True))"
            )
        if batch.n_audios_per_sample is not None and int(batch.n_audios_per_sample.sum()):
            raise ConfigError(_AUDIO.format(what=f"pack {batch.pack_id} holds audio"))
        bounds = batch.cu_seqlens.tolist()
        ids, labels, mm, segment, positions = [], [], [], [], []
        seq_lens, padded_lens = [], []
        mm_types = self.encoder.rope.mm_token_type_ids(batch.input_ids) if self.encoder.rope.is_mrope else None
        for number, (start, end) in enumerate(zip(bounds[:-1], bounds[1:], strict=True), start=1):
            length = end - start - 1  # shifted
            padded = -(-length // self.sequence_alignment) * self.sequence_alignment
            pad = padded - length
            ids.append(_padded(batch.input_ids[0, start : end - 1], pad, self.padding_idx))
            labels.append(_padded(batch.labels[0, start + 1 : end], pad, IGNORE_INDEX))
            mm.append(_padded(mm_types[0, start : end - 1] if mm_types is not None
                              else torch.zeros(length, dtype=torch.long), pad, 0))  # fmt: skip
            segment.append(torch.full((padded,), number, dtype=torch.long))
            if batch.position_ids.ndim == 3:  # mRoPE [3, 1, S] -> [3, L-1]
                positions.append(batch.position_ids[:, 0, start : end - 1])
            else:
                positions.append(torch.arange(padded, dtype=torch.long))
            seq_lens.append(length)
            padded_lens.append(padded)
        item: dict[str, Any] = {
            "input_ids": torch.cat(ids),
            "labels": torch.cat(labels),
            "attention_mask": torch.cat(segment),
            "mm_token_type_ids": torch.cat(mm),
            "seq_lens": seq_lens,
            "seq_lens_padded": padded_lens,
            "n_images": int(batch.n_images_per_sample.sum()),
            "n_videos": int(batch.n_videos_per_sample.sum()),
            "position_ids": torch.cat(positions, dim=-1).long(),
        }
        for key in MEDIA_KEYS:
            item[key] = batch.vision.get(key)
        for key, value in batch.vision.items():  # other families' fields (image_sizes, ...) travel as they are
            item.setdefault(key, value)
        return item

    # -- the collate_fn ------------------------------------------------------------------------
    def collater(self):
        """Automodel's own collate function for ``packing_format``, with this adapter's settings."""
        module = require("nemo_automodel.components.datasets.vlm.collate_fns", "AutomodelAdapter")
        return functools.partial(getattr(module, COLLATERS[self.packing_format]), padding_idx=self.padding_idx,
                                 **self.collater_kwargs)  # fmt: skip

    def convert(self, batch: PackBatch) -> dict[str, Any]:
        return self([batch])

    def __call__(self, items: PackBatch | Sequence[PackBatch]) -> dict[str, Any]:
        """One pack or a list of packs (rows of one micro-batch, each with its own boundaries)."""
        batches = [items] if isinstance(items, PackBatch) else list(items)
        return self.collater()([self.pack(batch) for batch in batches])


def _padded(values: torch.Tensor, pad: int, fill: int) -> torch.Tensor:
    values = values.long()
    return torch.cat([values, torch.full((pad,), fill, dtype=torch.long)]) if pad else values
