"""Run by ``torchrun --nproc_per_node W`` from the trainer tests (not a test module).

    python -m torch.distributed.run --nproc_per_node 2 tests/_ddp_trainer.py RUNS.json

``RUNS.json`` is a list of runs, trained one after the other in the same process group (gloo on
CPU): ``{"name", "packed", "family", "loss", "trainer", "steps", "lr"}`` plus ``"processor"`` for
Gemma3 (the folder its tiny config takes its token ids from). ``trainer`` is ``"Trainer"``
(``PackedTrainerMixin`` + ``transformers.Trainer``), ``"SFTTrainer"`` (the mixin + TRL's) or
``"plain"`` (``transformers.Trainer`` alone, sequential sampler). Each rank trains
``_uneven_model.uneven_model(family)`` with gradient accumulation 2 and writes
``OUT/<name>/rank{r}.json``: per micro-batch, its length and the loss ``training_step`` returned,
and the Trainer's log. Rank 0 also writes ``OUT/<name>/step{k}.pt`` at each optimizer step: the
trainable weights the step's forwards ran with, and their gradients as the optimizer gets them
(after DDP's all-reduce, before the update).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from _uneven_model import trainable, uneven_model
from transformers import Trainer, TrainerCallback, TrainingArguments

from vlmpack_offline.loader.adapters import PackedTrainerMixin, TrainerPacks

GA = 2  # micro-batches per optimizer step


class Recording:
    """Before a Trainer class: records each micro-batch's length and the loss its ``training_step`` returned."""

    micro: list[tuple[int, float]]

    def training_step(self, model, inputs, num_items_in_batch=None):
        length = int(inputs["input_ids"].shape[-1])
        loss = super().training_step(model, inputs, num_items_in_batch)
        self.micro.append((length, loss.item()))
        return loss


class RecordingTrainer(Recording, PackedTrainerMixin, Trainer):
    pass


class PlainRecordingTrainer(Recording, Trainer):
    pass


class SaveGradients(TrainerCallback):
    """Rank 0: the weights and gradients the optimizer is about to step with (DDP has averaged them)."""

    def __init__(self, out: Path) -> None:
        self.out = out

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if args.process_index == 0:
            params = trainable(model)
            grads = {n: torch.zeros_like(p) if p.grad is None else p.grad.detach().clone() for n, p in params.items()}
            torch.save({"weights": {n: p.detach().clone() for n, p in params.items()}, "grads": grads},
                       self.out / f"step{state.global_step}.pt")  # an unused weight's gradient is None: zero


def _trainer(run: dict, out: Path, model):
    common = dict(output_dir=str(out), per_device_train_batch_size=1, gradient_accumulation_steps=GA,
                  max_steps=run["steps"], learning_rate=run["lr"], max_grad_norm=0.0,  # no clipping
                  dataloader_num_workers=0, report_to=[], use_cpu=True, save_strategy="no", seed=0,
                  disable_tqdm=True, logging_steps=1)  # fmt: skip
    if run["trainer"] == "SFTTrainer":
        from transformers import AutoTokenizer
        from trl import SFTConfig, SFTTrainer

        class PackedSFTTrainer(Recording, PackedTrainerMixin, SFTTrainer):
            pass

        args = SFTConfig(**common, dataset_kwargs={"skip_prepare_dataset": True}, remove_unused_columns=False,
                         padding_free=False, packing=False, max_length=None, gradient_checkpointing=False,
                         bf16=False)  # fmt: skip (TRL 1.16 defaults to bf16)
        packs = TrainerPacks.for_packed_dir(run["packed"], args, model=model, loss=run["loss"])
        tokenizer = AutoTokenizer.from_pretrained(packs.dataset.packs.encoder.rules.processor_path)
        return PackedSFTTrainer(model=model, args=args, train_dataset=packs.dataset, data_collator=packs.collator,
                                processing_class=tokenizer, callbacks=[SaveGradients(out)])  # fmt: skip
    if run["trainer"] == "plain":
        args = TrainingArguments(**common, train_sampling_strategy="sequential")
        packs = TrainerPacks.for_packed_dir(run["packed"], args, model=model, loss=run["loss"])
        return PlainRecordingTrainer(model=model, args=args, train_dataset=packs.dataset,
                                     data_collator=packs.collator, callbacks=[SaveGradients(out)])  # fmt: skip
    args = TrainingArguments(**common)
    packs = TrainerPacks.for_packed_dir(run["packed"], args, model=model, loss=run["loss"])
    return RecordingTrainer(model=model, args=args, train_dataset=packs.dataset, data_collator=packs.collator,
                            callbacks=[SaveGradients(out)])  # fmt: skip


def main(runs_file: str) -> None:
    for run in json.loads(Path(runs_file).read_text()):
        out = Path(run["out"])
        out.mkdir(parents=True, exist_ok=True)
        trainer = _trainer(run, out, uneven_model(run["family"], run.get("processor")))
        trainer.micro = []
        trainer.train()
        record = {"rank": trainer.args.process_index, "world_size": trainer.args.world_size,
                  "micro": trainer.micro, "log": trainer.state.log_history}  # fmt: skip
        Path(out, f"rank{trainer.args.process_index}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1])
