"""Fine-tune an HF Qwen-VL model on vlmpack packs with ``transformers.Trainer`` (``PackedTrainer``).

    python examples/train_hf_trainer.py --demo    # small dataset -> scan, bucket, plan, write -> Trainer, on CPU
    python examples/train_hf_trainer.py --packed-wds-dir /data/packed --model /models/Qwen2.5-VL-7B-Instruct
                                        [--processor-dir /models/Qwen2.5-VL-7B-Instruct] [--loss token]
    torchrun --nproc_per_node 8 examples/train_hf_trainer.py --packed-wds-dir /data/packed --model ...

``TrainerPacks.for_packed_dir(packed_dir, args, model=model, loss=...)`` builds the dataset and the
collator from the ``TrainingArguments`` the Trainer gets (world size, gradient accumulation,
seed) and the settings the packed dataset recorded at write time; ``PackedTrainer`` is
``transformers.Trainer`` with ``PackedTrainerMixin``: a sequential sampler (accelerate gives rank
r of W the items r, r + W, ...: each rank its own packs, none read twice) and the per-sample
loss. One pack is one micro-batch (``per_device_train_batch_size=1``); DataLoader workers encode
the packs (pixels included) in parallel.

``--loss sample`` (default): every sub-sample's mean token loss, averaged over the sub-samples of
the optimizer step (all ranks and micro-batches). ``--loss token``: the sum of token losses over
the scored tokens of the step. docs/training/hf_trainer.md has the details.

Without ``--model`` the model is a tiny random one of the dataset's family (CPU-sized); on a GPU
the model runs in bf16 with ``flash_attention_2`` when flash-attn is installed, else ``sdpa``.
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
from pathlib import Path

import torch
from transformers import TrainerCallback, TrainingArguments

from vlmpack_offline.loader import PackEncoder
from vlmpack_offline.loader.adapters import TrainerPacks
from vlmpack_offline.loader.adapters.hf_trainer import PackedTrainer
from vlmpack_offline.synthetic.tiny_models import tiny_qwen_vl


class PrintLoss(TrainerCallback):
    """Print the loss the Trainer logs at each optimizer step."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs and state.is_world_process_zero:
            print(f"step {state.global_step}: loss={logs['loss']:.4f}", flush=True)


def _attn_implementation(use_cpu: bool) -> str:
    if not use_cpu and torch.cuda.is_available() and importlib.util.find_spec("flash_attn"):
        return "flash_attention_2"
    return "sdpa"


def _model(model_path: str | None, packed_wds_dir: Path, processor_dir: Path | None, attn: str, bf16: bool):
    if model_path is None:  # a tiny random model of the family the packs were counted for
        model_type = PackEncoder.from_packed_dir(packed_wds_dir, processor_dir).rules.model_type
        return tiny_qwen_vl(model_type, attn, seed=0)
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(
        model_path, dtype=torch.bfloat16 if bf16 else torch.float32, attn_implementation=attn
    )


def train(packed_wds_dir: Path, *, model_path: str | None, processor_dir: Path | None, output_dir: Path, steps: int, loss: str,
          grad_accum: int, num_workers: int, learning_rate: float, use_cpu: bool) -> list[float]:
    use_cpu = use_cpu or not torch.cuda.is_available()
    attn = _attn_implementation(use_cpu)
    args = TrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=1,          # one pack per device per micro-batch
        gradient_accumulation_steps=grad_accum,
        max_steps=steps,
        learning_rate=learning_rate,
        dataloader_num_workers=num_workers,     # workers encode packs; never persistent
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        bf16=not use_cpu,
        use_cpu=use_cpu,
        seed=0,
        disable_tqdm=True,
    )  # fmt: skip
    model = _model(model_path, packed_wds_dir, processor_dir, attn, bf16=not use_cpu)
    packs = TrainerPacks.for_packed_dir(packed_wds_dir, args, model=model, processor_path=processor_dir, loss=loss)
    print(f"{len(packs.dataset)} packs for {args.world_size} rank(s) x {grad_accum} micro-batches per step; "
          f"attention {packs.collator.attn_implementation}, loss {loss!r}", flush=True)  # fmt: skip
    trainer = PackedTrainer(model=model, args=args, train_dataset=packs.dataset, data_collator=packs.collator,
                            callbacks=[PrintLoss()])  # fmt: skip
    trainer.train()  # trainer.train(resume_from_checkpoint=...) continues with the next pack
    return [log["loss"] for log in trainer.state.log_history if "loss" in log]


def _demo_data(root: Path) -> Path:
    """Generated shards packed by the real stages (scan -> bucket -> plan -> write); returns packed_wds_dir."""
    from vlmpack_offline.synthetic.demo import packed_demo

    return packed_demo(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--packed-wds-dir", type=Path, help="output of `vlmpack write`")
    parser.add_argument("--model", help="an HF model folder or id of the packs' family (default: tiny random)")
    parser.add_argument("--processor-dir", type=Path, help="the processor folder on this machine (default: as recorded)")
    parser.add_argument("--output-dir", type=Path, help="the Trainer's output_dir (default: a temporary folder)")
    parser.add_argument("--loss", choices=["sample", "token"], default="sample")
    parser.add_argument("--steps", type=int, default=4, help="optimizer steps")
    parser.add_argument("--grad-accum", type=int, default=2, help="gradient_accumulation_steps (micro-batches per step)")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    parser.add_argument("--cpu", action="store_true", help="train on CPU even where CUDA is available")
    parser.add_argument("--demo", action="store_true", help="pack a small generated dataset, then train on it")
    args = parser.parse_args()
    if not args.demo and not args.packed_wds_dir:
        parser.error("give --packed-wds-dir, or --demo")
    with tempfile.TemporaryDirectory() as tmp:
        packed = _demo_data(Path(tmp)) if args.demo else args.packed_wds_dir
        train(packed, model_path=None if args.demo else args.model, processor_dir=args.processor_dir, output_dir=args.output_dir or Path(tmp) / "out",
              steps=args.steps, loss=args.loss, grad_accum=args.grad_accum, num_workers=args.num_workers,
              learning_rate=args.learning_rate, use_cpu=args.cpu or args.demo)  # fmt: skip


if __name__ == "__main__":
    main()
