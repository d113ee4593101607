"""Run by ``torchrun --nproc_per_node W`` from tests/test_trainer_adapter.py (not a test module).

    python -m torch.distributed.run --nproc_per_node 2 tests/_ddp_trainer.py PACKED OUT LOSS

Each rank trains the tiny Qwen2-VL on the packs with the real ``Trainer`` (gloo on CPU, learning
rate 0) and writes OUT/rank{r}.json: per micro-batch, its length and the loss ``training_step`` returned.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from transformers import Trainer, TrainingArguments

from vlmpack_offline.loader.adapters import PackedTrainerMixin, TrainerPacks
from vlmpack_offline.synthetic.tiny_models import tiny_qwen_vl


class RecordingTrainer(PackedTrainerMixin, Trainer):
    def training_step(self, model, inputs, num_items_in_batch=None):
        length = int(inputs["input_ids"].shape[-1])
        loss = super().training_step(model, inputs, num_items_in_batch)
        self.micro.append((length, loss.item()))
        return loss


def main(packed: str, out: str, loss: str, steps: int = 2, ga: int = 2) -> None:
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=1, gradient_accumulation_steps=ga,
                             max_steps=steps, learning_rate=0.0, dataloader_num_workers=1, report_to=[],
                             use_cpu=True, save_strategy="no", seed=0, disable_tqdm=True, logging_steps=1)  # fmt: skip
    model = tiny_qwen_vl("qwen2_vl", "sdpa", seed=0)
    packs = TrainerPacks.for_packed_dir(packed, args, model=model, loss=loss)
    trainer = RecordingTrainer(model=model, args=args, train_dataset=packs.dataset, data_collator=packs.collator)
    trainer.micro = []
    trainer.train()
    record = {"rank": args.process_index, "world_size": args.world_size, "micro": trainer.micro}
    Path(out, f"rank{args.process_index}.json").write_text(json.dumps(record))


if __name__ == "__main__":
    main(*sys.argv[1:4])
