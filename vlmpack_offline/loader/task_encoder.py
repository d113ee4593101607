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

A train split planned with ``parallel.data_parallel_size`` (``schedule.py``) keeps its balance only
when energon walks each worker's slice in order and reads just the scheduled packs:
``train_dataset(path, task_encoder, worker_config)`` calls ``get_train_dataset`` with those
arguments (no shuffle buffer, ``shuffle_over_epochs_multiplier=None``, one slice iterator, the
scheduled packs as ``subset``) after checking the ranks and workers against the plan. Every
epoch then reads the steps in the same order. A plain ``get_train_dataset`` on such a folder
shuffles and cannot keep the balance: ``PackTaskEncoder`` says so at start-up, loudly.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from megatron.energon import Cooker, DefaultTaskEncoder, WorkerConfig, get_train_dataset, stateless
from megatron.energon.errors import FatalSampleError
from megatron.energon.flavors.webdataset.structs import DatasetSubset
from torch.utils.data import get_worker_info

from ..errors import ConfigError, LayoutError
from ..packed_settings import written_mixture, written_schedule
from .adapters.base import Adapter
from .batch import PackBatch, ensure_picklable
from .cooker import DEFAULT_SAMPLE_TYPE, CookedPack, cooker
from .encoder import PackEncoder

__all__ = ["PackTaskEncoder", "LayoutMismatch", "train_dataset"]

log = logging.getLogger(__name__)
# get_train_dataset arguments train_dataset sets itself on a balanced split (each would reorder or cut it)
_ORDER_ARGS = ("batch_size", "shuffle_buffer_size", "max_samples_per_sequence", "shuffle_over_epochs_multiplier",
               "parallel_shard_iters", "subset", "split_part")


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
        self.follows_schedule = False  # set by train_dataset, which reads a balanced split as planned

    def build_train_datasets(self, *, datasets, worker_config, **kwargs):
        """energon's, after saying loudly when a balanced split is read in a way that undoes its balance."""
        if not self.follows_schedule:
            for loaded in datasets:
                path = getattr(getattr(loaded, "dataset", None), "path", None)
                if path is not None and _local(path) is not None and written_schedule(_local(path)) is not None:
                    log.warning(
                        "%s was planned as balanced steps for parallel.data_parallel_size ranks, but get_train_dataset "
                        "shuffles it: every step waits for its slowest rank again. Build the dataset with "
                        "vlmpack_offline.loader.train_dataset(path, task_encoder, worker_config) to keep the balance",
                        path)
        return super().build_train_datasets(datasets=datasets, worker_config=worker_config, **kwargs)

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
        sources = sample.__sources__ or ()  # energon's SourceInfo: the tar a media part that does not decode is in
        return self.encoder.encode(sample.pack, sample.media, shard=sources[0].shard_name if sources else "")

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


def _local(path) -> Path | None:
    """A local folder of an energon path (``EPath``), None for a remote one (no schedule check there)."""
    text = str(path)
    return Path(text) if "://" not in text and Path(text).is_dir() else None


def train_dataset(packed_wds_dir: str | Path, task_encoder: PackTaskEncoder, worker_config: WorkerConfig,
                  *, follow_plan: bool = True, **kwargs: Any):
    """``get_train_dataset`` of a packed folder, one pack per batch; a balanced split read as planned (module doc).

    ``worker_config``'s ``rank`` / ``world_size`` are the data-parallel ones (ranks of one tensor / context /
    pipeline group share a rank). Other ``kwargs`` go to ``get_train_dataset``.
    """
    schedule = written_schedule(packed_wds_dir) if follow_plan else None
    defaults = {"batch_size": 1, "shuffle_buffer_size": None, "max_samples_per_sequence": None}
    if schedule is None:
        if follow_plan and written_mixture(packed_wds_dir):  # the interleaved order
            defaults |= {"shuffle_over_epochs_multiplier": None, "parallel_shard_iters": 1}
        return get_train_dataset(packed_wds_dir, worker_config=worker_config, task_encoder=task_encoder,
                                 **(defaults | kwargs))
    schedule.require_world(worker_config.world_size, "energon train_dataset")
    schedule.require_workers(worker_config.num_workers, "energon train_dataset")
    fixed = sorted(set(kwargs) & set(_ORDER_ARGS))
    if fixed:
        raise ConfigError(f"train_dataset: {', '.join(fixed)} would reorder or cut a balanced split; leave them out "
                          "(or pass follow_plan=False to read it unbalanced)")
    task_encoder.follows_schedule = True
    return get_train_dataset(
        packed_wds_dir, split_part="train", worker_config=worker_config, task_encoder=task_encoder, **defaults,
        shuffle_over_epochs_multiplier=None, parallel_shard_iters=1,
        subset=DatasetSubset(absolute_range=(0, schedule.scheduled)), **kwargs,
    )
