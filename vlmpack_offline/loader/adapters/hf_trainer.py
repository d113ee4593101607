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

Loss normalisation (``loss=``), both computed by ``PackedTrainerMixin`` over the optimizer step
    ``"token"``: the summed token loss over the scored tokens of the step (all ranks and micro-batches)
    divided by their count: the loss of the same samples trained unpacked. ``"sample"`` (default):
    every sub-sample's mean token loss, averaged over the sub-samples of the step, so a long answer
    does not outweigh many short ones. ``get_batch_samples`` counts the step's normaliser (scored
    tokens after the shift, or scored sub-samples) and sums it over the ranks; ``compute_loss`` divides
    each micro-batch's summed loss by it, times the world size (DDP averages gradients over ranks),
    and sets ``loss_is_scaled_for_ga``. Not the Trainer's ``num_items_in_batch``: ``Trainer.compute_loss``
    hands that to the model only when ``model_accepts_loss_kwargs``, and many VLM classes set
    ``accepts_loss_kwargs = False`` (Qwen2.5-VL, Qwen3-VL, GLM-4V, ...): each pack would take its own
    token mean, then the Trainer divide by ``gradient_accumulation_steps``. Under TRL's ``SFTTrainer``,
    ``"token"`` is TRL's own loss (its fused LM head) given the mixin's count. A plain ``Trainer``
    normalises ``"token"`` right only for a model that takes its loss kwargs, with
    ``average_tokens_across_devices``: ``for_packed_dir(model=...)`` checks it (``_plain_trainer_refusal``)
    and the first pack refuses otherwise, as it refuses ``"sample"``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch.utils.data import SequentialSampler

from ...errors import ConfigError
from ...optional import require
from ...packed_settings import may_hold
from ..batch import PackBatch
from ..encoder import EncoderOptions, PackEncoder
from ..labels import IGNORE_INDEX, scored_segments, weighted_loss_sum
from ..sequence import PackSequence
from .base import Adapter, check_model_family

__all__ = ["TrainerAdapter", "TrainerPackDataset", "TrainerPacks", "PackedTrainerMixin",
           "LOSS_WEIGHTS", "LOSS_SAMPLES", "STEP_COUNT"]

Loss = Literal["sample", "token"]
LOSS_WEIGHTS = "vlmpack_loss_weights"  # [1, S] float: 1/n_scored of its sub-sample (per-sample loss only)
LOSS_SAMPLES = "vlmpack_loss_samples"  # long 0-d: sub-samples with a scored token in this micro-batch
STEP_COUNT = "vlmpack_step_count"  # set by PackedTrainerMixin.get_batch_samples: the step's normaliser, all ranks

_SAMPLE_LOSS_REFUSAL = (
    "these packs carry per-sample loss weights (loss='sample'), which a plain Trainer would pass to "
    "the model and ignore: train with PackedTrainer (or PackedTrainerMixin before your Trainer class), "
    "or build the packs with loss='token'"
)
_UNCHECKED_TOKEN_LOSS = (
    "loss='token' with a plain Trainer is exact only for a model that takes the Trainer's token count "
    "(num_items_in_batch): pass model= to TrainerPacks.for_packed_dir so it can check, or train with "
    "PackedTrainer (or PackedTrainerMixin before your Trainer class), which is exact for any model"
)


class TrainerPackDataset(PackSequence):
    """``PackSequence`` that refuses a plain Trainer where it would train another loss (module doc)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.read_by_packed_trainer = False  # set by PackedTrainerMixin: it keeps the order, normalises the loss
        # why a plain Trainer would not train the loss asked for (None: it would); for_packed_dir checks the model
        self.plain_trainer_refusal: str | None = (_SAMPLE_LOSS_REFUSAL if self.packs.encoder.options.loss_weights
                                                  else _UNCHECKED_TOKEN_LOSS)  # fmt: skip

    def __getitem__(self, i: int) -> PackBatch:
        if self.plain_trainer_refusal is not None and not self.read_by_packed_trainer:
            raise ConfigError(self.plain_trainer_refusal)
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
        options = EncoderOptions(loss_weights=loss == "sample", dummy_image_for_text_packs=dummy_image_for_text_packs)
        encoder = PackEncoder.from_packed_dir(packed_wds_dir, processor_path, options=options)
        if args.world_size > 1 and args.gradient_checkpointing and args.ddp_find_unused_parameters is not True:
            # transformers then turns off DDP's search for unused parameters: a tower that gets no gradients on one
            # rank and some on another makes DDP wait forever
            hears = encoder.pack_processor is not None and encoder.pack_processor.audio_extractor is not None
            if hears and may_hold(packed_wds_dir, "audios"):
                raise ConfigError(
                    f"gradient_checkpointing with several ranks, and {packed_wds_dir} holds audio: transformers then "
                    "turns off DDP's search for unused parameters, and a rank whose pack has no audio leaves the audio "
                    "tower without gradients, so DDP waits forever (there is no dummy audio); set "
                    "ddp_find_unused_parameters=True"
                )
            if not dummy_image_for_text_packs:
                raise ConfigError(
                    "gradient_checkpointing with several ranks: transformers then turns off DDP's search for unused "
                    "parameters, and a rank whose pack has no image leaves the vision tower without gradients, so "
                    "DDP waits forever; set ddp_find_unused_parameters=True, or pass dummy_image_for_text_packs=True "
                    "(a one-token black image in every text-only pack, which changes no loss)"
                )
        if model is not None:
            check_model_family("TrainerPacks", packed_wds_dir, encoder.rules.model_type, model)
            if attn_implementation is None:
                attn_implementation = getattr(model.config, "_attn_implementation", None)
        dataset = TrainerPackDataset(
            packed_wds_dir, encoder, world_size=args.world_size,
            micro_batches_per_step=args.gradient_accumulation_steps,
            seed=args.seed if seed is None else seed, follow_plan=follow_plan,
        )  # fmt: skip
        if loss == "token" and model is not None:
            dataset.plain_trainer_refusal = _plain_trainer_refusal(model, args)
        return cls(dataset, TrainerAdapter(attn_implementation=attn_implementation or "sdpa", loss=loss))


class PackedTrainerMixin:
    """Mix in before ``transformers.Trainer`` or ``trl.SFTTrainer``: keeps the packs' order, normalises both losses
    over the optimizer step (module doc).

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
        """The Trainer's own, then the step's normaliser over all ranks (scored tokens, or scored sub-samples
        for ``loss="sample"``), handed to each micro-batch as ``STEP_COUNT``."""
        batch_samples, num_items = super().get_batch_samples(epoch_iterator, num_batches, device)
        if batch_samples and isinstance(self.train_dataset, TrainerPackDataset):
            count = sum(_normaliser(batch) for batch in batch_samples).to(device)
            if self.args.world_size > 1:
                count = self.accelerator.gather(count[None]).sum()
            for batch in batch_samples:
                batch[STEP_COUNT] = count
            num_items = count
        return batch_samples, num_items

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        step_count = inputs.pop(STEP_COUNT, None)  # a training micro-batch of packs (get_batch_samples)
        weights = inputs.pop(LOSS_WEIGHTS, None)  # loss="sample"
        own_samples = inputs.pop(LOSS_SAMPLES, None)  # still here outside training (evaluation)
        if step_count is None and weights is None:  # not packs, or loss="token" in evaluation: the Trainer's own
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)  # fmt: skip
        if step_count is None:  # evaluation with the per-sample loss: this pack's own sub-samples
            labels = inputs.pop("labels")
            outputs = model(**inputs)
            loss = weighted_loss_sum(outputs.logits, labels, weights) / max(1, int(own_samples))
            return (loss, outputs) if return_outputs else loss
        self.loss_is_scaled_for_ga = True  # normalised over the whole accumulated step, as training_step reads it
        ranks = self.args.world_size  # DDP averages the gradients over the ranks; the count spans them
        if weights is None and _is_trl_sft_trainer(type(self)):
            # TRL's token loss (its fused LM head) divides by the num_items_in_batch it is given and multiplies
            # by the ranks when average_tokens_across_devices (trl/trainer/sft_trainer.py: compute_loss)
            result = super().compute_loss(model, inputs, return_outputs=return_outputs, num_items_in_batch=step_count)
            if self.args.average_tokens_across_devices or ranks == 1:
                return result
            return (result[0] * ranks, result[1]) if return_outputs else result * ranks
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        loss = weighted_loss_sum(outputs.logits, labels, weights) / step_count * ranks
        return (loss, outputs) if return_outputs else loss


def _normaliser(batch: dict[str, Any]) -> torch.Tensor:
    """What one micro-batch adds to the step's normaliser: its scored sub-samples (``loss="sample"``, counted by
    the collator) or its scored tokens after the shift (``logits[t]`` scores ``labels[t + 1]``)."""
    if LOSS_SAMPLES in batch:
        return batch.pop(LOSS_SAMPLES)
    return (batch["labels"][..., 1:] != IGNORE_INDEX).sum()


def _plain_trainer_refusal(model: Any, args: Any) -> str | None:
    """Why a plain ``Trainer`` would not normalise ``loss="token"`` over the step's tokens (None: it would).

    transformers' ``Trainer`` counts the step's tokens over all ranks only for a model that takes its loss
    kwargs (``trainer.py``: ``accepts_loss_kwargs`` where the class sets it, else a ``**kwargs`` in ``forward``),
    and over all ranks only with ``average_tokens_across_devices``."""
    takes = getattr(model, "accepts_loss_kwargs", None)
    if takes is None:
        parameters = inspect.signature(model.forward).parameters.values()
        takes = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    fix = "train with PackedTrainer (or PackedTrainerMixin before your Trainer class), which is exact for any model"
    if not takes:
        return (f"loss='token' with a plain Trainer: {type(model).__name__} sets accepts_loss_kwargs=False, so "
                "transformers' Trainer does not hand it the step's token count (num_items_in_batch); each pack "
                f"would take its own token mean and the Trainer divide by gradient_accumulation_steps: {fix}")  # fmt: skip
    if args.world_size > 1 and not args.average_tokens_across_devices:
        return ("loss='token' with a plain Trainer and average_tokens_across_devices=False: each rank would divide "
                f"by its own tokens; set it to True (the default), or {fix}")
    return None


def _takes_only_hf_datasets(trainer_class: type) -> bool:
    """TRL's trainers (``SFTTrainer``) refuse a torch dataset; transformers' ``Trainer`` takes any."""
    return any(cls.__module__.split(".")[0] == "trl" for cls in trainer_class.__mro__)


def _is_trl_sft_trainer(trainer_class: type) -> bool:
    """TRL's ``SFTTrainer`` computes its own token loss (fused LM head), normalised by the count it is given."""
    return any(cls.__module__ == "trl.trainer.sft_trainer" and cls.__name__ == "SFTTrainer"
               for cls in trainer_class.__mro__)  # fmt: skip


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
