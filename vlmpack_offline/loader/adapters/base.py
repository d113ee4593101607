"""The interface every training-framework adapter shares: one pack in, what the framework's step reads out.

A ``PackBatch`` (``loader/batch.py``) is framework-neutral: HF-convention labels, positions restarting
per sub-sample, ``cu_seqlens``, one vision container. An adapter turns it into one framework's
micro-batch (Megatron's THD dict, a ``transformers.Trainer`` batch, NeMo Automodel's neat-packing
batch, ...), and is itself the DataLoader's ``collate_fn``, so the work runs in the DataLoader
workers::

    loader = DataLoader(PackDataset(packed_dir, encoder), batch_size=None, num_workers=4,
                        collate_fn=MegatronAdapter.for_packed_dir(packed_dir, context_parallel_size=2))

One pack is one micro-batch: packs are never concatenated, since that would mix their boundaries.
Adapters import their framework only when it is used (``optional.require``), and check at
construction that the packed dataset suits the job (``for_packed_dir``), never at the first step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from ...errors import ConfigError
from ..batch import PackBatch

__all__ = ["Adapter", "check_model_family"]


class Adapter(ABC):
    """Turns one ``PackBatch`` into one framework's micro-batch; usable as a DataLoader ``collate_fn``."""

    framework: ClassVar[str]  # the framework's name, for messages

    @abstractmethod
    def convert(self, batch: PackBatch) -> Any:
        """The framework's micro-batch for this pack."""

    def __call__(self, items: PackBatch | Sequence[PackBatch]) -> Any:
        """``collate_fn``: a pack (``batch_size=None``) or a list of one pack (``batch_size=1``)."""
        if isinstance(items, PackBatch):
            return self.convert(items)
        if len(items) != 1:
            raise ValueError(
                f"{self.framework}: the DataLoader handed {len(items)} packs to one micro-batch; a pack is a "
                "micro-batch (concatenating packs would mix their sub-sample boundaries): use "
                "DataLoader(..., batch_size=None) or batch_size=1, and micro_batch_size 1 in the framework"
            )
        return self.convert(items[0])


def check_model_family(who: str, packed_wds_dir: str | Path, packed_model_type: str, model: Any) -> None:
    """Refuse a model of another family than the packs were counted for (its token ids and lengths differ)."""
    config = getattr(model, "config", model)  # a model (PEFT-wrapped too), or its config
    model_type = getattr(config, "model_type", None)
    if model_type is None:
        raise ConfigError(f"{who}: cannot tell the model's family ({type(model).__name__} has no config.model_type)")
    if model_type != packed_model_type:
        raise ConfigError(
            f"{who}: {packed_wds_dir} was packed for model_type {packed_model_type!r} but the model is "
            f"{model_type!r}: its token ids, media tokens and lengths differ; pack the data with that model's "
            "processor, or train the model the packs were made for"
        )
