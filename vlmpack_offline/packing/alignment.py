"""Sub-sample alignment for the training layout: the length each sub-sample takes in a pack.

Megatron's THD attention under context parallelism (TransformerEngine) cuts every
sub-sequence into ``2 * cp`` chunks, so each sub-sample is padded to a multiple of
``2 * cp``; with sequence parallelism each CP rank's share is further split over the
``tp`` tensor ranks, so also a multiple of ``cp * tp``. Megatron-Bridge pads with::

    m = lcm(2 * cp if cp > 1 else 1, cp * tp if sequence_parallel and tp > 1 else 1)

(Megatron-Bridge ``src/megatron/bridge/data/datasets/packing_utils.py`` and
``training/utils/packed_seq_utils.py``). A sub-sample of ``L`` tokens then occupies
``ceil(L / m) * m`` slots::

    token_len     5        4           cp = 2 -> m = 4
    aligned       8        4           [a a a a a . . . | b b b b]   (. = pad)

Padding added after planning would push a full pack past its capacity, so bucket
and plan pack by the aligned lengths: no pack exceeds ``sample.max_token_len``
after padding. ``packing.align_to`` gives ``m`` directly (it must be a multiple of
what ``parallel:`` implies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Alignment", "parallel_multiple", "round_up"]


def round_up(lengths, multiple: int):
    """Each length rounded up to a multiple of ``multiple``: the slots a sub-sample takes once padded
    (ints, numpy arrays and torch tensors alike)."""
    return -(-lengths // multiple) * multiple


def parallel_multiple(context_parallel_size: int, tensor_model_parallel_size: int, sequence_parallel: bool) -> int:
    """The multiple Megatron's THD layout needs for every sub-sequence (see the module doc)."""
    cp, tp = context_parallel_size, tensor_model_parallel_size
    return math.lcm(2 * cp if cp > 1 else 1, cp * tp if sequence_parallel and tp > 1 else 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Alignment:
    """The training layout a plan was made for, and the multiple it implies."""

    context_parallel_size: int = 1  # parallel.context_parallel_size
    tensor_model_parallel_size: int = 1  # parallel.tensor_model_parallel_size
    sequence_parallel: bool = False  # parallel.sequence_parallel
    align_to: int | None = None  # packing.align_to: an explicit multiple (a multiple of the implied one)

    @property
    def implied(self) -> int:
        """The multiple ``parallel.*`` alone needs."""
        return parallel_multiple(self.context_parallel_size, self.tensor_model_parallel_size, self.sequence_parallel)

    @property
    def multiple(self) -> int:
        """Every sub-sample's length is rounded up to a multiple of this (1: no alignment)."""
        return self.align_to or self.implied

    def aligned(self, lengths: np.ndarray) -> np.ndarray:
        """``ceil(length / multiple) * multiple`` per sub-sample, int64 (the lengths themselves when m = 1)."""
        lengths = np.asarray(lengths, dtype=np.int64)
        return lengths if self.multiple == 1 else round_up(lengths, self.multiple)

    def aligned_int32(self, lengths: np.ndarray) -> np.ndarray:
        """``aligned`` in int32 (the lengths themselves when they are int32 and m = 1): 4 bytes a sample, not 8.
        int64 only where an aligned length would not fit an int32."""
        lengths = np.asarray(lengths)
        if lengths.size and int(lengths.max()) > np.iinfo(np.int32).max - self.multiple:
            return self.aligned(lengths)
        lengths = lengths.astype(np.int32, copy=False)
        return lengths if self.multiple == 1 else round_up(lengths, np.int32(self.multiple))

    def describe(self) -> str:
        """The layout as the config keys that set it, e.g. ``context_parallel_size=2 (multiple 4)``."""
        parts = [f"context_parallel_size={self.context_parallel_size}",
                 f"tensor_model_parallel_size={self.tensor_model_parallel_size}",
                 f"sequence_parallel={str(self.sequence_parallel).lower()}"]
        if self.align_to:
            parts.append(f"align_to={self.align_to}")
        return f"{', '.join(parts)} (sub-samples padded to a multiple of {self.multiple})"

    def record(self) -> dict[str, Any]:
        """Plain data for fingerprints and ``.nv-meta/vlmpack.json``."""
        return {"context_parallel_size": self.context_parallel_size,
                "tensor_model_parallel_size": self.tensor_model_parallel_size,
                "sequence_parallel": self.sequence_parallel, "align_to": self.align_to, "multiple": self.multiple}

    @classmethod
    def from_record(cls, record: dict[str, Any] | None) -> Alignment:
        """Inverse of ``record``; ``None`` (a dataset written without alignment) is no alignment."""
        if not record:
            return cls()
        return cls(context_parallel_size=int(record["context_parallel_size"]),
                   tensor_model_parallel_size=int(record["tensor_model_parallel_size"]),
                   sequence_parallel=bool(record["sequence_parallel"]), align_to=record.get("align_to"))

    def holds(self, needed: Alignment) -> bool:
        """Data aligned like this is already aligned for ``needed`` (its multiple divides ours)."""
        return self.multiple % needed.multiple == 0
