"""A processor family's pack: the sub-samples through the family's own HF processor, as one batch.

For a model type without a hand-written module in ``families/`` (Gemma 4, GLM-5-Next, Molmo2,
ERNIE-4.5-VL, LFM3-VL, Qwen-Omni, ...) nothing of ours expands media: the family's processor does, on
each sub-sample's rendered chat and decoded media, the same inputs the scan counted::

    text      the chat template rendered by the scan's own renderer (one placeholder per media item)
    images    as PIL opens them (no EXIF transpose), as the scan saw them
    videos    the frames the scan's sampling chose (the scan's own probe: the processor's frame rule or the
              shared sampler), at the sampling's size, with VideoMetadata(frames_indices, fps, total) and
              do_sample_frames=False: the processor takes exactly these frames and their timestamps

The pack's sub-samples go through ONE processor call, as a batch of samples (``text=[...]``, each
sample's images and videos nested), the way HF batches samples for its models: fields that index
across a batch come out consistent (Molmo2's ``image_token_pooling`` points into the batch's crops),
and each row is the sub-sample alone (tests/test_packed_forward_2026.py compares every row with
the processor called on that sub-sample alone). Per row, padding removed by ``attention_mask``::

    input_ids           checked against the planned token_len (LengthMismatchError)
    labels              the assistant spans of the rendered text carried through the processor's own
                        replacements (``text_replacement_offsets``) onto its tokens; media tokens never scored
    per-token fields    mm_token_type_ids, moe_mm_token_type_ids (ERNIE's MoE routing), token_type_ids:
                        [1, S] over the pack, in the vision container
    media fields        every field of model_input_names the model's forward takes (pixel_values,
                        image_grid_thw, video_second_per_grid, image_position_ids, num_frames_per_video, ...),
                        as the batch call made them (Molmo2's forward refuses images and videos in one call:
                        its packs need ``packing.group_by: media_type``, the default)
    positions           the model's rope index on each row alone (``RopeIndex.positions`` on the row's ids,
                        token fields and its own items of the per-image / per-video fields): a batch call
                        numbers some axes across the batch (HunYuan-VL's image-index axis counts the batch's
                        images), so the batch's positions are not each sample's; 1-D for models without one
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import LengthMismatchError
from ..tokens.counter import _CharTokens, _with_turn_ends, render_or_drop
from .labels import sub_sample_labels
from .rope import RopeIndex

__all__ = ["ProcessorPack", "SubSampleMedia", "Row", "is_token_field"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SubSampleMedia:
    """One sub-sample's processor inputs, decoded."""

    sample_id: str
    conversation: Any  # conversation.Conversation
    token_len: int  # the plan's
    images: tuple[Any, ...]  # PIL images, in the conversation's order
    videos: tuple[np.ndarray, ...]  # [T, H, W, 3] uint8 frames per video
    video_metadata: tuple[Any, ...]  # transformers VideoMetadata per video


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One sub-sample as the processor made it."""

    input_ids: torch.Tensor  # long [L]
    labels: torch.Tensor  # long [L]
    positions: torch.Tensor  # [A, 1, L] (rope index) or [1, L]
    token_fields: dict[str, torch.Tensor]  # [1, L] each (mm_token_type_ids, ...)


def is_token_field(name: str) -> bool:
    """Fields that hold one value per token (HF's names: ``token_type_ids``, ``mm_token_type_ids``,
    ``moe_mm_token_type_ids``); the processor pads them with the batch, the loader concatenates them over the
    pack's tokens."""
    return name.endswith("token_type_ids")


def _input_names(processor) -> frozenset[str] | None:
    """The processor's ``model_input_names`` less ``unused_input_names``, input ids and mask; None where the
    property cannot say: Qwen-Omni's reads its video processor's, which torchvision gates (None without it)."""
    try:
        names = set(processor.model_input_names)
    except AttributeError:
        return None
    return frozenset(names - set(getattr(processor, "unused_input_names", ()) or ()) - {"input_ids", "attention_mask"})


def _items_of(media: dict[str, Any], subs: Sequence[SubSampleMedia], index: int) -> dict[str, torch.Tensor]:
    """Sub-sample ``index``'s rows of the batch's per-item fields: ``image_*`` one row per image, ``video_*`` one
    per video (``image_grid_thw``, ``video_grid_thw``, ``video_second_per_grid``, ...), in the batch's order."""
    out = {}
    for name, value in media.items():
        kind = "images" if name.startswith("image_") else "videos" if name.startswith("video_") else None
        counts = [len(getattr(s, kind)) for s in subs] if kind else []
        if kind and torch.is_tensor(value) and value.ndim and len(value) == sum(counts):
            start = sum(counts[:index])
            out[name] = value[start : start + counts[index]]
    return out


class ProcessorPack:
    """Builds a processor family's rows and vision fields for one pack (module doc)."""

    def __init__(self, processor, *, chat, train_on: str, rope: RopeIndex, model_inputs: frozenset[str] | None,
                 turn_end_tokens: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.chat = chat  # the scan's ChatRenderer
        self.train_on = train_on
        self.rope = rope
        self.turn_end_tokens = turn_end_tokens
        # the fields model(**kwargs) takes by name, of those the processor names; None: keep them all
        names = _input_names(processor)
        self.fields = model_inputs if names is None else names if model_inputs is None else names & model_inputs
        self._special = frozenset(self.tokenizer.all_special_ids)
        if self.tokenizer.pad_token is None:  # the batch call pads rows; the pad id is never read (attention_mask)
            self.tokenizer.pad_token = self.tokenizer.eos_token

    # -- the batch call ----------------------------------------------------------------------------------
    def _call(self, texts: list[str], subs: Sequence[SubSampleMedia]):
        kwargs: dict[str, Any] = {}
        if any(s.images for s in subs):
            kwargs["images"] = [list(s.images) for s in subs]
        if any(s.videos for s in subs):
            kwargs.update(videos=[list(s.videos) for s in subs],
                          video_metadata=[m for s in subs for m in s.video_metadata], do_sample_frames=False)  # fmt: skip
        return self.processor(text=texts, padding=True, return_attention_mask=True, return_tensors="pt",
                              return_text_replacement_offsets=True, **kwargs)  # fmt: skip

    def rows(self, pack_id: int, subs: Sequence[SubSampleMedia], *, check_lengths: bool = True
             ) -> tuple[list[Row], dict[str, torch.Tensor]]:  # fmt: skip
        """The pack's rows and its media fields (concatenated over the pack by the processor's batch call)."""
        learn_all = self.train_on == "all"
        rendered = [render_or_drop(self.chat, s.conversation, spans=not learn_all) for s in subs]
        out = self._call([text for text, _ in rendered], subs)
        ids, mask = out["input_ids"], out["attention_mask"].bool()
        media = {k: v for k, v in out.items()
                 if k not in ("input_ids", "attention_mask", "text_replacement_offsets") and not is_token_field(k)}  # fmt: skip
        tokens = {k: v for k, v in out.items() if is_token_field(k)}
        if "mm_token_type_ids" not in tokens and hasattr(self.processor, "create_mm_token_type_ids"):
            tokens["mm_token_type_ids"] = torch.as_tensor(self.processor.create_mm_token_type_ids(ids.tolist()))
        rows = []
        for index, sub in enumerate(subs):
            keep = mask[index]
            row_ids = ids[index][keep]
            if check_lengths and len(row_ids) != sub.token_len:
                raise LengthMismatchError(
                    f"pack {pack_id}, sample {sub.sample_id!r}: {type(self.processor).__name__} made "
                    f"{len(row_ids)} tokens but the plan says {sub.token_len}; the processor settings or the video "
                    "config differ from the scan's: rerun scan/plan/write with the loader's config"
                )
            text, spans = rendered[index]
            learned = self._learned(text, spans, out["text_replacement_offsets"][index], row_ids, learn_all, sub.sample_id)
            row_tokens = {k: v[index][keep][None] for k, v in tokens.items()}
            positions = self.rope.positions(row_ids[None], mm_token_type_ids=row_tokens.get("mm_token_type_ids"),
                                            **_items_of(media, subs, index))  # fmt: skip
            rows.append(Row(
                input_ids=row_ids.long(),
                labels=sub_sample_labels(row_ids.long(), learned),
                positions=positions,
                token_fields={k: v for k, v in row_tokens.items() if self._takes(k)},
            ))  # fmt: skip
        return rows, {k: v for k, v in media.items() if self._takes(k)}

    def _takes(self, name: str) -> bool:
        return self.fields is None or name in self.fields

    # -- labels ------------------------------------------------------------------------------------------
    def _learned(self, rendered: str, spans: list[tuple[int, int]], replacements: list[dict], row_ids: torch.Tensor,
                 learn_all: bool, sample_id: str) -> torch.Tensor:  # fmt: skip
        """``bool [L]``: the tokens the loss scores, as ``TokenCounter.materialize`` marks them: the assistant
        spans (content and end-of-turn) with ``train_on: assistant``, every token with ``all``; never a token of
        a media replacement. The processor's expanded text is rebuilt from the rendered text and its own
        replacement strings, tokenized with offsets, and must equal the row's ids up to special tokens the
        processor adds around the text (a tokenizer's BOS, Molmo2's prepended BOS)."""
        spans = _with_turn_ends(rendered, spans, self.turn_end_tokens)
        pieces, regions, starts, shifts = [], [], [], []
        last, shift = 0, 0
        for item in replacements:  # in text order, as get_text_with_replacements splices them
            start = rendered.index(item["text"], last)
            pieces.append(rendered[last:start])
            begin = start + shift
            regions.append((begin, begin + len(item["replacement"])))
            pieces.append(item["replacement"])
            shift += len(item["replacement"]) - len(item["text"])
            starts.append(start)
            shifts.append(shift)
            last = start + len(item["text"])
        pieces.append(rendered[last:])
        encoding = self.tokenizer("".join(pieces), add_special_tokens=False, return_offsets_mapping=True)
        ours = list(encoding["input_ids"])
        offset = self._offset(row_ids.tolist(), ours, sample_id)
        mask = [learn_all] * len(ours)
        chars = _CharTokens(encoding["offset_mapping"])

        def expanded(pos: int) -> int:
            k = bisect.bisect_left(starts, pos)
            return pos + (shifts[k - 1] if k else 0)

        for start, end in spans:
            first = chars.first(expanded(start))
            if first is None:
                break
            for position in range(first, chars.last_before(expanded(end)) + 1):
                mask[position] = True
        for begin, end in regions:
            first, final = chars.first(begin), chars.first(end - 1)
            if first is not None and final is not None:
                mask[first : final + 1] = [False] * (final + 1 - first)
        learned = torch.zeros(len(row_ids), dtype=torch.bool)
        learned[offset : offset + len(ours)] = torch.tensor(mask, dtype=torch.bool)
        return learned

    def _offset(self, row: list[int], ours: list[int], sample_id: str) -> int:
        """Where ``ours`` sits in the processor's ``row``: the tokens around it must be special tokens."""
        for offset in range(len(row) - len(ours) + 1):
            if row[offset : offset + len(ours)] == ours and all(
                    t in self._special for t in row[:offset] + row[offset + len(ours):]):  # fmt: skip
                return offset
        raise ValueError(
            f"sample {sample_id!r}: {type(self.processor).__name__} changes the text beyond its media replacements "
            f"({len(row)} tokens, {len(ours)} from the rendered text and its replacements), so the loader cannot "
            "place the assistant labels on its tokens; this family needs a module in vlmpack_offline/families/"
        )
