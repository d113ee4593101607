"""Packing quality: the numbers ``plan`` prints at its end and ``vlmpack stats`` reports.

fill ratio  = sum of sample lengths / (packs x C)
lower bound = max(ceil(sum / C), samples longer than C / 2): no packing needs fewer packs;
              with an alignment (``packing/alignment.py``) both use each sample's aligned
              length, the slots it takes once padded; ``padding`` counts the pad tokens
              with packing.group_by: media_type no pack mixes groups, so the bound
              is the sum of the per-group bounds (the one bucket prints)
gap         = packs / lower bound - 1 (0.001 = 0.1% more packs than the bound)

pack cost   = the plan's training cost of each pack (``packing/cost.py``), as multiples of the median
step balance = per optimizer step, the slowest data-parallel rank's cost / the mean (``schedule.py``),
              as planned and for the same packs dealt in random order

Written as ``work_dir/stats.json`` (the numbers, the plan fingerprint they
describe, ``png_panels``: the titles of the figure's panels) and ``work_dir/stats.png``
(``PANELS``: token length with the capacity line and the overlong drops, pack fill
per media group, samples per pack, drops by reason, pack cost per media group, step balance), and for
a mixture ``work_dir/mixture.png``: per source, its share over every window of steps against the share asked.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .artifacts import atomic_open, atomic_write_text
from .packing import lower_bound
from .packing.alignment import round_up
from .packing.mixture import uses_text

__all__ = ["PackStats", "PANELS", "MIXTURE_PNG", "compute_stats", "write_stats", "stats_figure", "mixture_figure",
           "read_stats", "stats_paths"]


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
    alignment: int = 1  # sub-samples padded to a multiple of this (1: none)
    padding_tokens: int = 0  # pad slots the alignment adds over all packs (counted in fill_ratio and lower_bound)
    cost: dict[str, float] = field(default_factory=dict)  # median FLOPs per pack, then p1/p99/max as x median
    step_balance: dict[str, dict[str, float]] = field(default_factory=dict)  # {"balanced"|"random order": {p50..}}
    mixture: dict = field(default_factory=dict)  # the plan's per-source record (stages/plan.py mixture_record), or {}

    def table_lines(self) -> list[str]:
        rows = [
            ("samples", f"{self.samples}"),
            ("packs", f"{self.packs}"),
            ("tokens", f"{self.tokens}"),
            ("capacity C", f"{self.capacity}"),
            *([("padding", f"{self.padding_tokens} tokens (sub-samples aligned to a multiple of {self.alignment})")]
              if self.alignment > 1 else []),
            ("fill ratio", f"{self.fill_ratio:.5f}" + (
                f" (pad slots counted as filled; real tokens {self.tokens / (self.packs * self.capacity):.5f})"
                if self.alignment > 1 and self.packs else "")),
            ("lower bound", f"{self.lower_bound}"),
            ("gap to bound", f"{self.packs - self.lower_bound} packs ({100 * self.gap:.3f}%)"),
            ("samples/pack", f"mean {self.samples_per_pack_mean:.2f}, min {self.samples_per_pack_min}, "
                             f"max {self.samples_per_pack_max}"),
            *([("cost/pack", f"median {self.cost['median']:.3g} FLOPs; p1 {self.cost['p1']:.3f}x, "
                                f"p99 {self.cost['p99']:.3f}x, max {self.cost['max']:.3f}x the median")]
              if self.cost else []),
            *([(f"step balance ({name})", "slowest rank / mean p50 {p50:.4f}, p99 {p99:.4f}, worst {max:.4f}"
                .format(**values)) for name, values in self.step_balance.items()]),
            *self._mixture_rows(),
            ("dropped", f"{sum(self.drops.values())}"),
        ]
        rows += [(f"  {reason}", f"{count}") for reason, count in sorted(self.drops.items())]
        width = max(len(name) for name, _ in rows)
        return [f"{name:<{width}}  {value}" for name, value in rows]


    def _mixture_rows(self) -> list[tuple[str, str]]:
        """Per source: its rule, copies packed, share asked / in the train split, and its worst window."""
        if not self.mixture:
            return []
        mix = self.mixture
        rows = [(f"mixture (by {mix['by']})", f"share asked / train split / worst {mix['window_steps']}-step window "
                                              f"of {mix['steps']} steps (pp off)")]
        for row in mix["sources"]:
            dropped = sum(row["dropped"].values()) + row["overlong"] + row.get("layout_unfit", 0)
            rows.append((f"  {row['name']}", f"{row['rule']} {row['value']:g}: {row['scanned']} scanned, "
                                             f"{dropped} dropped, {row['packed']} packed ({uses_text(row['uses'])}); "
                                             f"{row['asked_share']:.2%} / {row['train_share']:.2%} / "
                                             f"{row['worst_window_deviation'] * 100:.2f}"))
        return rows


def compute_stats(
    lengths: np.ndarray,
    pack_totals: np.ndarray,
    pack_sizes: np.ndarray,
    capacity: int,
    drops: dict[str, int],
    sample_groups: np.ndarray | None = None,
    multiple: int = 1,
    pack_costs: np.ndarray | None = None,
    step_ratios: dict[str, np.ndarray] | None = None,
    mixture: dict | None = None,
) -> PackStats:
    """``sample_groups`` (one label per length) names the group each sample was packed in; ``multiple``: the
    alignment each length is rounded up to (``pack_totals`` are the aligned totals then); ``pack_costs``
    the plan's cost per pack, ``step_ratios`` its per-step balance (``schedule.step_ratios``)."""
    real = np.asarray(lengths, dtype=np.int64)
    lengths = round_up(real, multiple)
    tokens, packs = int(real.sum()), int(len(pack_totals))
    slots = int(lengths.sum())
    if sample_groups is None:
        bound = lower_bound(lengths, capacity)
    else:
        labels = np.asarray(sample_groups)
        bound = sum(lower_bound(lengths[labels == label], capacity) for label in np.unique(labels))
    return PackStats(
        capacity=capacity, samples=int(len(lengths)), packs=packs, tokens=tokens,
        fill_ratio=slots / (packs * capacity) if packs else 0.0, lower_bound=bound,
        gap=packs / bound - 1 if bound else 0.0,
        samples_per_pack_mean=float(np.mean(pack_sizes)) if packs else 0.0,
        samples_per_pack_min=int(np.min(pack_sizes)) if packs else 0,
        samples_per_pack_max=int(np.max(pack_sizes)) if packs else 0,
        drops=dict(sorted(drops.items())), alignment=multiple, padding_tokens=slots - tokens,
        cost=_cost_summary(pack_costs),
        step_balance={name: dict(zip(("p50", "p99", "max"), (float(v) for v in np.percentile(r, [50, 99, 100])),
                                     strict=True)) for name, r in (step_ratios or {}).items() if len(r)},
        mixture=mixture or {},
    )


def _cost_summary(costs: np.ndarray | None) -> dict[str, float]:
    if costs is None or not len(costs) or not np.median(costs) > 0:
        return {}
    median = float(np.median(costs))
    p1, p99 = (float(v) / median for v in np.percentile(costs, [1, 99]))
    return {"median": median, "p1": p1, "p99": p99, "max": float(np.max(costs)) / median}


def stats_paths(work_dir: str | Path) -> tuple[Path, Path]:
    return Path(work_dir) / "stats.json", Path(work_dir) / "stats.png"


MIXTURE_PNG = "mixture.png"  # in work_dir, beside stats.png: one panel per source (a plan with data.sources)


# stats.png titles, in the figure's order (2 rows of 3)
PANELS = ("token length", "pack fill per media group", "pack cost", "samples per pack", "drops by reason",
          "step balance")


def write_stats(work_dir, stats: PackStats, plan_fp: str, lengths: np.ndarray, pack_totals: np.ndarray, *,
                pack_groups: np.ndarray | None = None, group_names: tuple[str, ...] = (),
                pack_sizes: np.ndarray | None = None, drop_lengths: np.ndarray | None = None,
                pack_costs: np.ndarray | None = None, step_ratios: dict[str, np.ndarray] | None = None,
                mixture_series: np.ndarray | None = None) -> None:
    """stats.png (the ``PANELS``), mixture.png with a mixture (``mixture_series``: each source's share along the
    run, ``packing/interleave.py`` ``window_deviation``), then stats.json (last: it marks the set complete)."""
    json_path, png_path = stats_paths(work_dir)
    mixture_png = Path(work_dir) / MIXTURE_PNG
    if stats.mixture and mixture_series is not None:
        with atomic_open(mixture_png, "wb") as handle:
            mixture_figure(stats.mixture, mixture_series).savefig(handle, format="png", metadata={"Software": None})
    else:
        mixture_png.unlink(missing_ok=True)
    fig = stats_figure(stats, lengths, pack_totals, pack_groups=pack_groups, group_names=group_names,
                       pack_sizes=pack_sizes, drop_lengths=drop_lengths, pack_costs=pack_costs,
                       step_ratios=step_ratios)
    with atomic_open(png_path, "wb") as handle:
        fig.savefig(handle, format="png", metadata={"Software": None})
    panels = [ax.get_title().split(" (")[0] for ax in fig.axes if ax.get_title()]
    payload = {"plan_fingerprint": plan_fp, **dataclasses.asdict(stats), "png_panels": panels}
    atomic_write_text(json_path, json.dumps(payload, indent=2, sort_keys=True) + "\n")


def stats_figure(stats: PackStats, lengths: np.ndarray, pack_totals: np.ndarray, *,
                 pack_groups: np.ndarray | None = None, group_names: tuple[str, ...] = (),
                 pack_sizes: np.ndarray | None = None, drop_lengths: np.ndarray | None = None,
                 pack_costs: np.ndarray | None = None, step_ratios: dict[str, np.ndarray] | None = None):
    """The stats.png figure (a matplotlib ``Figure``, no pyplot state): 2 x 3 panels titled ``PANELS``."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    cap = stats.capacity
    fig = Figure(figsize=(18, 8))
    (ax_len, ax_fill, ax_cost), (ax_size, ax_drop, ax_step) = fig.subplots(2, 3)
    packed = np.asarray(lengths)
    dropped = np.zeros(0, np.int64) if drop_lengths is None else np.asarray(drop_lengths)
    top = max(cap, int(dropped.max()) if dropped.size else 0, int(packed.max()) if packed.size else 0)
    edges = np.linspace(0, top, 101)
    ax_len.stairs(np.histogram(packed, edges)[0], edges, fill=True, color="tab:blue", label="packed")
    if dropped.size:
        ax_len.stairs(np.histogram(dropped, edges)[0], edges, fill=True, color="tab:red", label="overlong")
    ax_len.axvline(cap, color="black", linestyle="--", label=f"capacity C = {cap}")
    ax_len.set(title=f"{PANELS[0]} ({len(packed):,} packed)", xlabel="tokens", ylabel="samples")
    ax_len.legend(fontsize="small")

    fill = np.asarray(pack_totals) / cap
    groups = np.zeros(len(fill), np.int8) if pack_groups is None else np.asarray(pack_groups)
    names = group_names or ("all",)
    fill_edges = np.linspace(0, 1, 101)
    for code, name in enumerate(names):
        mine = fill[groups == code]
        if mine.size:
            ax_fill.stairs(np.histogram(mine, fill_edges)[0], fill_edges, linewidth=1.5,
                           label=f"{name}: {mine.size:,} packs, mean {mine.mean():.4f}")
    ax_fill.set(title=f"{PANELS[1]} (all: mean {stats.fill_ratio:.4f})", xlabel="tokens / C", ylabel="packs",
                yscale="log")
    ax_fill.legend(fontsize="small", loc="upper left")

    sizes = np.asarray(pack_sizes) if pack_sizes is not None else np.zeros(0, np.int64)
    counts = np.bincount(sizes) if sizes.size else np.zeros(2, np.int64)
    ax_size.bar(np.arange(1, len(counts)), counts[1:], color="tab:green", width=0.9)
    ax_size.set(title=f"{PANELS[3]} (mean {stats.samples_per_pack_mean:.2f})", xlabel="samples in the pack",
                ylabel="packs")

    reasons = sorted(stats.drops.items(), key=lambda kv: kv[1])
    ax_drop.barh([r for r, _ in reasons], [n for _, n in reasons], color="tab:red")
    for y, (_, n) in enumerate(reasons):
        ax_drop.annotate(f" {n:,}", (n, y), va="center", fontsize="small")
    total = sum(stats.drops.values())
    ax_drop.set(title=f"{PANELS[4]} ({total:,} of {stats.samples + total:,} input samples)", xlabel="samples")
    if not reasons:
        ax_drop.text(0.5, 0.5, "no drops", ha="center", va="center", transform=ax_drop.transAxes)
    _cost_panel(ax_cost, stats, pack_costs, groups, names)
    _step_panel(ax_step, step_ratios or {})
    fig.tight_layout()
    return fig


def _cost_panel(ax, stats: PackStats, costs: np.ndarray | None, groups: np.ndarray, names: tuple[str, ...]) -> None:
    if not stats.cost or costs is None:
        ax.set(title=f"{PANELS[2]} (not in this plan)")
        ax.text(0.5, 0.5, "this plan has no pack costs", ha="center", va="center", transform=ax.transAxes)
        return
    relative = np.asarray(costs) / stats.cost["median"]
    edges = np.linspace(float(relative.min()), float(relative.max()) + 1e-9, 101)
    for code, name in enumerate(names):
        mine = relative[groups == code]
        if mine.size:
            ax.stairs(np.histogram(mine, edges)[0], edges, linewidth=1.5, label=f"{name}: {mine.size:,} packs")
    ax.set(title=f"{PANELS[2]} (median {stats.cost['median']:.3g} FLOPs)", xlabel="cost / median", ylabel="packs",
           yscale="log")
    ax.legend(fontsize="small")


def _step_panel(ax, ratios: dict[str, np.ndarray]) -> None:
    if not ratios:
        ax.set(title=f"{PANELS[5]} (no schedule)")
        ax.text(0.5, 0.5, "planned without parallel.data_parallel_size", ha="center", va="center",
                transform=ax.transAxes)
        return
    for name, values in ratios.items():
        ax.plot(np.sort(values)[::-1], label=f"{name}: worst {float(np.max(values)):.4f}")
    ax.set(title=f"{PANELS[5]} ({len(next(iter(ratios.values()))):,} steps)", xlabel="steps, slowest first",
           ylabel="slowest rank / mean")
    ax.legend(fontsize="small")


def mixture_figure(mixture: dict, series: np.ndarray):
    """One panel per source: its share in each window of ``window_steps`` steps along the run, against the
    share asked (the band is +-2 pp)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    rows = mixture["sources"]
    cols = min(4, len(rows))
    fig = Figure(figsize=(4.5 * cols, 3 * -(-len(rows) // cols)))
    axes = np.atleast_1d(fig.subplots(-(-len(rows) // cols), cols)).reshape(-1)
    window = int(mixture["window_steps"])
    for share, ax, row in zip(series, axes, rows, strict=False):
        asked = row["asked_share"]
        ax.axhspan(asked - 0.02, asked + 0.02, color="tab:green", alpha=0.15, label="asked +- 2 pp")
        ax.axhline(asked, color="tab:green", linestyle="--", label=f"asked {asked:.2%}")
        ax.plot(share, color="tab:blue", linewidth=1, marker="o" if len(share) < 30 else None,
                label=f"worst {row['worst_window_deviation'] * 100:.2f} pp off")
        ax.set(title=f"{row['name']} ({row['rule']} {row['value']:g})", xlabel=f"{window}-step windows along the run",
               ylabel=f"share of {mixture['by']}")
        ax.legend(fontsize="small")
    for ax in axes[len(rows):]:
        ax.set_axis_off()
    fig.tight_layout()
    return fig


def read_stats(work_dir) -> dict | None:
    path = stats_paths(work_dir)[0]
    return json.loads(path.read_text()) if path.exists() else None
