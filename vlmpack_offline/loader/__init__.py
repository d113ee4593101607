"""Online loader: one pack from ``pretrain-*.tar`` becomes varlen model inputs.

::

    encoder.py       PackEncoder: PackedSample + media bytes -> PackBatch (length-checked per sub-sample)
    batch.py         PackBatch: input_ids, labels, position_ids, cu_seqlens, vision, ...; model_kwargs()
    labels.py        labels / loss weights per sub-sample (no label crosses a boundary)
    rope.py          RopeIndex: the model's own get_rope_index, per sub-sample
    media_processor  images (PIL image processor) and video frames (decord, shared sampler)
    vision_inputs    VisionInputs: the one container for every vision field the processor made
    attention.py     varlen_attention (flash-attn | torch varlen | SDPA block mask), block_causal_mask
    cooker.py        energon cooker (crude tar parts -> CookedPack)
    task_encoder.py  PackTaskEncoder and train_dataset for megatron-energon
    dataset.py       PackDataset: plain PyTorch IterableDataset (webdataset, rank/worker split)
    sequence.py      PackSequence: map-style, item i = the pack rank i % W reads (frameworks that shard)
    adapters/        one module per training framework (Megatron, transformers.Trainer, NeMo Automodel)
"""

from .attention import block_causal_mask, segment_ids, varlen_attention, varlen_backend
from .batch import PackBatch
from .encoder import EncoderOptions, PackEncoder
from .labels import IGNORE_INDEX
from .rope import RopeIndex
from .vision_inputs import VisionInputs


def __getattr__(name: str):
    # energon / webdataset entry points import lazily: the encoder alone needs neither.
    if name in ("PackTaskEncoder", "train_dataset"):
        from . import task_encoder

        return getattr(task_encoder, name)
    if name in ("PackDataset", "packed_shards", "iter_cooked_packs"):
        from . import dataset

        return getattr(dataset, name)
    if name in ("PackSequence", "PackSequenceSampler"):
        from . import sequence

        return getattr(sequence, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EncoderOptions",
    "PackEncoder",
    "PackBatch",
    "VisionInputs",
    "RopeIndex",
    "IGNORE_INDEX",
    "varlen_attention",
    "varlen_backend",
    "block_causal_mask",
    "segment_ids",
    "PackTaskEncoder",
    "train_dataset",
    "PackDataset",
    "PackSequence",
    "PackSequenceSampler",
    "packed_shards",
    "iter_cooked_packs",
]
