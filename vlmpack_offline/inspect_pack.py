"""``vlmpack inspect``: look inside a packed dataset, one pack decoded the way the loader sees it.

Without a pack id: the splits, shards and pack counts, and the settings the packs were
planned with (``.nv-meta/vlmpack.json``). With ``--pack N`` (the plan's pack id)::

    pack 3  split train  pretrain-000000.tar  capacity 4096  4 sub-samples  3971 tokens (fill 96.9%)
      #0 part-000.tar/k000002   812 tokens, 640 media   m0000.jpg (image, 31.2 KB)
         learns: 'A red bus on a bridge.<|im_end|>'
      ...

``learns`` is the text of the tokens that get a label, decoded from the loader's own
``labels``: what the model is trained to produce. ``--render`` also prints each
sub-sample's chat text with every media item shown as ``<image m0000.jpg>``.
Labels and rendering need the processor directory (as recorded, or ``--processor``). A media part
that does not decode ends the command with the loader's own ``MediaDecodeError``: one line naming the
pack, the sample, its tar and member and the fix, exit 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from .conversation import MEDIA_KINDS
from .errors import MediaDecodeError, ShardError, VlmpackError
from .output.energon_meta import META_DIR, read_dataset_yaml, written_layout
from .schedule import Schedule

__all__ = ["summarize", "describe_pack"]


def summarize(packed_dir: str | Path) -> str:
    """Splits, shards, pack counts and recorded settings of a packed dataset."""
    root = Path(packed_dir)
    split_yaml, info = root / META_DIR / "split.yaml", root / META_DIR / ".info.json"
    if not split_yaml.is_file() or not info.is_file():
        raise ShardError(f"{root} is not a packed dataset (no {META_DIR}/split.yaml and .info.json): run `vlmpack write`")
    parts = (yaml.safe_load(split_yaml.read_text()) or {}).get("split_parts") or {}
    counts = json.loads(info.read_text())["shard_counts"]
    total = sum(counts.values())
    layout = written_layout(read_dataset_yaml(root))
    # what `energon info` shows for a dataset (it cannot read a crude dataset.yaml: docs/format.md)
    lines = [f"packed dataset {root}: {total} packs in {len(counts)} shards, layout (sample_type) {layout}"]
    for split, shards in parts.items():
        n = sum(counts.get(s, 0) for s in shards)
        share = f"{100 * n / total:.0f}%" if total else "-"
        lines.append(f"  {split:<6} {n:>8} packs in {len(shards)} shards ({share})")
    settings = root / META_DIR / "vlmpack.json"
    if settings.is_file():
        recorded = json.loads(settings.read_text())
        model = recorded.get("model", {})
        lines.append(
            f"  planned with model_type {model.get('model_type')}, capacity {recorded.get('sample', {}).get('max_token_len')}, "
            f"processor {model.get('processor_kwargs', {}).get('pretrained_model_name_or_path')}"
        )
        schedule = Schedule.from_record(recorded.get("schedule"))
        if schedule is not None:
            lines.append(
                f"  train balanced for {schedule.data_parallel_size} data-parallel ranks x "
                f"{schedule.micro_batches_per_step} micro-batches: {schedule.steps} steps, {schedule.packs_per_rank} "
                f"packs per rank, {schedule.unscheduled} packs in no step; energon num_workers must divide "
                f"{schedule.packs_per_rank} (docs/balance.md)"
            )
        mixture = recorded.get("mixture")
        if mixture:
            lines.append(f"  a mixture of {len(mixture['sources'])} sources by {mixture['by']} ({mixture['epochs']} "
                         f"epoch(s) drawn); share asked / in the train split / worst "
                         f"{mixture['window_steps']}-step window (pp off):")
            lines += [f"    {row['name']:<16} {row['rule']} {row['value']:g}: {row['packed']} sub-samples; "
                      f"{row['asked_share']:.2%} / {row['train_share']:.2%} / {row['worst_window_deviation'] * 100:.2f}"
                      for row in mixture["sources"]]
    lines.append("  `vlmpack inspect DIR --pack N` shows one pack")
    return "\n".join(lines)


def _find(packed_dir: Path, pack_id: int):
    from .loader.dataset import PackIndex

    splits = (yaml.safe_load((packed_dir / META_DIR / "split.yaml").read_text()) or {}).get("split_parts") or {}
    for split in splits:
        index = PackIndex.from_dir(packed_dir, split)
        for i in range(len(index)):
            cooked = index.read(i)
            if cooked.pack.pack_id == pack_id:
                return cooked, index.shards[int(index.shard[i])].name
    raise ShardError(f"{packed_dir}: no pack with id {pack_id}")


def _media_line(cooked, sub) -> str:
    items = [(item["type"], item[item["type"]]) for m in sub.messages for item in m["content"] if item["type"] in MEDIA_KINDS]
    return ", ".join(f"{n} ({kind}, {len(cooked.media[n]) / 1024:.1f} KB)" for kind, n in items) or "no media"


def _learned_text(tokenizer, labels) -> str:
    runs, current = [], []
    for label in labels:
        if label != -100:
            current.append(label)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return " | ".join(repr(tokenizer.decode(run)) for run in runs) or "(nothing)"


def describe_pack(packed_dir: str | Path, pack_id: int, *, processor: str | None = None, render: bool = False) -> str:
    """One pack: its sub-samples with lengths, media and learned text (see the module doc)."""
    packed_dir = Path(packed_dir)
    cooked, shard = _find(packed_dir, pack_id)
    pack = cooked.pack
    total = sum(s.token_len for s in pack.samples)
    lines = [f"pack {pack.pack_id}  split {pack.split}  {shard}  capacity {pack.capacity}  {len(pack.samples)} "
             f"sub-samples  {total} tokens (fill {100 * total / pack.capacity:.1f}%)"]  # fmt: skip
    try:
        from .loader import PackEncoder

        encoder = PackEncoder.from_packed_dir(packed_dir, processor)
        batch = encoder.encode(pack, cooked.media, shard=shard)
    except MediaDecodeError:
        raise  # the pack cannot be served: one line naming the sample and member, exit 1 (cli.main)
    except VlmpackError as exc:
        encoder = batch = None
        lines.append(f"  (labels not shown: {exc})")
    bounds = batch.cu_seqlens.tolist() if batch is not None else []
    for n, sub in enumerate(pack.samples):
        lines.append(f"  #{n} {sub.id}  {sub.token_len} tokens, {sub.media_tokens} media  {_media_line(cooked, sub)}")
        if batch is None:
            continue
        labels = batch.labels[0, bounds[n] : bounds[n + 1]].tolist()
        lines.append(f"     learns: {_learned_text(encoder.counter.tokenizer, labels)}")
        if render:
            lines.append("     text: " + _rendered(encoder, sub).replace("\n", "\n           "))
    return "\n".join(lines)


def _rendered(encoder, sub) -> str:
    from .loader.encoder import _conversation

    conversation = _conversation(sub)
    text, _ = encoder.counter.render(conversation)
    special = encoder.counter.expander.special
    pads = iter(conversation.media)
    out, rest = [], text
    kinds = (special.image_pad, special.video_pad, special.audio_pad)
    while True:
        found = [(p, pad) for pad in kinds if (p := rest.find(pad)) >= 0]
        if not found:
            out.append(rest)
            return "".join(out)
        at, pad = min(found, key=lambda hit: (hit[0], -len(hit[1])))
        ref = next(pads)
        out.append(rest[:at] + f"<{ref.kind} {ref.part}>")
        rest = rest[at + len(pad) :]
