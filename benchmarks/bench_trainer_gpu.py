"""GPU benchmark (not CI): ``transformers.Trainer`` on vlmpack packs vs the same samples padded, tokens/s and memory.

    python benchmarks/bench_trainer_gpu.py                         # generated data packed at C = 8192, on CUDA
    python benchmarks/bench_trainer_gpu.py --packed-wds-dir DIR    # a packed directory of a Qwen2.5-VL processor
    python benchmarks/bench_trainer_gpu.py --device cpu --smoke    # tiny model and data, to check the script runs

Both arms are the real ``transformers.Trainer`` (its loop, DataLoader workers, AdamW, gradient
accumulation) on the same model, a small Qwen2.5-VL-shaped one with random weights
(``bench_train_gpu._model``: hidden 1024, 8 layers, GQA 16/4, mRoPE, a one-block vision tower; the
embeddings resized to the processor's vocabulary), in bf16 on CUDA:

* packed: ``PackedTrainer`` + ``TrainerPacks.for_packed_dir`` (one pack per micro-batch,
  ``flash_attention_2`` varlen when flash-attn imports, else ``sdpa`` with the block-causal mask);
* padded: a plain ``Trainer`` over the sub-samples of the same packs, each encoded alone (the
  same ids, labels and pixels), in random order, as many per micro-batch as a pack holds on
  average, padded to the longest of the micro-batch (``attention_mask``), the same attention.

The packed directory is built by the real stages (scan, bucket, plan, write) from generated
shards with images and videos and a Qwen2.5-VL processor folder, unless ``--packed-wds-dir``.
Reported for each arm, measured in the same run after the warm-up steps: real (non-pad) tokens
per second, every micro-batch's tokens counted as the model received them, and peak GPU memory
(``torch.cuda.max_memory_allocated``); then their ratios. Exits 0 with a "skipped" line when there
is no CUDA device (unless ``--device cpu``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_train_gpu import _model  # noqa: E402  (the same model shapes as the plain-loop benchmark)

from vlmpack_offline.loader import PackEncoder  # noqa: E402
from vlmpack_offline.loader.vision_inputs import concat_vision_inputs  # noqa: E402
from vlmpack_offline.packed_format import PackedSample  # noqa: E402

TINY_VIDEO = {"min_pixels": 4 * 28 * 28, "max_pixels": 16 * 28 * 28, "min_frames": 4, "fps": 2.0}


def build_packed(root: Path, capacity: int, shards: int, samples_per_shard: int) -> Path:
    """Generated shards + a Qwen2.5-VL processor folder, packed by the real stages; returns packed_wds_dir."""
    from vlmpack_offline.config import config_from_dict
    from vlmpack_offline.stages import bucket, plan, scan, write
    from vlmpack_offline.synthetic.processor_dir import build_processor_dir
    from vlmpack_offline.synthetic.shards import generate_dataset

    processor = build_processor_dir(root / "processor", "qwen2_5_vl")
    generate_dataset(root / "src", seed=0, n_shards=shards, samples_per_shard=samples_per_shard, include_faults=False)
    config = config_from_dict({
        "data": {"wds_dir": str(root / "src"), "work_dir": str(root / "work"), "packed_wds_dir": str(root / "packed")},
        "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor)}},
        "sample": {"max_token_len": capacity}, "video": TINY_VIDEO, "process": {"workers": 4},
    })  # fmt: skip
    for stage in (scan, bucket, plan, write):
        result = stage.run(config)
        if result.exit_code != 0:
            raise SystemExit(f"{stage.__name__}: {result.summary}")
    return config.packed_wds_dir


class SampleDataset(torch.utils.data.Dataset):
    """The padded arm's items: sub-samples of the packed directory, each encoded alone (in the workers)."""

    def __init__(self, packed_wds_dir: Path, encoder: PackEncoder, refs: list[tuple[int, int]]) -> None:
        from vlmpack_offline.loader import PackDataset

        # any pack by index: the balanced schedule's order (follow_plan) does not matter here
        self.packs = PackDataset(packed_wds_dir, encoder, rank=0, world_size=1, follow_plan=False).packs
        self.encoder, self.refs = encoder, refs

    def __len__(self) -> int:
        return len(self.refs)

    def __getitem__(self, i: int) -> dict:
        pack_index, sub = self.refs[i]
        cooked = self.packs.read(pack_index)
        alone = PackedSample(pack_id=0, capacity=1 << 30, split="train", samples=(cooked.pack.samples[sub],))
        batch = self.encoder.encode(alone, cooked.media)
        item = {"input_ids": batch.input_ids[0], "labels": batch.labels[0], "vision": dict(batch.vision)}
        if self.encoder.rope.is_mrope:  # what the processor returns beside input_ids; the model makes its rope index
            item["mm_token_type_ids"] = self.encoder.rope.mm_token_type_ids(batch.input_ids)[0]
        return item


class PadCollator:
    """The usual unpacked batch: right-padded to the longest sample, 2-D ``attention_mask``, media concatenated."""

    def __init__(self, pad_id: int) -> None:
        self.pad_id = pad_id

    def __call__(self, items: list[dict]) -> dict:
        longest = max(len(item["input_ids"]) for item in items)

        def pad(key: str, fill: int) -> torch.Tensor:
            return torch.stack([torch.nn.functional.pad(item[key], (0, longest - len(item[key])), value=fill)
                                for item in items])  # fmt: skip

        out = {"input_ids": pad("input_ids", self.pad_id), "labels": pad("labels", -100), "use_cache": False,
               "attention_mask": torch.stack([(torch.arange(longest) < len(item["input_ids"])).long()
                                              for item in items])}  # fmt: skip
        if "mm_token_type_ids" in items[0]:
            out["mm_token_type_ids"] = pad("mm_token_type_ids", 0)
        out.update(concat_vision_inputs([item["vision"] for item in items if item["vision"]]))
        return out


class TimedSteps:
    """Mixed in before the Trainer: counts the real tokens of every micro-batch, times every optimizer step."""

    def training_step(self, model, inputs, num_items_in_batch=None):
        mask = inputs.get("attention_mask")
        real = int(mask.sum()) if mask is not None and mask.ndim == 2 else inputs["input_ids"].numel()
        self.bench_tokens.append(real)
        return super().training_step(model, inputs, num_items_in_batch)


def _timer(trainer, warmup: int, device: str):
    from transformers import TrainerCallback

    marks: list[tuple[float, int]] = []  # (time, tokens so far) at the end of each optimizer step

    class Timer(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if device == "cuda":
                torch.cuda.synchronize()
            marks.append((time.perf_counter(), sum(trainer.bench_tokens)))

    trainer.bench_tokens = []
    trainer.add_callback(Timer())

    def tokens_per_second() -> float:
        (t0, n0), (t1, n1) = marks[warmup - 1], marks[-1]
        return (n1 - n0) / (t1 - t0)

    return tokens_per_second


def run_arm(arm: str, packed_wds_dir: Path, args, attn: str, out: Path) -> tuple[float, float, int]:
    """(real tokens/s, peak GPU GiB, micro-batch size) of one arm."""
    from transformers import AutoTokenizer, Trainer, TrainingArguments

    from vlmpack_offline.loader.adapters import TrainerPacks
    from vlmpack_offline.loader.adapters.hf_trainer import PackedTrainer

    encoder = PackEncoder.from_packed_dir(packed_wds_dir)
    tokenizer = AutoTokenizer.from_pretrained(encoder.rules.processor_path)
    model = _model(args.hidden, args.layers, args.heads, args.kv_heads, attn, args.device, args.dtype)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)  # the packs' ids are the processor's vocabulary
    model.config.use_cache = False
    if args.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    steps = args.warmup + args.steps
    common = dict(output_dir=str(out / arm), gradient_accumulation_steps=args.grad_accum, max_steps=steps,
                  learning_rate=1e-5, dataloader_num_workers=args.num_workers, logging_strategy="no",
                  save_strategy="no", report_to=[], use_cpu=args.device == "cpu", seed=0, disable_tqdm=True)  # fmt: skip
    packed_args = TrainingArguments(per_device_train_batch_size=1, **common)
    packs = TrainerPacks.for_packed_dir(packed_wds_dir, packed_args, model=model, loss="token")
    # the padded arm trains on the sub-samples of the packs the packed arm reads
    items = [packs.dataset.pack_index(i) for i in range(min(len(packs.dataset), steps * args.grad_accum))]
    refs = [(p, s) for p in items for s in range(len(packs.dataset.packs.packs.read(p).pack.samples))]
    per_batch = max(1, round(len(refs) / len(items)))  # as many samples per micro-batch as a pack holds on average
    if arm == "packed":
        trainer = type("Timed", (TimedSteps, PackedTrainer), {})(
            model=model, args=packed_args, train_dataset=packs.dataset, data_collator=packs.collator)
    else:
        # remove_unused_columns=False: the items carry their vision fields under one key the collator reads
        train_args = TrainingArguments(per_device_train_batch_size=per_batch, remove_unused_columns=False, **common)
        trainer = type("Timed", (TimedSteps, Trainer), {})(
            model=model, args=train_args, train_dataset=SampleDataset(packed_wds_dir, encoder, refs),
            data_collator=PadCollator(tokenizer.pad_token_id or 0))
    tokens_per_second = _timer(trainer, args.warmup, args.device)
    trainer.train()
    peak = torch.cuda.max_memory_allocated() / 2**30 if args.device == "cuda" else float("nan")
    del trainer, model
    return tokens_per_second(), peak, 1 if arm == "packed" else per_batch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--packed-wds-dir", type=Path, help="a packed directory (default: build one from generated data)")
    parser.add_argument("--capacity", type=int, default=8192, help="sample.max_token_len of the built packs")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--samples-per-shard", type=int, default=200)
    parser.add_argument("--steps", type=int, default=20, help="timed optimizer steps per arm")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--grad-accum", type=int, default=2)
    parser.add_argument("--num-workers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--smoke", action="store_true", help="tiny model and data: checks the script, measures nothing")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("skipped: no CUDA device (this benchmark needs a GPU; --device cpu --smoke checks the script)")
        return 0
    if args.smoke:
        args.capacity, args.shards, args.samples_per_shard, args.steps, args.warmup = 2048, 2, 12, 2, 1
        args.hidden, args.layers, args.heads, args.kv_heads, args.num_workers = 64, 2, 4, 2, 2
    args.dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    attn = "flash_attention_2" if args.device == "cuda" and importlib.util.find_spec("flash_attn") else "sdpa"
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        packed = args.packed_wds_dir or build_packed(root, args.capacity, args.shards, args.samples_per_shard)
        print(f"device {name}, attention {attn}, model hidden {args.hidden} x {args.layers} layers, "
              f"{args.grad_accum} micro-batches per step, {args.steps} timed steps per arm after {args.warmup}")  # fmt: skip
        results = {arm: run_arm(arm, packed, args, attn, root) for arm in ("packed", "padded")}
    print(f"{'arm':>7} {'per micro-batch':>16} {'real tok/s':>11} {'peak GiB':>9}")
    for arm, (speed, peak, per_batch) in results.items():
        what = "1 pack" if arm == "packed" else f"{per_batch} samples"
        print(f"{arm:>7} {what:>16} {speed:>11.0f} {peak:>9.2f}")
    (packed_speed, packed_peak, _), (padded_speed, padded_peak, _) = results["packed"], results["padded"]
    print(f"packed / padded: tokens/s x{packed_speed / padded_speed:.2f}, peak memory x{packed_peak / padded_peak:.2f}"
          if args.device == "cuda" else f"packed / padded: tokens/s x{packed_speed / padded_speed:.2f}")  # fmt: skip
    if args.smoke:
        print("smoke run: checks the script; the numbers mean nothing")
    return 0 if np.isfinite(packed_speed) and np.isfinite(padded_speed) else 1


if __name__ == "__main__":
    sys.exit(main())
