"""Packing quality: the numbers ``plan`` prints at its end and ``vlmpack stats`` reports.

fill ratio  = sum of sample lengths / (packs x C)
lower bound = max(ceil(sum / C), samples longer than C / 2): no packing needs fewer packs;
              with packing.group_by: media_type no pack mixes groups, so the bound
              is the sum of the per-group bounds (the one bucket prints)
gap         = packs / lower bound - 1 (0.001 = 0.1% more packs than the bound)

Written as ``work_dir/stats.json`` (the numbers, plus the plan fingerprint they
describe) and ``work_dir/stats.png`` (token-length and pack-fill histograms).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .artifacts import atomic_open, atomic_write_text
from .packing import lower_bound

__all__ = ["PackStats", "compute_stats", "write_stats", "read_stats", "stats_paths"]


@dataclass(frozen=True, slots=True, kw_only=True)
class PackStats:
    capacity: int  # C = sample.max_token_len
    samples: int  # ok samples planned
    packs: int  # packs in the plan
    tokens: int  # sum of sample lengths
    fill_ratio: float  # tokens / (packs * C)
    lower_bound: int  # sum over pack groups of max(ceil(tokens / C), samples longer than C / 2)
    gap: float  # packs / lower_bound - 1
    samples_per_pack_mean: float
    samples_per_pack_min: int
    samples_per_pack_max: int
    drops: dict[str, int] = field(default_factory=dict)  # manifest status -> count, status != ok

    def table_lines(self) -> list[str]:
        rows = [
            ("samples", f"{self.samples}"),
            ("packs", f"{self.packs}"),
            ("tokens", f"{self.tokens}"),
            ("capacity C", f"{self.capacity}"),
            ("fill ratio", f"{self.fill_ratio:.5f}"),
            ("lower bound", f"{self.lower_bound}"),
            ("gap to bound", f"{self.packs - self.lower_bound} packs ({100 * self.gap:.3f}%)"),
            ("samples/pack", f"mean {self.samples_per_pack_mean:.2f}, min {self.samples_per_pack_min}, "
                             f"max {self.samples_per_pack_max}"),
            ("dropped", f"{sum(self.drops.values())}"),
        ]
        rows += [(f"  {reason}", f"{count}") for reason, count in sorted(self.drops.items())]
        width = max(len(name) for name, _ in rows)
        return [f"{name:<{width}}  {value}" for name, value in rows]


def compute_stats(
    lengths: np.ndarray,
    pack_totals: np.ndarray,
    pack_sizes: np.ndarray,
    capacity: int,
    drops: dict[str, int],
    sample_groups: np.ndarray | None = None,
) -> PackStats:
    """``sample_groups`` (one label per length) names the group each sample was packed in."""
    lengths = np.asarray(lengths, dtype=np.int64)
    tokens, packs = int(lengths.sum()), int(len(pack_totals))
    if sample_groups is None:
        bound = lower_bound(lengths, capacity)
    else:
        labels = np.asarray(sample_groups)
        bound = sum(lower_bound(lengths[labels == label], capacity) for label in np.unique(labels))
    return PackStats(
        capacity=capacity, samples=int(len(lengths)), packs=packs, tokens=tokens,
        fill_ratio=tokens / (packs * capacity) if packs else 0.0, lower_bound=bound,
        gap=packs / bound - 1 if bound else 0.0,
        samples_per_pack_mean=float(np.mean(pack_sizes)) if packs else 0.0,
        samples_per_pack_min=int(np.min(pack_sizes)) if packs else 0,
        samples_per_pack_max=int(np.max(pack_sizes)) if packs else 0,
        drops=dict(sorted(drops.items())),
    )


def stats_paths(work_dir: str | Path) -> tuple[Path, Path]:
    return Path(work_dir) / "stats.json", Path(work_dir) / "stats.png"


def write_stats(work_dir, stats: PackStats, plan_fp: str, lengths: np.ndarray, pack_totals: np.ndarray) -> None:
    """stats.png (two histograms), then stats.json (last: it marks the pair complete)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    json_path, png_path = stats_paths(work_dir)
    fig = Figure(figsize=(10, 4))
    ax_len, ax_fill = fig.subplots(1, 2)
    ax_len.hist(np.asarray(lengths), bins=100, color="tab:blue")
    ax_len.set(title="sample token length", xlabel="tokens", ylabel="samples")
    ax_fill.hist(np.asarray(pack_totals) / stats.capacity, bins=100, range=(0, 1), color="tab:green")
    ax_fill.set(title=f"pack fill (mean {stats.fill_ratio:.4f})", xlabel="tokens / C", ylabel="packs")
    fig.tight_layout()
    with atomic_open(png_path, "wb") as handle:
        fig.savefig(handle, format="png", metadata={"Software": None})
    payload = {"plan_fingerprint": plan_fp, **dataclasses.asdict(stats)}
    atomic_write_text(json_path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def read_stats(work_dir) -> dict | None:
    path = stats_paths(work_dir)[0]
    return json.loads(path.read_text()) if path.exists() else None
