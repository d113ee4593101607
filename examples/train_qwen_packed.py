"""Train an HF Qwen2.5-VL / Qwen3-VL on vlmpack packs: a few steps, runnable on CPU with a tiny random model.

    python examples/train_qwen_packed.py --packed-wds-dir out/packed --processor-dir proc/ [--family qwen3_vl]
    python examples/train_qwen_packed.py --demo      # builds a tiny processor dir + 2 packs in a temp folder

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
import json
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from vlmpack_offline.config import config_from_dict
from vlmpack_offline.loader import PackBatch, PackDataset, PackEncoder
from vlmpack_offline.loader.encoder import EncoderOptions
from vlmpack_offline.synthetic.tiny_models import tiny_qwen_vl


def per_sample_loss(logits: torch.Tensor, batch: PackBatch) -> torch.Tensor:
    """Mean over sub-samples of each sub-sample's mean token loss (HF shift semantics)."""
    token_loss = F.cross_entropy(logits[0, :-1].float(), batch.labels[0, 1:], ignore_index=-100, reduction="none")
    weights = batch.loss_weights[0, 1:]  # shifted like the labels; 1/n on each scored token of its sub-sample
    bounds = batch.cu_seqlens.tolist()
    n_samples = sum(bool((batch.labels[0, a:b] != -100).any()) for a, b in zip(bounds[:-1], bounds[1:], strict=True))
    return (token_loss * weights).sum() / max(1, n_samples)


def train(
    packed_wds_dir: Path, processor_dir: Path, *, family: str, steps: int, per_sample: bool, check_lengths: bool = True
) -> list[float]:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    attn = "flash_attention_2" if device == "cuda" and _has_flash_attn() else "sdpa"
    config = config_from_dict(
        {
            "model": {"processor_kwargs": {"pretrained_model_name_or_path": str(processor_dir)}},
            "video": {"min_pixels": 4 * 28 * 28, "max_pixels": 16 * 28 * 28},
        }
    )
    encoder = PackEncoder(config, EncoderOptions(
        check_lengths=check_lengths, loss_weights=per_sample, dummy_image_for_text_packs=True
    ))
    dataset = PackDataset(packed_wds_dir, encoder)
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=0)  # one pack per step
    torch.manual_seed(0)
    model = tiny_qwen_vl(family, attn).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    while len(losses) < steps:
        for batch in loader:
            batch = batch.to(device)
            out = model(**batch.model_kwargs(attn, with_labels=not per_sample))
            loss = per_sample_loss(out.logits, batch) if per_sample else out.loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            print(f"step {len(losses)}: pack {batch.pack_id} S={batch.seq_len} n={batch.n_segments} loss={loss.item():.4f}")
            if len(losses) >= steps:
                break
    return losses


def _has_flash_attn() -> bool:
    import importlib.util

    return importlib.util.find_spec("flash_attn") is not None


def _demo_data(root: Path) -> tuple[Path, Path]:
    """A processor dir and two packs (text-only; image + text) written like `vlmpack write` does."""
    from vlmpack_offline.output.energon_meta import write_dataset_yaml, write_info_json, write_split_yaml
    from vlmpack_offline.output.tar_writer import ShardTarWriter
    from vlmpack_offline.packed_format import JSON_PART, pack_key
    from vlmpack_offline.synthetic.processor_dir import build_processor_dir
    from vlmpack_offline.synthetic.shards import image_bytes

    processor_dir = build_processor_dir(root / "proc", "qwen2_5_vl")
    out = root / "packed"
    out.mkdir()

    def turns(user, answer):
        return [{"role": "user", "content": user}, {"role": "assistant", "content": [{"type": "text", "text": answer}]}]

    packs = [
        ([turns([{"type": "text", "text": "Hi"}], "Hello!"), turns([{"type": "text", "text": "2+2?"}], "4.")], {}),
        ([turns([{"type": "image", "image": "m0000.jpg"}, {"type": "text", "text": "What?"}], "A square.")],
         {"m0000.jpg": image_bytes(64, 48)}),
    ]  # fmt: skip
    writer = ShardTarWriter(out / "pretrain-000000.tar")
    for pack_id, (subs, media) in enumerate(packs):
        body = {"format": "vlmpack.pack/1", "pack_id": pack_id, "capacity": 4096, "split": "train",
                "samples": [{"id": f"demo/{pack_id}/{i}", "token_len": 0, "messages": m} for i, m in enumerate(subs)]}  # fmt: skip
        writer.add_sample(pack_key(pack_id), [(JSON_PART, json.dumps(body).encode()), *media.items()])
    writer.finish()
    write_dataset_yaml(out, "vlmpack_packed")
    write_split_yaml(out, {"train": ["pretrain-000000.tar"]})
    write_info_json(out, {"pretrain-000000.tar": len(packs)})
    return out, processor_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--packed-wds-dir", type=Path)
    parser.add_argument("--processor-dir", type=Path)
    parser.add_argument("--family", choices=["qwen2_5_vl", "qwen3_vl"], default="qwen2_5_vl")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--per-sample-loss", action="store_true")
    parser.add_argument("--demo", action="store_true", help="make a tiny processor dir and 2 packs, then train")
    args = parser.parse_args()
    if args.demo:
        with tempfile.TemporaryDirectory() as tmp:
            packed, proc = _demo_data(Path(tmp))
            # the demo packs were not planned by `vlmpack scan` (token_len 0): only here is the check off
            train(packed, proc, family="qwen2_5_vl", steps=args.steps, per_sample=args.per_sample_loss,
                  check_lengths=False)  # fmt: skip
        return
    if not (args.packed_wds_dir and args.processor_dir):
        parser.error("give --packed-wds-dir and --processor-dir, or --demo")
    train(args.packed_wds_dir, args.processor_dir, family=args.family, steps=args.steps, per_sample=args.per_sample_loss)


if __name__ == "__main__":
    main()
