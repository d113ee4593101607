"""Open packed folders with megatron-energon alone, as a training image without vlmpack would.

    .venv-energon/bin/python scripts/energon_only_check.py PACKED_DIR [PACKED_DIR ...]

Run by tests/test_energon_portability.py in `.venv-energon` (requirements/energon.txt: energon, torch and
their dependencies, no vlmpack). For each folder: `import vlmpack_offline` must fail, and energon's own
`get_train_dataset` / `get_val_dataset` must yield every pack `.nv-meta/.info.json` counts, through a
cooker that takes any subflavor (what a trainer's cooker sees first: the crude parts). Prints one JSON line
per folder: {"dir", "sample_type", "train", "val", "parts"}; exits 1 on the first failure.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import yaml
from megatron.energon import (
    Cooker,
    DefaultTaskEncoder,
    WorkerConfig,
    get_loader,
    get_train_dataset,
    get_val_dataset,
    stateless,
)

_MEDIA = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".mp4", ".avi", ".mov", ".mkv", ".webm")


@stateless
def parts_of(sample: dict) -> dict:
    """The crude sample's part names, as a trainer's cooker receives them; a media part still raw bytes
    after energon's decoder is an error (energon picks the decoder by the name)."""
    raw = [k for k, v in sample.items() if k.lower().endswith(_MEDIA) and isinstance(v, (bytes, bytearray))]
    if raw:
        raise SystemExit(f"{sample['__key__']}: media parts {raw} were not decoded by energon")
    return {"key": sample["__key__"], "parts": sorted(k for k in sample if not k.startswith("__"))}


class AnyLayout(DefaultTaskEncoder):
    """energon's default decoder (images to tensors, videos to its AV decoder, by each part's extension):
    every media part must decode in a plain energon install."""

    cookers = [Cooker(parts_of)]

    def batch(self, samples):
        return samples


def check(root: Path) -> dict:
    meta = root / ".nv-meta"
    subflavor = (yaml.safe_load((meta / "dataset.yaml").read_text()).get("subflavors") or {}).get("sample_type")
    counts = json.loads((meta / ".info.json").read_text())["shard_counts"]
    splits = yaml.safe_load((meta / "split.yaml").read_text())["split_parts"]
    worker_config = WorkerConfig(rank=0, world_size=1, num_workers=0)
    out = {"dir": str(root), "sample_type": subflavor, "parts": []}
    for split, shards in splits.items():
        expected = sum(counts[name] for name in shards)
        if not expected:
            out[split] = 0
            continue
        if split == "train":
            dataset = get_train_dataset(root, worker_config=worker_config, batch_size=1, shuffle_buffer_size=None,
                                        max_samples_per_sequence=None, task_encoder=AnyLayout(), repeat=False)
        else:
            dataset = get_val_dataset(root, split_part=split, worker_config=worker_config, batch_size=1,
                                      task_encoder=AnyLayout())
        cooked = [sample for batch in get_loader(dataset) for sample in batch]
        if len(cooked) != expected:
            raise SystemExit(f"{root} {split}: energon yielded {len(cooked)} packs, .info.json counts {expected}")
        out[split] = len(cooked)
        out["parts"] = sorted({p for sample in cooked for p in sample["parts"]} | set(out["parts"]))
    return out


def main(argv: list[str]) -> int:
    if importlib.util.find_spec("vlmpack_offline") is not None:
        print("vlmpack_offline is importable here: this check needs an environment without it", file=sys.stderr)
        return 1
    for arg in argv:
        print(json.dumps(check(Path(arg))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
