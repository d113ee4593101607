"""The plan's artifact: ``work_dir/pack_plan.jsonl``, one pack per line, in training order.

::

    {"pack_id": 0, "split": "train", "media_type": "image",
     "sample_ids": ["part-000.tar/k1", ...], "sample_token_lens": [812, ...],
     "total_token_len": 8170, "media_tokens": 6400}

Field names follow the published tool (``pack_id``, ``sample_ids``,
``sample_token_lens``, ``total_token_len``); ``split`` and ``media_tokens`` are ours.
What the plan was built from sits beside it in ``pack_plan.meta.json``
(fingerprint, capacity, seed, counts), so the pack lines stay plain.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .artifacts import atomic_open, canonical_json

__all__ = ["Pack", "plan_path", "plan_meta_path", "write_plan", "read_plan", "read_plan_meta"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Pack:
    pack_id: int  # position in training order, 0..n-1
    split: str  # "train" or "val"
    media_type: str  # "text" | "image" | "video" | "mixed" (group_by: none)
    sample_ids: tuple[str, ...]  # manifest ids, in the order they sit in the pack
    sample_token_lens: tuple[int, ...]  # token_len of each sample, same order
    media_tokens: int = 0  # visual tokens in the pack (for DP balancing and stats)

    @property
    def total_token_len(self) -> int:
        return sum(self.sample_token_lens)

    def to_json(self) -> dict:
        return {
            "pack_id": self.pack_id,
            "split": self.split,
            "media_type": self.media_type,
            "sample_ids": list(self.sample_ids),
            "sample_token_lens": list(self.sample_token_lens),
            "total_token_len": self.total_token_len,
            "media_tokens": self.media_tokens,
        }

    @classmethod
    def from_json(cls, raw: dict) -> Pack:
        return cls(
            pack_id=int(raw["pack_id"]),
            split=str(raw.get("split", "train")),
            media_type=str(raw.get("media_type", "mixed")),
            sample_ids=tuple(raw["sample_ids"]),
            sample_token_lens=tuple(int(n) for n in raw["sample_token_lens"]),
            media_tokens=int(raw.get("media_tokens", 0)),
        )


def plan_path(work_dir: str | Path) -> Path:
    return Path(work_dir) / "pack_plan.jsonl"


def plan_meta_path(work_dir: str | Path) -> Path:
    return Path(work_dir) / "pack_plan.meta.json"


def write_plan(work_dir: str | Path, packs: Iterable[Pack], meta: dict) -> None:
    """Write the plan, then its meta; both atomically (the meta last marks the plan complete)."""
    with atomic_open(plan_path(work_dir), "w") as handle:
        for pack in packs:
            handle.write(canonical_json(pack.to_json()) + "\n")
    with atomic_open(plan_meta_path(work_dir), "w") as handle:
        handle.write(json.dumps(meta, indent=2, sort_keys=True) + "\n")


def read_plan(work_dir: str | Path) -> Iterator[Pack]:
    with open(plan_path(work_dir)) as handle:
        for line in handle:
            if line.strip():
                yield Pack.from_json(json.loads(line))


def read_plan_meta(work_dir: str | Path) -> dict | None:
    path = plan_meta_path(work_dir)
    return json.loads(path.read_text()) if path.exists() else None
