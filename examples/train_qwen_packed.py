"""Train an HF Qwen2.5-VL / Qwen3-VL on vlmpack packs with a plain PyTorch loop and DataLoader workers.

    python examples/train_qwen_packed.py --packed-wds-dir demo_out/packed [--processor-dir /models/proc]
    python examples/train_qwen_packed.py --demo   # small dataset -> scan, bucket, plan, write -> train, on CPU

The encoder comes from the settings the packed dataset recorded at write time
(``PackEncoder.from_packed_dir``), so its lengths are the plan's. ``PackDataset``
reads the train split only, gives every (rank, worker) the same number of packs,
reshuffles per epoch (``set_epoch``) and resumes mid-epoch (``state_dict(batch)``).
The model here is a tiny random one of the dataset's family (CPU-sized).

How a pack reaches the model (``PackBatch.model_kwargs``):

* ``position_ids`` ``[4, 1, S]``: row 0 = plain positions restarting at 0 per
  sub-sample (HF's Qwen-VL text models read packing from it), rows 1-3 = mRoPE
  positions from the model's own ``get_rope_index``, per sub-sample.
* CPU / ``sdpa``: ``attention_mask`` = 4D block-diagonal causal mask ``[1,1,S,S]``.
* GPU / ``flash_attention_2``: no mask; ``cu_seq_lens_q/k`` + ``max_length_q/k``
  for text-only packs; with media, HF's flash path derives the same ``cu_seqlens``
  from row 0 (HF forwards those kwargs into the vision tower, which sets its own).
* ``use_cache=False`` (HF ignores packing when a KV cache exists).

Loss: HF's loss shifts ``labels`` by one and averages over scored tokens of the
pack (per-token average). Every sub-sample's first label is -100, so no token
learns to predict the next sub-sample. For a per-sample average, build the loss
from the logits with ``batch.loss_weights`` (``--per-sample-loss``).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from vlmpack_offline.loader import EncoderOptions, PackBatch, PackDataset, PackEncoder
from vlmpack_offline.loader.labels import scored_segments, weighted_loss_sum
from vlmpack_offline.synthetic.tiny_models import tiny_qwen_vl


def per_sample_loss(logits: torch.Tensor, batch: PackBatch) -> torch.Tensor:
    """Mean over sub-samples of each sub-sample's mean token loss (HF shift semantics)."""
    samples = scored_segments(batch.labels, batch.cu_seqlens)
    return weighted_loss_sum(logits, batch.labels, batch.loss_weights) / max(1, samples)


def train(
    packed_wds_dir: Path, processor_dir: Path | None, *, steps: int, per_sample: bool, num_workers: int = 2
) -> list[float]:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    attn = "flash_attention_2" if device == "cuda" and _has_flash_attn() else "sdpa"
    options = EncoderOptions(loss_weights=per_sample, dummy_image_for_text_packs=True)
    encoder = PackEncoder.from_packed_dir(packed_wds_dir, processor_dir, options=options)
    dataset = PackDataset(packed_wds_dir, encoder, split="train", seed=0)  # rank/world from torch.distributed
    # one pack per step; workers encode packs (pixels included) in parallel, batches pickle
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=num_workers, timeout=600)
    torch.manual_seed(0)
    model = tiny_qwen_vl(encoder.rules.model_type, attn).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses, epoch, state = [], 0, None
    while len(losses) < steps:
        dataset.set_epoch(epoch)  # a new shuffle of the packs each epoch, the same on every rank
        for batch in loader:
            batch = batch.to(device)
            out = model(**batch.model_kwargs(attn, with_labels=not per_sample))
            loss = per_sample_loss(out.logits, batch) if per_sample else out.loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            state = dataset.state_dict(batch)  # save with the model checkpoint; load_state_dict resumes here
            print(f"epoch {epoch} step {len(losses)}: pack {batch.pack_id} S={batch.seq_len} "
                  f"n={batch.n_segments} loss={loss.item():.4f}")  # fmt: skip
            if len(losses) >= steps:
                break
        epoch += 1
    print(f"data state to checkpoint: {state}")
    return losses


def _has_flash_attn() -> bool:
    import importlib.util

    return importlib.util.find_spec("flash_attn") is not None


def _demo_data(root: Path) -> Path:
    """Generated shards packed by the real stages (scan -> bucket -> plan -> write); returns packed_wds_dir."""
    from vlmpack_offline.synthetic.demo import packed_demo

    return packed_demo(root, split={"val_packs": 1})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--packed-wds-dir", type=Path, help="output of `vlmpack write`")
    parser.add_argument("--processor-dir", type=Path, help="the processor folder on this machine (default: as recorded)")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--per-sample-loss", action="store_true")
    parser.add_argument("--demo", action="store_true", help="pack a small generated dataset, then train on it")
    args = parser.parse_args()
    if args.demo:
        with tempfile.TemporaryDirectory() as tmp:
            packed = _demo_data(Path(tmp))
            train(packed, None, steps=args.steps, per_sample=args.per_sample_loss, num_workers=args.num_workers)
        return
    if not args.packed_wds_dir:
        parser.error("give --packed-wds-dir, or --demo")
    train(args.packed_wds_dir, args.processor_dir, steps=args.steps, per_sample=args.per_sample_loss,
          num_workers=args.num_workers)  # fmt: skip


if __name__ == "__main__":
    main()
