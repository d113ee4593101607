"""``PackBatch``: one pack as model inputs, and how to hand it to an HF model.

::

    sub-samples   A (3 tokens)  B (2)   C (4)
    input_ids     [a a a  b b  c c c c]                [1, S]
    labels        [- - a  - b  - c c c]                [1, S]   (-100 shown as -)
    position_ids  [0 1 2  0 1  0 1 2 3] per rope row   [A, 1, S] (the model's rope index) or [1, S]
    cu_seqlens    [0, 3, 5, 9]                          int32 [n+1]
    max_seqlen    4
    n_images_per_sample [1, 0, 2]; n_videos_per_sample [0, 0, 1]; n_audios_per_sample [0, 1, 0]

``vision`` holds the media tensors of all sub-samples, concatenated in pack
order; ``n_images_per_sample`` / ``n_videos_per_sample`` / ``n_audios_per_sample``
say which rows belong to which sub-sample (an audio field: one row per audio), so a
pipeline-parallel schedule can cut a pack into micro-batches at sub-sample boundaries.

Batches pickle (DataLoader workers send them to the main process): a worker that
built one calls ``ensure_picklable`` first, so a field that cannot cross the
process boundary raises there, with the pack named, instead of failing silently
in the queue's feeder thread (which leaves the main process waiting forever).
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .attention import block_causal_mask, layer_type_masks
from .vision_inputs import VisionInputs

__all__ = ["PackBatch", "PackPosition", "ensure_picklable"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PackPosition:
    """Where a pack sits in its rank's epoch order (set by ``PackDataset``; see its module doc)."""

    epoch: int  # the epoch whose permutation placed this pack
    index: int  # 0-based position in this rank's order for that epoch (= batches the rank yielded before it)
    epoch_len: int  # packs this rank yields per epoch


class _StructurePickler(pickle.Pickler):
    """Pickles everything but array data: tensors and arrays become references (cheap structure check)."""

    def persistent_id(self, obj: Any) -> str | None:
        if isinstance(obj, (torch.Tensor, np.ndarray)):
            return "array"
        return None


def ensure_picklable(obj: Any, what: str) -> None:
    """Raise ``TypeError`` naming ``what`` when ``obj`` cannot be pickled (tensor data is not copied)."""
    try:
        _StructurePickler(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    except Exception as error:  # pickle raises TypeError, AttributeError, PicklingError, ...
        raise TypeError(
            f"{what} cannot be pickled ({type(error).__name__}: {error}), so a DataLoader worker cannot send it "
            "to the main process; keep batch fields to tensors, numbers, strings and plain containers"
        ) from error


@dataclass(frozen=True, slots=True, kw_only=True)
class PackBatch:
    pack_id: int  # the plan's pack id
    sample_ids: tuple[str, ...]  # manifest id per segment ("" for the dummy-image segment)
    input_ids: torch.Tensor  # long [1, S]
    labels: torch.Tensor  # long [1, S], HF convention (unshifted), -100 = not scored
    position_ids: torch.Tensor  # long [A, 1, S] (the model's rope index: 3 for mRoPE) or [1, S]; restart per segment
    cu_seqlens: torch.Tensor  # int32 [n+1], segment boundaries
    max_seqlen: int  # longest segment
    vision: VisionInputs  # pixel_values, image_grid_thw, pixel_values_videos, video_grid_thw, ...
    n_images_per_sample: torch.Tensor  # long [n], images per segment
    n_videos_per_sample: torch.Tensor  # long [n], videos per segment
    n_audios_per_sample: torch.Tensor | None = None  # long [n], audios per segment (the encoder always sets it)
    loss_weights: torch.Tensor | None = None  # float [1, S]: 1/n_label_tokens of its segment, else 0
    n_dummy_segments: int = 0  # trailing segments added by dummy_image_for_text_packs (no loss)
    position: PackPosition | None = None  # epoch + index in the rank's order (PackDataset), for state_dict
    token_type_ids: torch.Tensor | None = None  # long [1, S] for models that take it (Gemma3: 1 on image tokens)
    linear_attention: bool = False  # the model has linear-attention layers: boundaries always passed (model_kwargs)
    sliding_window: int | None = None  # the window of the model's sliding-window layers (Gemma3): masks per layer type
    masks_from_positions: bool = False  # a processor family: HF builds every mask from the restarting positions
    rope_text_row: bool = True  # the model's forward takes a leading text row before its rope rows (RopeIndex)

    @property
    def seq_len(self) -> int:
        return int(self.input_ids.shape[-1])

    @property
    def n_segments(self) -> int:
        return int(self.cu_seqlens.numel() - 1)

    def text_position_ids(self) -> torch.Tensor:
        """``[1, S]`` plain positions restarting at 0 per segment (HF's packed-sequence detection reads these)."""
        starts = self.cu_seqlens[:-1].long()
        lengths = (self.cu_seqlens[1:] - self.cu_seqlens[:-1]).long()
        offsets = torch.repeat_interleave(starts, lengths)
        return (torch.arange(self.seq_len, device=offsets.device) - offsets)[None]

    @property
    def _text_row(self) -> bool:
        """Whether ``hf_position_ids`` leads with the text row HF finds packed sub-samples from (1-D: the row)."""
        return self.position_ids.ndim == 2 or self.rope_text_row

    def segment_index(self) -> torch.Tensor:
        """``int32 [1, S]``: the sub-sample each token belongs to (causal-conv1d's ``seq_idx``)."""
        lengths = (self.cu_seqlens[1:] - self.cu_seqlens[:-1]).long()
        segments = torch.arange(self.n_segments, dtype=torch.int32, device=self.cu_seqlens.device)
        return torch.repeat_interleave(segments, lengths)[None]

    def hf_position_ids(self) -> torch.Tensor:
        """Positions for an HF forward: ``[A + 1, 1, S]`` = text row + the model's ``A`` rope rows.

        HF's mRoPE text models (Qwen-VL's ``[4, 1, S]``, ERNIE-4.5-VL's, Qwen-Omni's) take a leading text row
        and use it (not the rope rows) for packed-sequence masks and flash-attention; models with 1-D
        positions get ``[1, S]``. A model whose forward cannot take the text row (``rope_text_row`` False:
        HunYuan-VL in transformers 5.24) gets its ``A`` rope rows alone.
        """
        if self.position_ids.ndim == 3 and self.rope_text_row:
            return torch.cat([self.text_position_ids()[None], self.position_ids], dim=0)
        return self.position_ids

    def model_kwargs(self, attn_implementation: str = "sdpa", *, with_labels: bool = True) -> dict:
        """Keyword arguments for ``model(**kwargs)`` of an HF VLM with this attention implementation.

        Always: ``input_ids``, ``labels``, ``position_ids`` ``[4, 1, S]`` (text row + mRoPE rows, see
        ``hf_position_ids``), the vision fields, and ``use_cache=False`` (HF skips packed-sequence
        handling when a cache exists).

        * ``sdpa`` / ``eager`` (CPU): ``attention_mask`` = 4D block-diagonal causal bool mask ``[1, 1, S, S]``.
          (Without it HF derives the same block mask from the text row of ``position_ids``.)
        * ``flash_attention_2`` / ``_3``: no mask. ``cu_seq_lens_q/k`` + ``max_length_q/k`` are passed for
          packs without media; with media they are left out, because HF Qwen-VL forwards these kwargs
          into the vision tower too, whose attention sets its own ``cu_seq_lens_q`` (a duplicate keyword).
          HF's flash path then derives the same ``cu_seqlens`` from the text row of ``position_ids``.
        * a model with linear-attention layers (``linear_attention``, Qwen3.5): ``cu_seq_lens_q/k`` and
          ``seq_idx`` always, since nothing else keeps a sub-sample's state inside it: HF hands
          ``cu_seq_lens_q`` to the gated delta rule (flash-linear-attention) and ``seq_idx`` to the short
          convolution before it (causal-conv1d), whose 3-token window would otherwise read the previous
          sub-sample. With those packages HF keeps packed sequences apart; without them it refuses with its
          own error, never mixes them.
        * a model with sliding-window layers (``sliding_window``, Gemma3), ``sdpa`` / ``eager``: one mask per
          layer type (``attention.layer_type_masks``: windowed for the sliding layers, image tokens seeing
          each other both ways where ``token_type_ids`` mark them), as HF builds them for each sub-sample alone.
        * a processor family (``masks_from_positions``: Gemma 4, Molmo2, GLM-5-Next, ...), ``sdpa`` / ``eager``: no
          mask. HF's ``create_causal_mask`` finds the sub-samples from the restarting text positions
          (``masking_utils.find_packed_sequence_indices``) and ANDs that packed mask after the model's own
          overlays (Gemma 4's and Molmo2's bidirectional vision blocks from ``mm_token_type_ids``, sliding
          windows), which a mask of ours would replace. Unless the model cannot take the text row
          (``rope_text_row`` False): then it gets the block-diagonal causal mask, and with flash attention
          ``cu_seq_lens_q/k`` always, as nothing else shows it where the sub-samples are.
        """
        kwargs = {"input_ids": self.input_ids, "position_ids": self.hf_position_ids(), "use_cache": False}
        kwargs.update(self.vision)
        if self.token_type_ids is not None:
            kwargs["token_type_ids"] = self.token_type_ids
        if with_labels:
            kwargs["labels"] = self.labels
        if self.linear_attention:  # recurrent layers see boundaries only here; without them HF would leak
            kwargs.update(  # state across sub-samples, so pass them always (HF refuses if it cannot use them)
                cu_seq_lens_q=self.cu_seqlens, cu_seq_lens_k=self.cu_seqlens,
                max_length_q=self.max_seqlen, max_length_k=self.max_seqlen, seq_idx=self.segment_index(),
            )  # fmt: skip
        if attn_implementation.startswith("flash_attention") or attn_implementation.endswith("varlen"):
            if not len(self.vision) or not self._text_row:
                kwargs.update(
                    cu_seq_lens_q=self.cu_seqlens,
                    cu_seq_lens_k=self.cu_seqlens,
                    max_length_q=self.max_seqlen,
                    max_length_k=self.max_seqlen,
                )
        elif self.masks_from_positions and self._text_row:
            pass  # HF derives each layer's mask from the text row of position_ids (see above)
        elif self.sliding_window:
            kwargs["attention_mask"] = layer_type_masks(
                self.cu_seqlens, sliding_window=self.sliding_window, token_type_ids=self.token_type_ids
            )
        else:
            kwargs["attention_mask"] = block_causal_mask(self.cu_seqlens)
        return kwargs

    def to(self, device: torch.device | str) -> PackBatch:
        def move(t):
            return None if t is None else t.to(device)

        return PackBatch(
            pack_id=self.pack_id,
            sample_ids=self.sample_ids,
            input_ids=move(self.input_ids),
            labels=move(self.labels),
            position_ids=move(self.position_ids),
            cu_seqlens=move(self.cu_seqlens),
            max_seqlen=self.max_seqlen,
            vision=self.vision.to(device),
            n_images_per_sample=move(self.n_images_per_sample),
            n_videos_per_sample=move(self.n_videos_per_sample),
            n_audios_per_sample=move(self.n_audios_per_sample),
            loss_weights=move(self.loss_weights),
            n_dummy_segments=self.n_dummy_segments,
            position=self.position,
            token_type_ids=move(self.token_type_ids),
            linear_attention=self.linear_attention,
            sliding_window=self.sliding_window,
            masks_from_positions=self.masks_from_positions,
            rope_text_row=self.rope_text_row,
        )
