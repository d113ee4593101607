"""The endless, resumable iterator a Megatron training loop pulls micro-batches from.

Megatron's loop calls ``next(train_data_iterator)`` once per micro-batch and never expects it to end;
Megatron-Bridge checkpoints an external iterator's position through ``save_state()`` and restores it
with ``restore_state(state)`` before the first ``next`` (``training/checkpointing.py``; its own
``EnergonDataloader`` in ``data/energon/base_energon_datamodule.py`` has the same three methods).
``MegatronPackStream`` is that iterator over one split of a packed directory, built on
megatron-energon's savable loader (``get_savable_loader``: mid-epoch state per rank) with
``PackTaskEncoder(adapter=MegatronAdapter(...))``, so padding and labels run in energon's workers::

    stream = MegatronPackStream(packed_dir, MegatronAdapter.for_packed_dir(packed_dir, context_parallel_size=2),
                                rank=dp_rank, world_size=dp_size, num_workers=2)
    batch = next(stream)            # a MegatronAdapter dict; one pack per micro-batch
    state = stream.save_state()     # at a checkpoint;  stream.restore_state(state) on resume

``rank`` / ``world_size`` are the data-parallel ones: every tensor, context and pipeline rank of one
data-parallel group must read the same pack (DESIGN: "Rank means the data-parallel rank"). A train
split planned with ``parallel.data_parallel_size`` is read through ``task_encoder.train_dataset``: each
rank gets the pack of its balanced slot at every step (``world_size`` must be the planned one).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...optional import require
from ..encoder import PackEncoder
from .base import Adapter

__all__ = ["MegatronPackStream"]


class MegatronPackStream:
    """``next()`` forever: the split's packs as ``adapter`` batches, epoch after epoch (energon's order)."""

    def __init__(self, packed_dir: str | Path, adapter: Adapter, *, encoder: PackEncoder | None = None,
                 processor_path: str | Path | None = None, split: str = "train", rank: int = 0,
                 world_size: int = 1, num_workers: int = 2, data_parallel_group: Any = None) -> None:
        energon = require("megatron.energon", "MegatronPackStream")
        from ..task_encoder import PackTaskEncoder, train_dataset  # imports energon

        encoder = encoder or PackEncoder.from_packed_dir(packed_dir, processor_path)
        worker_config = energon.WorkerConfig(rank=rank, world_size=world_size, num_workers=num_workers,
                                             data_parallel_group=data_parallel_group)
        task_encoder = PackTaskEncoder(encoder, adapter=adapter)
        if split == "train":  # a balanced split as planned: each rank the pack of its slot (schedule.py)
            dataset = train_dataset(packed_dir, task_encoder, worker_config)
        else:
            dataset = energon.get_val_dataset(str(packed_dir), split_part=split, batch_size=1,
                                              worker_config=worker_config, task_encoder=task_encoder)
        self.split = split
        self._loader = energon.get_savable_loader(dataset)
        self._iter: Iterator | None = None

    def __iter__(self) -> MegatronPackStream:
        return self

    def __next__(self) -> Any:
        if self._iter is None:
            self._iter = iter(self._loader)
        try:
            return next(self._iter)
        except StopIteration:  # energon's train loader never ends; a val split does: start it again
            self._iter = iter(self._loader)
            return next(self._iter)

    def save_state(self) -> Any:
        """This rank's position (energon's ``save_state_rank``), for the checkpoint."""
        return self._loader.save_state_rank()

    def restore_state(self, state: Any) -> None:
        """Continue from a saved position; call before the first ``next``."""
        self._loader.restore_state_rank(state)
        self._iter = None
