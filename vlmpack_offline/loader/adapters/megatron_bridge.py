"""Megatron-Bridge's dataset hook for a packed directory: ``cfg.dataset = VlmpackDatasetProvider(...)``.

Megatron-Bridge's ``EnergonDatasetConfig`` accepts only its own declarative task-encoder configs
(``src/megatron/bridge/data/builders/energon.py``: HF, Qwen-VL, Nemotron-Omni), so a recipe plugs a
vlmpack packed directory in through the dataset-provider contract its ``ConfigContainer.dataset``
also accepts (``data/base.py``: ``DatasetProvider.build_datasets(context) -> (train, valid, test)``;
called from ``data/utils.py``). With ``dataloader_type="external"`` Megatron-Bridge iterates what
``build_datasets`` returns as it is (``data/samplers.py``) and checkpoints it through
``save_state`` / ``restore_state`` (``training/checkpointing.py``): here a ``MegatronPackStream``
per split, whose batches its VLM step reads (``training/vlm_step.py``)::

    from vlmpack_offline.loader.adapters.megatron_bridge import VlmpackDatasetProvider
    cfg.dataset = VlmpackDatasetProvider(packed_dir="/data/packed", context_parallel_size=2,
                                         seq_length=8192, num_workers=2)
    cfg.train.micro_batch_size = 1   # one pack per micro-batch

The layout must be the model's (``context_parallel_size``, ``tensor_model_parallel_size``,
``sequence_parallel``): ``build_datasets`` compares it with the process groups it is given and
``MegatronAdapter.for_packed_dir`` with the layout the data was planned for. Importing this module
imports Megatron-Bridge; everything else of vlmpack's Megatron support needs only megatron-core
and megatron-energon.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError, ShardError
from .megatron import MegatronAdapter
from .megatron_stream import MegatronPackStream

__all__ = ["VlmpackDatasetProvider", "MegatronBridgeMissing"]


class MegatronBridgeMissing(ConfigError, ImportError):
    """Megatron-Bridge is not installed: one line (a ``ConfigError``) that ``except ImportError`` also catches."""


def _dataset_provider_base() -> type:
    # data/base.py since Megatron-Bridge 0.6; training/config.py before
    for module in ("megatron.bridge.data.base", "megatron.bridge.training.config"):
        try:
            return importlib.import_module(module).DatasetProvider
        except (ModuleNotFoundError, AttributeError):
            continue
    raise MegatronBridgeMissing(
        "VlmpackDatasetProvider plugs into Megatron-Bridge, which is not installed here: install a release newer "
        "than 0.6 (pip install megatron-bridge, or its repository; docs/training/megatron.md). Without it, "
        "MegatronAdapter and MegatronPackStream (vlmpack_offline.loader.adapters) feed a megatron-core loop directly"
    )


def _group_rank_size(group: Any) -> tuple[int, int] | None:
    return None if group is None else (int(group.rank()), int(group.size()))


@dataclass(kw_only=True)
class VlmpackDatasetProvider(_dataset_provider_base()):
    """Train (and val, when the packed directory has that split) ``MegatronPackStream`` s for one DP rank."""

    packed_dir: str  # a folder written by `vlmpack write`
    processor_path: str | None = None  # the processor folder on this machine, if not where write saw it
    context_parallel_size: int = 1  # the model's CP size (the data must be planned for it)
    tensor_model_parallel_size: int = 1  # the model's TP size
    sequence_parallel: bool = False  # the model's sequence_parallel
    val_split: str = "val"  # the split validation reads
    dataloader_type: str | None = "external"  # Megatron-Bridge iterates the streams as they are

    def adapter(self) -> MegatronAdapter:
        return MegatronAdapter.for_packed_dir(
            self.packed_dir, context_parallel_size=self.context_parallel_size,
            tensor_model_parallel_size=self.tensor_model_parallel_size, sequence_parallel=self.sequence_parallel,
        )

    def build_datasets(self, context: Any) -> tuple[MegatronPackStream | None, MegatronPackStream | None, None]:
        groups = getattr(context, "pg_collection", None)
        self._check_groups(groups)
        dp = getattr(groups, "dp", None)
        rank, world = _group_rank_size(dp) or _parallel_state_dp()
        adapter = self.adapter()

        def stream(split: str) -> MegatronPackStream:
            return MegatronPackStream(self.packed_dir, adapter, processor_path=self.processor_path, split=split,
                                      rank=rank, world_size=world, num_workers=self.num_workers,
                                      data_parallel_group=dp)

        train = stream("train") if context.train_samples > 0 else None
        valid = stream(self.val_split) if context.valid_samples > 0 and self._has_split(self.val_split) else None
        return train, valid, None

    def _check_groups(self, groups: Any) -> None:
        for name, attr in (("context_parallel_size", "cp"), ("tensor_model_parallel_size", "tp")):
            found = _group_rank_size(getattr(groups, attr, None))
            if found is not None and found[1] != getattr(self, name):
                raise ConfigError(
                    f"VlmpackDatasetProvider.{name} is {getattr(self, name)} but the job's {attr} process group has "
                    f"{found[1]} ranks: set it to the model's {name}"
                )

    def _has_split(self, split: str) -> bool:
        from ..dataset import PackIndex

        try:
            return len(PackIndex.from_dir(self.packed_dir, split)) > 0
        except (ConfigError, ShardError):
            return False


def _parallel_state_dp() -> tuple[int, int]:
    """The data-parallel rank and size from megatron-core's global state (older Megatron-Bridge passes no groups)."""
    from megatron.core import parallel_state

    return parallel_state.get_data_parallel_rank(), parallel_state.get_data_parallel_world_size()
