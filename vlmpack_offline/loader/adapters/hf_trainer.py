"""Hugging Face ``transformers.Trainer`` (and TRL's ``SFTTrainer``): a dataset + collator it trains on as is.

::

    packs = TrainerPacks.for_packed_dir("/data/packed", args, model=model)   # args: TrainingArguments
    trainer = PackedTrainer(model=model, args=args, train_dataset=packs.dataset, data_collator=packs.collator)

What each part does, and why:

``TrainerPackDataset`` (``loader/sequence.py``'s ``PackSequence``)
    Item ``i`` is the pack data-parallel rank ``i % W`` reads at its micro-batch ``i // W``: the
    Trainer's DataLoader, sharded by accelerate (``BatchSamplerShard``: rank r of W takes batches
    r, r + W, ...), gives every rank its own packs in ``PackDataset``'s order, each read by that rank
    only; the length is a multiple of ``W * gradient_accumulation_steps``, so every optimizer step is
    full on every rank. It needs a sequential sampler: ``PackedTrainer`` (the mixin) makes it so, a
    plain ``Trainer`` needs ``train_sampling_strategy="sequential"``; a shuffled order is refused at
    the first pack asked for out of order. Resume skips at the sampler (accelerate's
    ``SkipBatchSampler``): it continues with the next pack without reading the skipped ones.

``TrainerAdapter`` (the collator)
    One pack per device per micro-batch (``per_device_train_batch_size=1``): ``PackBatch.model_kwargs``
    for the model's attention implementation (SDPA: the block-causal mask; flash-attention 2: no mask,
    ``cu_seq_lens_q/k`` + ``max_length_q/k`` as transformers' flash path reads them, positions
    restarting per sub-sample), labels unshifted (the model's loss shifts them; each sub-sample's first
    label is -100, so no token predicts the next sub-sample).

Loss normalisation (``loss=``)
    ``"token"``: the model's own loss with the Trainer's ``num_items_in_batch``: the sum of token losses
    over the scored tokens of the optimizer step, all ranks and micro-batches. ``"sample"`` (default):
    every sub-sample's mean token loss, averaged over the sub-samples of the step (all ranks and
    micro-batches), so a long answer does not outweigh many short ones. It needs ``PackedTrainer``
    (it counts sub-samples where the Trainer counts tokens); a plain ``Trainer`` refuses it at the first step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils.data import SequentialSampler

from ...errors import ConfigError
from ...optional import require
from ..batch import PackBatch
from ..encoder import EncoderOptions, PackEncoder
from ..labels import scored_segments, weighted_loss_sum
from ..sequence import PackSequence
from .base import Adapter, check_model_family

__all__ = ["TrainerAdapter", "TrainerPackDataset", "TrainerPacks", "PackedTrainerMixin",
           "LOSS_WEIGHTS", "LOSS_SAMPLES"]

Loss = Literal["sample", "token"]
LOSS_WEIGHTS = "vlmpack_loss_weights"  # [1, S] float: 1/n_scored of its sub-sample (per-sample loss only)
LOSS_SAMPLES = "vlmpack_loss_samples"  # long 0-d: sub-samples with a scored token in this micro-batch


class TrainerPackDataset(PackSequence):
    """``PackSequence`` that refuses per-sample loss weights unless ``PackedTrainerMixin`` reads it (module doc)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.read_by_packed_trainer = False  # set by PackedTrainerMixin: it keeps the order, counts sub-samples

    def __getitem__(self, i: int) -> PackBatch:
        if self.packs.encoder.options.loss_weights and not self.read_by_packed_trainer:
            raise ConfigError(
                "these packs carry per-sample loss weights (loss='sample'), which a plain Trainer would pass to "
                "the model and ignore: train with PackedTrainer (or PackedTrainerMixin before your Trainer class), "
                "or build the packs with loss='token'"
            )
        return super().__getitem__(i)


class TrainerAdapter(Adapter):
    """``PackBatch`` -> the keyword arguments of the model's ``forward`` (plus the per-sample loss fields)."""

    framework = "transformers.Trainer"

    def __init__(self, *, attn_implementation: str = "sdpa", loss: Loss = "sample") -> None:
        if loss not in ("sample", "token"):
            raise ConfigError(f"TrainerAdapter: loss must be 'sample' or 'token', got {loss!r}")
        self.attn_implementation = attn_implementation
        self.loss = loss

    def convert(self, batch: PackBatch) -> dict[str, Any]:
        kwargs = batch.model_kwargs(self.attn_implementation)
        if self.loss == "sample":
            if batch.loss_weights is None:
                raise ConfigError("TrainerAdapter(loss='sample') needs the encoder's loss weights: build it with "
                                  "EncoderOptions(loss_weights=True) (TrainerPacks.for_packed_dir does)")
            kwargs[LOSS_WEIGHTS] = batch.loss_weights
            kwargs[LOSS_SAMPLES] = torch.tensor(scored_segments(batch.labels, batch.cu_seqlens))
        return kwargs


@dataclass(frozen=True, slots=True)
class TrainerPacks:
    """The dataset + collator pair for one ``TrainingArguments``, checked against it (``for_packed_dir``)."""

    dataset: TrainerPackDataset
    collator: TrainerAdapter

    @classmethod
    def for_packed_dir(cls, packed_wds_dir: str | Path, args: Any, *, model: Any = None,
                       processor_path: str | Path | None = None, loss: Loss = "sample",
                       attn_implementation: str | None = None, seed: int | None = None,
                       dummy_image_for_text_packs: bool = False, follow_plan: bool = True) -> TrainerPacks:
        """Build both from the settings ``packed_wds_dir`` recorded; ``args`` is the ``TrainingArguments``.

        ``model``: refused when its family is not the one the packs were counted for; its
        ``config._attn_implementation`` picks the batch format unless ``attn_implementation`` is given.
        ``dummy_image_for_text_packs``: the vision tower runs on every pack (``EncoderOptions``), for data
        parallelism where an unused vision tower would stall DDP (one token more in text-only packs).
        ``follow_plan=False`` reads a folder planned for balanced steps without its schedule (``PackSequence``),
        e.g. on fewer ranks than it was planned for.
        """
        if args.per_device_train_batch_size != 1:
            raise ConfigError(
                f"per_device_train_batch_size={args.per_device_train_batch_size}: a pack is one micro-batch (more "
                "would mix sub-sample boundaries); set it to 1 and make packs longer (sample.max_token_len) or use "
                "gradient_accumulation_steps"
            )
        if getattr(args, "dataloader_persistent_workers", False):
            raise ConfigError("dataloader_persistent_workers=True keeps each worker's copy of the dataset, so the "
                              "new permutation of the next epoch would not reach it; set it to False")
        if (args.world_size > 1 and args.gradient_checkpointing and args.ddp_find_unused_parameters is not True
                and not dummy_image_for_text_packs):
            raise ConfigError(
                "gradient_checkpointing with several ranks: transformers then turns off DDP's search for unused "
                "parameters, and a rank whose pack has no image leaves the vision tower without gradients, so "
                "DDP waits forever; set ddp_find_unused_parameters=True, or pass dummy_image_for_text_packs=True "
                "(a one-token black image in every text-only pack, which changes no loss)"
            )
        options = EncoderOptions(loss_weights=loss == "sample", dummy_image_for_text_packs=dummy_image_for_text_packs)
        encoder = PackEncoder.from_packed_dir(packed_wds_dir, processor_path, options=options)
        if model is not None:
            check_model_family("TrainerPacks", packed_wds_dir, encoder.rules.model_type, model)
            if attn_implementation is None:
                attn_implementation = getattr(model.config, "_attn_implementation", None)
        dataset = TrainerPackDataset(
            packed_wds_dir, encoder, world_size=args.world_size,
            micro_batches_per_step=args.gradient_accumulation_steps,
            seed=args.seed if seed is None else seed, follow_plan=follow_plan,
        )  # fmt: skip
        return cls(dataset, TrainerAdapter(attn_implementation=attn_implementation or "sdpa", loss=loss))


class PackedTrainerMixin:
    """Mix in before ``transformers.Trainer`` or ``trl.SFTTrainer``: keeps the packs' order, adds the per-sample loss.

    ``class PackedSFTTrainer(PackedTrainerMixin, SFTTrainer): pass``
    """

    def __init__(self, *args, **kwargs) -> None:
        for value in (*args, *kwargs.values()):  # before the base class reads it
            if isinstance(value, TrainerPackDataset):
                value.read_by_packed_trainer = True
        packs = kwargs.get("train_dataset")
        if isinstance(packs, TrainerPackDataset) and _takes_only_hf_datasets(type(self)):
            # TRL's SFTTrainer accepts only `datasets` datasets (and would prepare them): it is built on a
            # one-row placeholder, then trains on the packs (its DataLoader comes from the Trainer's code)
            datasets = require("datasets", "PackedTrainerMixin with TRL")
            kwargs["train_dataset"] = datasets.Dataset.from_dict({"input_ids": [[0]]})
            super().__init__(*args, **kwargs)
            self.train_dataset = packs
        else:
            super().__init__(*args, **kwargs)

    def _get_train_sampler(self, train_dataset=None):
        dataset = self.train_dataset if train_dataset is None else train_dataset
        if isinstance(dataset, TrainerPackDataset):
            _check_dataset_against_args(dataset, self.args)
            return SequentialSampler(dataset)
        return super()._get_train_sampler(train_dataset)

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        """The Trainer's own, then for the per-sample loss: the step's sub-samples over all ranks, not its tokens."""
        batch_samples, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        if batch_samples and LOSS_SAMPLES in batch_samples[0]:
            count = sum(batch.pop(LOSS_SAMPLES) for batch in batch_samples).to(device)
            if self.args.world_size > 1:
                count = self.accelerator.gather(count[None]).sum()
            num_items = count
        return batch_samples, num_items

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if LOSS_WEIGHTS not in inputs:
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)  # fmt: skip
        weights, labels = inputs.pop(LOSS_WEIGHTS), inputs.pop("labels")
        # still here when the batch did not come through get_batch_samples (evaluation, where the Trainer
        # counts the batch's tokens): normalise over this batch's own sub-samples then
        samples = inputs.pop(LOSS_SAMPLES, None)
        outputs = model(**inputs)
        total = weighted_loss_sum(outputs.logits, labels, weights)
        if samples is not None:
            loss = total / max(1, int(samples))
        else:
            loss = total / num_items_in_batch
            if self.args.world_size > 1:  # DDP averages gradients over ranks; the count already spans them
                loss = loss * self.args.world_size
        self.loss_is_scaled_for_ga = True  # normalised over the whole accumulated step
        return (loss, outputs) if return_outputs else loss


def _takes_only_hf_datasets(trainer_class: type) -> bool:
    """TRL's trainers (``SFTTrainer``) refuse a torch dataset; transformers' ``Trainer`` takes any."""
    return any(cls.__module__.split(".")[0] == "trl" for cls in trainer_class.__mro__)


def _check_dataset_against_args(dataset: TrainerPackDataset, args: Any) -> None:
    for name, ours, theirs in (("world_size", dataset.world_size, args.world_size),
                               ("gradient_accumulation_steps", dataset.micro_batches_per_step,
                                args.gradient_accumulation_steps)):  # fmt: skip
        if ours != theirs:
            raise ConfigError(
                f"the packs were cut for {name}={ours} but the Trainer runs with {theirs}: build them with "
                "TrainerPacks.for_packed_dir(packed_dir, args) from the TrainingArguments the Trainer gets"
            )


_TRAINER: dict[str, type] = {}


def __getattr__(name: str):
    # PackedTrainer subclasses transformers.Trainer, which needs accelerate: built on first use only.
    if name == "PackedTrainer":
        if "PackedTrainer" not in _TRAINER:
            require("accelerate", "transformers.Trainer")
            from transformers import Trainer

            _TRAINER["PackedTrainer"] = type("PackedTrainer", (PackedTrainerMixin, Trainer), {
                "__doc__": "``transformers.Trainer`` with ``PackedTrainerMixin``: trains on ``TrainerPacks``.",
                "__module__": __name__,
            })  # fmt: skip
        return _TRAINER["PackedTrainer"]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
