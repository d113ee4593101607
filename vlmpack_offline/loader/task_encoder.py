"""megatron-energon entry point: ``PackTaskEncoder`` turns cooked packs into ``PackBatch`` es.

::

    from megatron.energon import WorkerConfig, get_loader, get_train_dataset
    encoder = PackTaskEncoder(PackEncoder(config))
    ds = get_train_dataset(config.data.packed_wds_dir, batch_size=1, shuffle_buffer_size=None,
                           max_samples_per_sequence=None, worker_config=WorkerConfig.default_worker_config(),
                           task_encoder=encoder)
    for batch in get_loader(ds):   # one PackBatch per step: the pack is the batch
        ...

``PackTaskEncoder(encoder, adapter=MegatronAdapter(...))`` hands out the adapter's batch
instead (``adapters/``), built in energon's workers.

A pack already fills the context, so a batch is one pack (``batch_size=1``);
``batch`` refuses more, because concatenating packs would break the
``cu_seqlens`` contract and the capacity the plan promised.

Epochs and state are energon's: with ``WorkerConfig(rank, world_size, num_workers)``
energon deals the split's packs out to the ``world_size * num_workers`` workers in
contiguous slices whose sizes differ by at most one, and its infinite train loader
walks each worker's slice once per epoch; ``len(loader)`` is this rank's share.
When the pack count is a multiple of ``world_size * num_workers`` every rank has
the same ``len(loader)`` and that many steps see every train pack exactly once;
otherwise worker (and rank) shares differ by one, so step a fixed count on every rank
(energon's loader never ends) and let the extras spill into the next epoch.
``get_savable_loader``'s ``save_state_rank`` / ``restore_state_rank`` resume
mid-epoch with nothing more from us: the cooker is ``@stateless`` and a
``PackBatch`` is rebuilt from its pack.
In a worker, each batch is checked to pickle before energon queues it (an error
energon reports, instead of a silent hang in the queue's feeder thread).
"""

from __future__ import annotations

from typing import Any

from megatron.energon import Cooker, DefaultTaskEncoder, stateless
from megatron.energon.errors import FatalSampleError
from torch.utils.data import get_worker_info

from ..errors import LayoutError
from .adapters.base import Adapter
from .batch import PackBatch, ensure_picklable
from .cooker import DEFAULT_SAMPLE_TYPE, CookedPack, cooker
from .encoder import PackEncoder

__all__ = ["PackTaskEncoder", "LayoutMismatch"]


class LayoutMismatch(LayoutError, FatalSampleError):
    """A dataset of another layout than the task encoder reads: fatal for every pack alike, so energon
    stops at the first one instead of logging and skipping each (its ``FatalSampleError``)."""


class PackTaskEncoder(DefaultTaskEncoder[CookedPack, PackBatch, PackBatch, PackBatch]):
    """Cooker for our sample type + ``encode_sample`` (one pack -> ``PackBatch``) + ``batch`` (size 1)."""

    decoder = None  # media stay encoded bytes: the model's processor decodes them

    def __init__(self, encoder: PackEncoder, *, sample_type: str | None = None,
                 adapter: Adapter | None = None) -> None:
        super().__init__()
        self.encoder = encoder
        self.adapter = adapter  # a training framework's adapter: batches come out in its format (adapters/)
        self.sample_type = sample_type or encoder.config.sample.sample_type or DEFAULT_SAMPLE_TYPE
        # ours first; any other subflavor reaches the second, which refuses it naming both layouts
        self.cookers = [cooker(self.sample_type), Cooker(cook=self.refuse_other_layout)]

    @stateless
    def refuse_other_layout(self, sample: dict):
        found = (sample.get("__subflavors__") or {}).get("sample_type")
        raise LayoutMismatch(
            f"pack {sample.get('__key__', '?')!r} comes from a dataset written as sample_type {found!r}, but this "
            f"PackTaskEncoder reads sample_type {self.sample_type!r}: build it as PackTaskEncoder("
            "PackEncoder.from_packed_dir(<that folder>)) (the folder records its layout), or as "
            f"PackTaskEncoder(encoder, sample_type={found!r}); one task encoder reads folders of one layout"
        )

    def encode_sample(self, sample: CookedPack) -> PackBatch:
        return self.encoder.encode(sample.pack, sample.media)

    def batch(self, samples: list[PackBatch]) -> PackBatch:
        if len(samples) != 1:
            raise ValueError(
                f"a batch is one pack, got {len(samples)}: pass batch_size=1 to get_train_dataset "
                "(use gradient accumulation for more packs per optimizer step)"
            )
        return samples[0]

    def encode_batch(self, batch: PackBatch) -> Any:
        out = batch if self.adapter is None else self.adapter(batch)
        if get_worker_info() is not None:  # a DataLoader worker sends it to the main process: it must pickle
            ensure_picklable(out, f"pack {batch.pack_id}'s batch")
        return out
