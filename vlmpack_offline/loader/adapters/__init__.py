"""Training-framework adapters: one module per framework behind ``base.Adapter`` (see its doc).

::

    base.py          Adapter: PackBatch -> one framework's micro-batch; the DataLoader's collate_fn
    megatron.py      MegatronAdapter: THD dict + PackedSeqParams, CP padding and per-rank slices
    megatron_stream  MegatronPackStream: energon's savable loader as the endless, resumable iterator
                     Megatron's training loop pulls micro-batches from
    megatron_bridge  VlmpackDatasetProvider: Megatron-Bridge's dataset hook (imports Megatron-Bridge)
    hf_trainer.py    TrainerPacks (dataset + collator), PackedTrainer / PackedTrainerMixin:
                     transformers.Trainer and TRL's SFTTrainer
    automodel.py     AutomodelAdapter: NeMo Automodel's neat-packing items and its own collater

The frameworks themselves are imported only when an adapter needs them.
"""

from .automodel import AutomodelAdapter
from .base import Adapter
from .hf_trainer import PackedTrainerMixin, TrainerAdapter, TrainerPackDataset, TrainerPacks
from .megatron import MegatronAdapter, MegatronVisualInputs, cp_partition_indices, cp_slice, packed_seq_params
from .megatron_stream import MegatronPackStream

__all__ = ["Adapter", "AutomodelAdapter", "MegatronAdapter", "MegatronPackStream", "MegatronVisualInputs",
           "PackedTrainerMixin", "TrainerAdapter", "TrainerPackDataset", "TrainerPacks", "cp_partition_indices",
           "cp_slice", "packed_seq_params"]
