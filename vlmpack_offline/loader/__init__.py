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

from .._lazy import lazy_names

# name -> the module that defines it, imported on first use: the scan's check (servable.py) and a plain
# ``import vlmpack_offline.loader.x`` need no torch until a piece that uses it is asked for
_WHERE = {
    "block_causal_mask": "attention", "segment_ids": "attention", "varlen_attention": "attention",
    "varlen_backend": "attention", "PackBatch": "batch", "EncoderOptions": "encoder", "PackEncoder": "encoder",
    "IGNORE_INDEX": "labels", "RopeIndex": "rope", "VisionInputs": "vision_inputs",
    "PackTaskEncoder": "task_encoder", "train_dataset": "task_encoder",
    "PackDataset": "dataset", "packed_shards": "dataset", "iter_cooked_packs": "dataset",
    "PackSequence": "sequence", "PackSequenceSampler": "sequence",
}  # fmt: skip


__getattr__ = lazy_names(__name__, globals(), _WHERE)

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
