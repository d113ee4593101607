"""Train on vlmpack packs in NeMo Automodel's neat-packing batch format, with its own collater and loss.

    python examples/train_automodel.py --demo   # small dataset -> scan, bucket, plan, write -> train, on CPU
    python examples/train_automodel.py --packed-wds-dir /data/packed [--processor-dir /models/proc]
    torchrun --nproc_per_node 8 examples/train_automodel.py --packed-wds-dir /data/packed

The DataLoader is the one Automodel's VLM recipe builds (``components/datasets/vlm/loader.py``):
``DistributedSampler(shuffle=False)`` over the data-parallel ranks, ``StatefulDataLoader`` (torchdata;
a plain ``DataLoader`` when torchdata is not installed), ``batch_size`` packs per micro-batch,
Automodel's own ``neat_packed_vlm_collater`` as ``collate_fn``. Only the dataset differs: instead of
``NeatPackConfig.build`` (online packing), ``PackSequence`` reads the packed directory, item ``i``
being the pack data-parallel rank ``i % W`` reads, and ``AutomodelAdapter.pack`` turns each pack
into the dict Automodel's ``_build_packed_vlm_sample`` makes (each sub-sample shifted).

The step is Automodel's (``recipes/vlm/finetune.py``): ``labels`` popped, the rest through
``filter_forward_kwargs`` into the model, ``MaskedCrossEntropy`` on logits against the
already-shifted labels (no shift), summed and divided by the scored tokens of the whole optimizer
step (all its micro-batches). The model is a tiny random one of the dataset's family (CPU-sized).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from vlmpack_offline.loader import PackEncoder, PackSequence, PackSequenceSampler
from vlmpack_offline.loader.adapters import AutomodelAdapter
from vlmpack_offline.synthetic.tiny_models import tiny_qwen_vl


def dataloader(packed_wds_dir: Path, adapter: AutomodelAdapter, *, batch_size: int, grad_accum: int,
               num_workers: int, dp_rank: int, dp_world_size: int):
    """Automodel's VLM DataLoader over a packed directory (its ``loader.py``, the dataset replaced)."""
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader as Loader
    except ImportError:  # torchdata is Automodel's dependency; a plain DataLoader reads the same batches
        from torch.utils.data import DataLoader as Loader

    dataset = PackSequence(packed_wds_dir, adapter.encoder, world_size=dp_world_size,
                           micro_batches_per_step=batch_size * grad_accum,  # every optimizer step full
                           transform=adapter.pack)  # fmt: skip
    sampler = PackSequenceSampler(dataset, num_replicas=dp_world_size, rank=dp_rank)  # hands on set_epoch
    return Loader(dataset, sampler=sampler, batch_size=batch_size, num_workers=num_workers,
                  collate_fn=adapter.collater(), persistent_workers=False)  # fmt: skip


def train(packed_wds_dir: Path, processor_dir: Path | None, *, epochs: int, batch_size: int, grad_accum: int,
          num_workers: int) -> list[float]:
    from nemo_automodel.components.loss.masked_ce import MaskedCrossEntropy
    from nemo_automodel.components.loss.utils import _count_label_tokens, calculate_loss
    from nemo_automodel.components.utils.model_utils import filter_forward_kwargs
    from transformers import AutoTokenizer

    dp_rank, dp_world_size = 0, 1
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        dp_rank, dp_world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
    encoder = PackEncoder.from_packed_dir(packed_wds_dir, processor_dir)
    # Automodel pads input_ids with the tokenizer's pad id (its loader.py); pads are never scored
    pad_id = AutoTokenizer.from_pretrained(encoder.rules.processor_path).pad_token_id or 0
    adapter = AutomodelAdapter(encoder, padding_idx=pad_id)  # or AutomodelAdapter.for_packed_dir(packed, model=...)
    model = tiny_qwen_vl(encoder.rules.model_type, "sdpa", seed=0).train()
    loader = dataloader(packed_wds_dir, adapter, batch_size=batch_size, grad_accum=grad_accum,
                        num_workers=num_workers, dp_rank=dp_rank, dp_world_size=dp_world_size)  # fmt: skip
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    loss_fn = MaskedCrossEntropy()  # Automodel's default: summed over scored tokens, / num_label_tokens
    losses = []
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)  # what Automodel's StepScheduler.set_epoch does
        step = []
        for index, batch in enumerate(loader):
            step.append(batch)
            if len(step) < grad_accum:
                continue
            # Automodel's _run_train_optim_step: the scored tokens of the step's micro-batches (labels already
            # shifted, pads -100); under data parallelism it also sums them over the ranks (_dp_allreduce)
            n_label_tokens = sum(_count_label_tokens(micro["labels"], loss_fn.ignore_index) for micro in step)
            for micro in step:
                labels = micro.pop("labels")  # [B, S], already shifted per sub-sample
                out = model(**filter_forward_kwargs(model, micro))
                # no shift: logits[:, t] is scored against labels[:, t]
                loss = calculate_loss(loss_fn, logits=out.logits, labels=labels, num_label_tokens=n_label_tokens)
                loss.backward()  # the step's loss is the sum of its micro-batches' losses
                losses.append(loss.item())
            optimizer.step()
            optimizer.zero_grad()
            images = batch.get("n_images_per_sample", torch.zeros(labels.shape[0], dtype=torch.long)).tolist()
            print(f"epoch {epoch} batch {index}: input_ids {list(batch['input_ids'].shape)}, images per pack "
                  f"{images}, scored tokens in the step {n_label_tokens}, loss={sum(losses[-len(step):]):.4f}",
                  flush=True)  # fmt: skip
            step = []
    return losses


def _demo_data(root: Path) -> Path:
    """Generated shards packed by the real stages (scan -> bucket -> plan -> write); returns packed_wds_dir."""
    from vlmpack_offline.synthetic.demo import packed_demo

    return packed_demo(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--packed-wds-dir", type=Path, help="output of `vlmpack write`")
    parser.add_argument("--processor-dir", type=Path, help="the processor folder on this machine (default: as recorded)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=2, help="packs per micro-batch (Automodel's local_batch_size)")
    parser.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--demo", action="store_true", help="pack a small generated dataset, then train on it")
    args = parser.parse_args()
    if not args.demo and not args.packed_wds_dir:
        parser.error("give --packed-wds-dir, or --demo")
    with tempfile.TemporaryDirectory() as tmp:
        packed = _demo_data(Path(tmp)) if args.demo else args.packed_wds_dir
        train(packed, args.processor_dir, epochs=args.epochs, batch_size=args.batch_size, grad_accum=args.grad_accum,
              num_workers=args.num_workers)  # fmt: skip


if __name__ == "__main__":
    main()
