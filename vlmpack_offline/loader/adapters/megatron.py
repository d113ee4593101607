"""Megatron THD micro-batches: a pack padded for context parallelism, with ``PackedSeqParams``.

What Megatron-Bridge's VLM step reads (``src/megatron/bridge/training/vlm_step.py``,
``get_batch_from_iterator``; the keys its collate path emits in ``data/packing/in_batch.py``,
``build_mcore_thd_sequence_batch_from_rows``)::

    sub-samples   A (5 tokens)       B (4)          cp = 2 -> every sub-sample padded to a multiple of 4
    input_ids     [a a a a a 0 0 0 | b b b b]       long [1, T], pad id 0             (also as ``tokens``)
    labels        [a a a a - - - - | b b b -]       long [1, T], next token, -100 at each sub-sample's
                                                    last position and on pads (shown as -)
    loss_mask     [1 1 1 1 0 0 0 0 | 1 1 1 0]       float32 [1, T], 0 where labels are -100
    position_ids  [0 1 2 3 4 5 6 7 | 0 1 2 3]       long [3, 1, T] mRoPE (or [1, T]); pads continue
    cu_seqlens_q / _kv               [0, 5, 9]      int32, the real boundaries
    cu_seqlens_q_padded / _kv_padded [0, 8, 12]     int32, the padded ones (TE's THD partition reads these)
    max_seqlen_q / _kv   8  (int32, 0-d: the longest padded sub-sample);  total_tokens  12
    visual_inputs        MegatronVisualInputs: pixel_values, image_grid_thw, ... as attributes

(Megatron-Bridge's own golden case: lengths [5, 4], m = 4 -> [0, 5, 9], [0, 8, 12], max 8;
``tests/unit_tests/models/qwen_vl/data/test_energon.py``.) Labels here are already shifted, as
Megatron's loss expects; labels / loss_mask / position_ids of the real tokens are the pack's own.

Context parallelism: TransformerEngine's THD partition (``thd_get_partitioned_indices``, CUDA only;
``transformer_engine/common/fused_attn/context_parallel.cu``) gives CP rank r chunk r and chunk
2cp-1-r of every padded sub-sample cut in 2cp chunks; ``cp_partition_indices`` is that rule on CPU.
For VLMs the sequence cannot be cut before the vision embeddings are merged into it, so by default
every CP rank gets the whole padded pack (Megatron-Bridge's Qwen3-VL / Qwen3.5-VL partition after
the merge themselves: ``modelling_qwen3_vl/model.py``); ``cp_slice`` gives one rank's share of the
token-aligned fields for models that take pre-sharded input (text-only packs, labels / loss_mask).

megatron-core's own slicer, ``get_thd_batch_on_this_cp_rank`` (``megatron/core/utils.py``), takes
Megatron-LM's ``get_batch`` layout rather than this dict: ``max_seqlen`` of shape ``[1]`` (it reads
``max_seqlen[0]``) and only keys whose dimension 1 is the sequence (it cuts dimension 1 of each).
``core_thd_inputs`` is that layout, one call away, and puts the rest back after the cut::

    core = core_thd_inputs(batch)                      # tokens, labels, loss_mask, attention_mask, position_ids
    sliced, params = get_thd_batch_on_this_cp_rank(*core.args, cp_size=cp, cp_rank=r)
    mine = core.merge(sliced)                          # == cp_slice(batch, cp, r); params == packed_seq_params(batch)

``to_device`` moves a batch to the GPU, the boundaries ``PackedSeqParams`` carries included (TE's THD
attention reads them there).

``MegatronAdapter.for_packed_dir`` refuses a packed dataset planned for another layout: padding
added here to data that was not aligned for it could push a full pack past its capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ...errors import ConfigError
from ...optional import require
from ...packed_settings import read_packed_settings, written_alignment
from ...packing.alignment import Alignment, round_up
from ..batch import PackBatch
from ..labels import IGNORE_INDEX
from .base import Adapter

__all__ = ["CoreThdInputs", "MegatronAdapter", "MegatronVisualInputs", "core_thd_inputs", "cp_partition_indices",
           "cp_slice", "packed_seq_params", "to_device"]

TOKEN_FIELDS = ("tokens", "input_ids", "labels", "loss_mask", "position_ids")  # cut along the sequence by cp_slice
# stay on the host when a batch moves: PackedSeqParams takes them as ints (Megatron-Bridge's vlm_step keeps them
# on the CPU too: _PACKED_SEQ_HOST_KEYS), so reading them never waits for the GPU
HOST_FIELDS = ("max_seqlen_q", "max_seqlen_kv")


class MegatronVisualInputs:
    """The pack's vision tensors as attributes: Megatron-Bridge's ``GenericVisualInputs`` contract
    (``training/utils/visual_inputs.py``): its step moves every attribute of ``__dict__`` to the GPU,
    sets ``pixel_values`` / ``pixel_values_videos`` to None on later pipeline stages, and passes
    ``normalized_for_model()`` to the model. Holds whatever fields the family's processor made,
    already flat (``[N, ...]``, grids ``[N, 3]``), so normalizing changes nothing."""

    def __init__(self, **fields: torch.Tensor | None) -> None:
        self.__dict__.update(fields)

    def as_model_kwargs(self) -> dict[str, torch.Tensor]:
        return {name: value for name, value in vars(self).items() if value is not None}

    def normalized_for_model(self) -> dict[str, torch.Tensor]:
        return self.as_model_kwargs()

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> MegatronVisualInputs:
        """A copy with every field on ``device`` (this one is left as it is)."""
        return MegatronVisualInputs(**{name: None if value is None else value.to(device, non_blocking=non_blocking)
                                       for name, value in vars(self).items()})

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}={tuple(v.shape)}" for k, v in self.as_model_kwargs().items())
        return f"MegatronVisualInputs({shapes})"


class MegatronAdapter(Adapter):
    """``PackBatch`` -> Megatron THD dict (module doc), every sub-sample padded to ``layout.multiple``."""

    framework = "megatron"

    def __init__(self, layout: Alignment | None = None, *, capacity: int | None = None) -> None:
        self.layout = layout or Alignment()
        self.capacity = capacity  # sample.max_token_len of the packed dataset: a padded pack must fit it

    @classmethod
    def for_packed_dir(cls, packed_dir: str | Path, *, context_parallel_size: int = 1,
                       tensor_model_parallel_size: int = 1, sequence_parallel: bool = False) -> MegatronAdapter:
        """The adapter for this training layout, after checking ``packed_dir`` was planned for it."""
        for name, value in (("context_parallel_size", context_parallel_size),
                            ("tensor_model_parallel_size", tensor_model_parallel_size)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"MegatronAdapter: {name} must be a positive integer, got {value!r}")
        job = Alignment(context_parallel_size=context_parallel_size,
                        tensor_model_parallel_size=tensor_model_parallel_size, sequence_parallel=sequence_parallel)
        written = written_alignment(packed_dir)
        if not written.holds(job):
            planned = f"for {written.describe()}" if written.multiple > 1 else "without alignment (no parallel:)"
            raise ConfigError(
                f"{packed_dir} was planned {planned}, but this job runs {job.describe()}: padding "
                f"its packs now could push full ones past capacity. Rerun `vlmpack bucket`, `plan` and `write` with "
                f"parallel.context_parallel_size: {context_parallel_size}, parallel.tensor_model_parallel_size: "
                f"{tensor_model_parallel_size}, parallel.sequence_parallel: {str(sequence_parallel).lower()} "
                f"(or packing.align_to: {job.multiple})"
            )
        return cls(job, capacity=int(read_packed_settings(packed_dir)["sample"]["max_token_len"]))

    def convert(self, batch: PackBatch) -> dict[str, Any]:
        cu = batch.cu_seqlens.long()
        lengths = cu[1:] - cu[:-1]
        m = self.layout.multiple
        padded = round_up(lengths, m)
        cu_padded = torch.zeros_like(cu)
        torch.cumsum(padded, 0, out=cu_padded[1:])
        total = int(cu_padded[-1])
        real = len(lengths) - batch.n_dummy_segments
        if self.capacity is not None and int(cu_padded[real]) > self.capacity:
            raise ValueError(
                f"pack {batch.pack_id}: {int(cu_padded[real])} tokens once every sub-sample is padded to a multiple "
                f"of {m}, over sample.max_token_len {self.capacity}: plan the data for this layout "
                "(MegatronAdapter.for_packed_dir says how)"
            )
        seq = len(lengths)
        segment = torch.repeat_interleave(torch.arange(seq), lengths)  # per real token
        dest = torch.arange(batch.seq_len) - cu[:-1][segment] + cu_padded[:-1][segment]

        labels = torch.roll(batch.labels[0], -1)
        labels[cu[1:] - 1] = IGNORE_INDEX  # the last token of a sub-sample predicts nothing of it
        if batch.loss_weights is not None:  # per-sample averaging: the weights travel as the mask
            weights = torch.roll(batch.loss_weights[0].float(), -1)
            weights[cu[1:] - 1] = 0.0
        else:
            weights = (labels != IGNORE_INDEX).float()
        input_ids = _scatter(batch.input_ids[0], dest, total, 0)
        out_labels = _scatter(labels, dest, total, IGNORE_INDEX)
        loss_mask = _scatter(weights, dest, total, 0.0)
        position_ids = _padded_positions(batch.position_ids, dest, cu, cu_padded, lengths, total)
        max_seqlen = torch.tensor(int(padded.max()), dtype=torch.int32)
        cu32, cu_padded32 = cu.to(torch.int32), cu_padded.to(torch.int32)
        return {
            "tokens": input_ids, "input_ids": input_ids, "labels": out_labels, "loss_mask": loss_mask,
            "position_ids": position_ids, "attention_mask": None,
            "visual_inputs": MegatronVisualInputs(**dict(batch.vision)),
            "cu_seqlens_q": cu32, "cu_seqlens_kv": cu32,
            "cu_seqlens_q_padded": cu_padded32, "cu_seqlens_kv_padded": cu_padded32,
            "max_seqlen_q": max_seqlen, "max_seqlen_kv": max_seqlen, "total_tokens": total,
        }


def _scatter(values: torch.Tensor, dest: torch.Tensor, total: int, fill: float | int) -> torch.Tensor:
    out = torch.full((1, total), fill, dtype=values.dtype)
    out[0, dest] = values
    return out


def _padded_positions(positions: torch.Tensor, dest: torch.Tensor, cu: torch.Tensor, cu_padded: torch.Tensor,
                      lengths: torch.Tensor, total: int) -> torch.Tensor:
    """``[R, 1, T]`` or ``[1, T]`` positions: each sub-sample's own, pads continuing from its last one."""
    flat = positions.reshape(-1, positions.shape[-1])  # [R, S]
    out = torch.empty((flat.shape[0], total), dtype=flat.dtype)
    out[:, dest] = flat
    slot_segment = torch.repeat_interleave(torch.arange(len(lengths)), cu_padded[1:] - cu_padded[:-1])
    offset = torch.arange(total) - cu_padded[:-1][slot_segment]
    pad = offset >= lengths[slot_segment]
    last_real = (cu[1:] - 1)[slot_segment[pad]]
    out[:, pad] = flat[:, last_real] + (offset[pad] - lengths[slot_segment[pad]] + 1)
    return out.reshape(*positions.shape[:-1], total)


def cp_partition_indices(cu_seqlens_padded: torch.Tensor, cp_size: int, cp_rank: int) -> torch.Tensor:
    """Token indices CP rank ``cp_rank`` holds: chunks r and 2cp-1-r of every padded sub-sample (TE's rule)."""
    cu = cu_seqlens_padded.long().reshape(-1)
    device = cu.device  # the indices live where the boundaries do, so a batch on the GPU is cut there
    if cp_size == 1:
        return torch.arange(int(cu[-1]), device=device)
    if not 0 <= cp_rank < cp_size:
        raise ValueError(f"cp_rank {cp_rank} is not in [0, {cp_size})")
    lengths = cu[1:] - cu[:-1]
    if bool((lengths % (2 * cp_size)).any()):
        raise ValueError(f"padded sub-sample lengths {lengths.tolist()} are not all multiples of 2 * cp_size = "
                         f"{2 * cp_size}: the pack was not padded for context_parallel_size {cp_size}")
    chunk = lengths // (2 * cp_size)
    segment = torch.repeat_interleave(torch.arange(len(lengths), device=device), 2 * chunk)
    local_start = torch.zeros_like(cu)
    torch.cumsum(2 * chunk, 0, out=local_start[1:])
    within = torch.arange(int(local_start[-1]), device=device) - local_start[:-1][segment]
    c = chunk[segment]
    second = within >= c
    first_chunk = cp_rank * c + within
    second_chunk = (2 * cp_size - 1 - cp_rank) * c + (within - c)
    return cu[:-1][segment] + torch.where(second, second_chunk, first_chunk)


def cp_slice(micro_batch: dict[str, Any], cp_size: int, cp_rank: int) -> dict[str, Any]:
    """CP rank ``cp_rank``'s share of a ``MegatronAdapter`` batch: its tokens of ``TOKEN_FIELDS`` (last dim);
    the boundaries stay those of the whole pack, as TE's THD attention and ``PackedSeqParams`` want."""
    index = cp_partition_indices(micro_batch["cu_seqlens_q_padded"], cp_size, cp_rank)
    out = dict(micro_batch)
    for name in TOKEN_FIELDS:
        value = micro_batch.get(name)
        if value is not None:
            out[name] = value.index_select(-1, index)
    return out


def packed_seq_params(micro_batch: dict[str, Any]):
    """megatron-core's ``PackedSeqParams`` for a ``MegatronAdapter`` batch, as Megatron-Bridge's
    ``get_packed_seq_params`` builds it (``training/utils/packed_seq_utils.py``): THD, real and padded
    boundaries, the longest padded sub-sample."""
    module = require("megatron.core.packed_seq_params", "packed_seq_params (Megatron THD batches)")
    return module.PackedSeqParams(
        qkv_format="thd",
        cu_seqlens_q=micro_batch["cu_seqlens_q"], cu_seqlens_kv=micro_batch["cu_seqlens_kv"],
        cu_seqlens_q_padded=micro_batch["cu_seqlens_q_padded"],
        cu_seqlens_kv_padded=micro_batch["cu_seqlens_kv_padded"],
        max_seqlen_q=int(micro_batch["max_seqlen_q"]), max_seqlen_kv=int(micro_batch["max_seqlen_kv"]),
    )


def to_device(micro_batch: dict[str, Any], device: torch.device | str, *, non_blocking: bool = False) -> dict[str, Any]:
    """A ``MegatronAdapter`` batch (whole, or a ``cp_slice`` / ``CoreThdInputs.merge`` share) with every tensor on
    ``device``: the token fields, the vision inputs and the ``cu_seqlens_*`` that ``packed_seq_params`` puts in
    ``PackedSeqParams`` (TE's THD attention reads them on the GPU). ``max_seqlen_q`` / ``_kv`` stay on the host
    (``HOST_FIELDS``). A tensor held under two keys (``tokens`` is ``input_ids``) is moved once."""
    moved: dict[int, Any] = {}

    def move(value: Any) -> Any:
        if not isinstance(value, torch.Tensor | MegatronVisualInputs):
            return value
        if id(value) not in moved:
            moved[id(value)] = value.to(device, non_blocking=non_blocking)
        return moved[id(value)]

    return {name: value if name in HOST_FIELDS else move(value) for name, value in micro_batch.items()}


SEQUENCE_KEYS = ("tokens", "labels", "loss_mask", "attention_mask", "position_ids")  # Megatron-LM get_batch's order


@dataclass(frozen=True, slots=True, kw_only=True)
class CoreThdInputs:
    """A ``MegatronAdapter`` batch in the layout megatron-core's ``get_thd_batch_on_this_cp_rank`` takes
    (``megatron/core/utils.py``; Megatron-LM's ``pretrain_gpt.get_batch`` calls it the same way): that
    function cuts dimension 1 of every key of its dict except ``attention_mask`` and reads ``max_seqlen[0]``.
    So the dict holds only the sequence fields, mRoPE ``position_ids`` ``[3, 1, T]`` as ``[3, T]`` (each of
    the three axes cut with the same indices, as ``cp_slice`` cuts them); the vision inputs, boundaries and
    counts stay out of the cut and come back with ``merge``."""

    batch: dict[str, torch.Tensor | None]  # tokens, labels, loss_mask, attention_mask (None), position_ids [R, T]
    cu_seqlens: torch.Tensor  # int32 [n+1], the real boundaries
    cu_seqlens_padded: torch.Tensor  # int32 [n+1], the padded ones TE's partition reads
    max_seqlen: torch.Tensor  # int32 [1], the longest padded sub-sample
    source: dict[str, Any]  # the adapter batch these came from: what merge puts back

    @property
    def args(self) -> tuple[dict[str, torch.Tensor | None], torch.Tensor, torch.Tensor, torch.Tensor]:
        """``get_thd_batch_on_this_cp_rank``'s positional arguments; the dict is a fresh one (it is cut in place)."""
        return dict(self.batch), self.cu_seqlens, self.cu_seqlens_padded, self.max_seqlen

    def merge(self, sliced: dict[str, torch.Tensor | None]) -> dict[str, Any]:
        """The adapter batch with one CP rank's share of the sequence fields: the keys and shapes of ``cp_slice``."""
        out = dict(self.source)
        tokens = sliced["tokens"]
        out.update(tokens=tokens, input_ids=tokens, labels=sliced["labels"], loss_mask=sliced["loss_mask"])
        positions = sliced["position_ids"]
        out["position_ids"] = positions.reshape(*self.source["position_ids"].shape[:-1], positions.shape[-1])
        return out


def core_thd_inputs(micro_batch: dict[str, Any]) -> CoreThdInputs:
    """What megatron-core's ``get_thd_batch_on_this_cp_rank`` takes, from a ``MegatronAdapter`` batch (class doc)."""
    total = micro_batch["tokens"].shape[-1]
    batch = {name: micro_batch.get(name) for name in SEQUENCE_KEYS}
    batch["position_ids"] = micro_batch["position_ids"].reshape(-1, total)
    return CoreThdInputs(batch=batch, cu_seqlens=micro_batch["cu_seqlens_q"],
                         cu_seqlens_padded=micro_batch["cu_seqlens_q_padded"],
                         max_seqlen=micro_batch["max_seqlen_q"].reshape(1), source=micro_batch)
