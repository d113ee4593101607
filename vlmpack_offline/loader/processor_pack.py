"""A processor family's pack: the sub-samples through the family's own HF processor, as one batch.

For a model type without a hand-written module in ``families/`` (Gemma 4, GLM-5-Next, Molmo2,
ERNIE-4.5-VL, LFM3-VL, Qwen-Omni, ...) nothing of ours expands media: the family's processor does, on
each sub-sample's rendered chat and decoded media, the same inputs the scan counted::

    text      the chat template rendered by the scan's own renderer (one placeholder per media item)
    images    as PIL opens them (no EXIF transpose), as the scan saw them
    videos    the frames the scan's sampling chose (the scan's own probe: the processor's frame rule or the
              shared sampler), at the sampling's size, with VideoMetadata(frames_indices, fps, total) and
              do_sample_frames=False: the processor takes exactly these frames and their timestamps
    audio     float32 mono at the feature extractor's sampling_rate (media/audio.py ``decode_audio``, the scan's
              own decode), passed as ``audio=`` in the conversation's order
    tracks    with ``load_audio_from_video`` (Qwen-Omni; the scan's probe read the track: ``VideoMedia.audio``)
              each video's own audio track, decoded the same way, is one more ``audio=`` slot at the video's
              place, with ``audio_from_video_indices`` (None for an audio item, the video's index for a track)
              and ``load_audio_from_video=True``: the callers' form ``OmniModalProcessorMixin``
              ``_resolve_audio_from_video`` takes without decoding (tf/processing_utils.py); the row's rope
              index gets ``use_audio_in_video=True`` (Qwen-Omni's ``get_rope_index``)

The pack's sub-samples go through ONE processor call, as a batch of samples (``text=[...]``, each
sample's images and videos nested), the way HF batches samples for its models: fields that index
across a batch come out consistent (Molmo2's ``image_token_pooling`` points into the batch's crops),
and each row is the sub-sample alone (tests/test_packed_forward_2026.py compares every row with
the processor called on that sub-sample alone). Per row, padding removed by ``attention_mask``::

    input_ids           checked against the planned token_len (LengthMismatchError)
    labels              the assistant spans of the rendered text carried through the processor's own
                        replacements (``text_replacement_offsets``) onto its tokens; media tokens (audio too)
                        never scored
    per-token fields    mm_token_type_ids, moe_mm_token_type_ids (ERNIE's MoE routing), token_type_ids:
                        [1, S] over the pack, in the vision container
    media fields        every field of model_input_names the model's forward takes (pixel_values,
                        image_grid_thw, video_second_per_grid, image_position_ids, num_frames_per_video,
                        input_features, feature_attention_mask, input_features_mask, ...), as the batch call
                        made them (Molmo2's forward refuses images and videos in one call: its packs need
                        ``packing.group_by: media_type``, the default)
    positions           the model's rope index on each row alone (``RopeIndex.positions`` on the row's ids,
                        token fields and its own items of the per-image / per-video / per-audio fields): a batch
                        call numbers some axes across the batch (HunYuan-VL's image-index axis counts the batch's
                        images), so the batch's positions are not each sample's; 1-D for models without one

Audio is the exception to the one call. A feature extractor pads the audios of one call together, and what an
audio becomes depends on its company: Whisper's (Qwen-Omni) pads to the longest and drops the last mask frame
when that padded length is not a multiple of ``hop_length``, so an audio's frame count (its token count) moves
with the longest audio of the call, and its last frames' log-mel values see the padding instead of the STFT's
reflection (tf/models/whisper/feature_extraction_whisper.py ``__call__``); Gemma 4's pads to a multiple of 128
samples past the longest. The scan counts each sample as one call, so a pack holding audio makes one call per
sub-sample, each as the sub-sample's own call, and joins their fields::

    per-item fields     concatenated along the first axis in pack order (images, videos, audios)
    audio fields        the same, each first zero-padded along time to the pack's longest (input_features
                        [n, mel, T] or [n, T, mel], feature_attention_mask / input_features_mask [n, T]): the
                        masks keep each audio's own length, and the models read only masked frames (Qwen-Omni's
                        get_audio_features keeps frames where feature_attention_mask is 1 and encodes each
                        audio apart; Gemma 4's audio tower zeroes masked frames, its convolutions are causal
                        or read zeros there, its attention masks them), so each audio encodes as in its own call
    rows, positions     each call's own row and its own items (audio_feature_lengths = the mask's sum, as the
                        forward derives them), so Qwen-Omni's rope index spaces the audio as alone

A field other than the audio fields whose shapes differ between the calls is refused (``ValueError`` naming it).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import LengthMismatchError
from ..media.audio import decode_audio
from ..tokens.counter import _CharTokens, _with_turn_ends, render_or_drop
from ..tokens.processor_parts import audio_extractor
from .labels import sub_sample_labels
from .rope import RopeIndex

__all__ = ["ProcessorPack", "SubSampleMedia", "Row", "is_token_field"]

# the fields a feature extractor makes per audio besides its model_input_names (Whisper names only
# input_features): its attention mask under Qwen-Omni's name, and Gemma 4's mask (which it does name)
_AUDIO_MASKS = frozenset({"feature_attention_mask", "input_features_mask"})


@dataclass(frozen=True, slots=True, kw_only=True)
class SubSampleMedia:
    """One sub-sample's processor inputs, decoded."""

    sample_id: str
    conversation: Any  # conversation.Conversation
    token_len: int  # the plan's
    images: tuple[Any, ...]  # PIL images, in the conversation's order
    videos: tuple[np.ndarray, ...]  # [T, H, W, 3] uint8 frames per video
    video_metadata: tuple[Any, ...]  # transformers VideoMetadata per video
    audios: tuple[np.ndarray, ...] = ()  # float32 mono at the feature extractor's sampling_rate, in order
    # per audio slot: None for an audio item, i for videos[i]'s own track (load_audio_from_video); () = all None
    audio_from_video_indices: tuple[int | None, ...] = ()

    @property
    def has_tracks(self) -> bool:
        """Whether a video's own audio track is among ``audios``."""
        return any(i is not None for i in self.audio_from_video_indices)


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


def _interleaves(processor) -> bool:
    """Whether the processor can read a video's audio track (transformers' omni processors)."""
    from transformers.processing_utils import OmniModalProcessorMixin

    return isinstance(processor, OmniModalProcessorMixin)


def _media_of(out) -> dict[str, Any]:
    """A call's media fields: everything but the text fields and the per-token fields."""
    return {k: v for k, v in out.items()
            if k not in ("input_ids", "attention_mask", "text_replacement_offsets") and not is_token_field(k)}  # fmt: skip


def _joined(parts: list[dict[str, Any]], audio_fields: frozenset[str]) -> dict[str, torch.Tensor]:
    """The media fields of one call per sub-sample as the pack's (module doc): concatenated along the first axis;
    an audio field zero-padded along its other axes to the largest first."""
    names = list(dict.fromkeys(name for part in parts for name in part))
    out = {}
    for name in names:
        values = [part[name] for part in parts if name in part]
        if not all(torch.is_tensor(v) and v.ndim for v in values):
            raise ValueError(f"the processor's field {name!r} is not a tensor with one row per item, so the loader "
                             "cannot join the calls of a pack with audio; this family needs a module in families/")  # fmt: skip
        shapes = {tuple(v.shape[1:]) for v in values}
        if len(shapes) > 1 and name not in audio_fields:
            raise ValueError(
                f"the processor's field {name!r} has shapes {sorted(shapes)} in the calls of one pack with audio (one "
                "call per sub-sample, module doc), and the loader pads only audio fields to join them: this family's "
                f"packs with audio need a rule for {name!r} in vlmpack_offline/loader/processor_pack.py"
            )
        out[name] = torch.cat([_zero_padded(v, shapes) for v in values]) if len(shapes) > 1 else torch.cat(values)
    return out


def _zero_padded(value: torch.Tensor, shapes: set[tuple[int, ...]]) -> torch.Tensor:
    """``value`` with zeros after its own extent in every axis but the first, up to the largest of ``shapes``."""
    largest = [max(sizes) for sizes in zip(*shapes, strict=True)]
    padded = value.new_zeros((value.shape[0], *largest))
    padded[(slice(None), *(slice(0, size) for size in value.shape[1:]))] = value
    return padded


@dataclass(frozen=True, slots=True, kw_only=True)
class _Made:
    """One sub-sample's part of a processor call's output."""

    ids: torch.Tensor  # [L], padding removed
    tokens: dict[str, torch.Tensor]  # per-token fields, [1, L]
    replacements: list[dict]  # the call's text_replacement_offsets of this row
    items: dict[str, torch.Tensor]  # this sub-sample's per-item media fields, for its rope index


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
        self.audio_extractor = audio_extractor(processor)
        self._audio_fields = _AUDIO_MASKS | frozenset(getattr(self.audio_extractor, "model_input_names", ()) or ())
        if self.tokenizer.pad_token is None:  # the batch call pads rows; the pad id is never read (attention_mask)
            self.tokenizer.pad_token = self.tokenizer.eos_token

    @property
    def sampling_rate(self) -> int | None:
        """The rate the feature extractor takes audio at; None: the processor hears nothing."""
        return None if self.audio_extractor is None else int(self.audio_extractor.sampling_rate)

    def audio(self, data: bytes, *, part: str) -> np.ndarray:
        """One audio item as ``SubSampleMedia.audios`` holds it: float32 mono at ``sampling_rate``, decoded by the
        scan's own ``media.audio.decode_audio`` (its length is the one the scan counted)."""
        if self.sampling_rate is None:
            raise ValueError(
                f"{part}: {type(self.processor).__name__} has no feature extractor and audio token, so this audio "
                "cannot be fed to the model; the scan drops such items (unsupported_media): rerun scan/plan/write "
                "with this processor folder"
            )
        return decode_audio(data, sampling_rate=self.sampling_rate, part=part)

    # -- the processor calls -----------------------------------------------------------------------------
    def _call(self, texts: list[str], subs: Sequence[SubSampleMedia]):
        kwargs: dict[str, Any] = {}
        if any(s.images for s in subs):
            kwargs["images"] = [list(s.images) for s in subs]
        if any(s.videos for s in subs):
            kwargs.update(videos=[list(s.videos) for s in subs],
                          video_metadata=[m for s in subs for m in s.video_metadata], do_sample_frames=False)  # fmt: skip
        if any(s.audios for s in subs):
            if self.audio_extractor is None:
                raise ValueError(
                    f"{type(self.processor).__name__} has no feature extractor and audio token, so the audio of "
                    f"{[s.sample_id for s in subs if s.audios]} cannot be fed to the model; the scan drops such "
                    "items (unsupported_media): rerun scan/plan/write with this processor folder"
                )
            kwargs["audio"] = [audio for s in subs for audio in s.audios]  # flat, as make_list_of_audio takes them
        if kwargs.get("videos") and _interleaves(self.processor):
            # every slot named (a folder's load_audio_from_video would make the call decode the videos itself)
            kwargs["audio_from_video_indices"] = [i for s in subs for i in (s.audio_from_video_indices or (None,) * len(s.audios))]
            if any(s.has_tracks for s in subs):  # one sub-sample per call then (its audio)
                kwargs["load_audio_from_video"] = True
        return self.processor(text=texts, padding=True, return_attention_mask=True, return_tensors="pt",
                              return_text_replacement_offsets=True, **kwargs)  # fmt: skip

    def _made(self, out, items: list[dict[str, torch.Tensor]]) -> list[_Made]:
        """Each row of one call's output, padding removed, with ``items[row]``."""
        ids, mask = out["input_ids"], out["attention_mask"].bool()
        tokens = {k: v for k, v in out.items() if is_token_field(k)}
        if "mm_token_type_ids" not in tokens and hasattr(self.processor, "create_mm_token_type_ids"):
            tokens["mm_token_type_ids"] = torch.as_tensor(self.processor.create_mm_token_type_ids(ids.tolist()))
        return [_Made(ids=ids[index][mask[index]], tokens={k: v[index][mask[index]][None] for k, v in tokens.items()},
                      replacements=out["text_replacement_offsets"][index], items=row_items)
                for index, row_items in enumerate(items)]  # fmt: skip

    def _calls(self, texts: list[str], subs: Sequence[SubSampleMedia]) -> tuple[list[_Made], dict[str, torch.Tensor]]:
        """Each sub-sample's part of the processor's output and the pack's media fields: one batch call, or one
        call per sub-sample where the pack holds audio (module doc)."""
        if not any(s.audios for s in subs):
            out = self._call(texts, subs)
            media = _media_of(out)
            return self._made(out, [_items_of(media, subs, index) for index in range(len(subs))]), media
        outs = [self._call([text], [sub]) for text, sub in zip(texts, subs, strict=True)]
        made = [part for out in outs for part in self._made(out, [_media_of(out)])]
        taken = [{k: v for k, v in _media_of(out).items() if self._takes(k)} for out in outs]
        return made, _joined(taken, self._audio_fields)

    def rows(self, pack_id: int, subs: Sequence[SubSampleMedia], *, check_lengths: bool = True
             ) -> tuple[list[Row], dict[str, torch.Tensor]]:  # fmt: skip
        """The pack's rows and its media fields (concatenated over the pack in sub-sample order)."""
        learn_all = self.train_on == "all"
        rendered = [render_or_drop(self.chat, s.conversation, spans=not learn_all) for s in subs]
        made, media = self._calls([text for text, _ in rendered], subs)
        rows = []
        for sub, part, (text, spans) in zip(subs, made, rendered, strict=True):
            row_ids = part.ids
            if check_lengths and len(row_ids) != sub.token_len:
                raise LengthMismatchError(
                    f"pack {pack_id}, sample {sub.sample_id!r}: {type(self.processor).__name__} made "
                    f"{len(row_ids)} tokens but the plan says {sub.token_len}; the processor settings or the video "
                    "config differ from the scan's: rerun scan/plan/write with the loader's config"
                )
            learned = self._learned(text, spans, part.replacements, row_ids, learn_all, sub.sample_id)
            tracks = {"use_audio_in_video": True} if sub.has_tracks else {}  # Qwen-Omni's get_rope_index
            positions = self.rope.positions(row_ids[None], mm_token_type_ids=part.tokens.get("mm_token_type_ids"),
                                            **part.items, **tracks)  # fmt: skip
            rows.append(Row(
                input_ids=row_ids.long(),
                labels=sub_sample_labels(row_ids.long(), learned),
                positions=positions,
                token_fields={k: v for k, v in part.tokens.items() if self._takes(k)},
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
