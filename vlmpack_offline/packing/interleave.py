"""Even mixing over steps: the plan orders packs (or balanced slots) so every source's share holds in every window.

A random order keeps each source's share right on average only: in a window of 100 steps a source
of weight 0.3 drifts by several percentage points. ``interleave`` orders the units (packs, or the
balanced schedule's slots of one pack per rank) instead:

1. each unit's *class* is the source with the largest amount (samples, or tokens with
   ``data.mix_by: tokens``) in it;
2. within a class, units are sorted by their amount of the class's source and dealt in bit-reversed
   (van der Corput) order, so any run of consecutive members of a class holds its light and heavy
   units alike;
3. the ``n_c`` units of class ``c`` get the keys ``(i + u_c) / n_c`` (``u_c`` a seeded offset) and all
   units are sorted by key: every class is spread at a constant stride over the run.

Guarantee (3): in any ``w`` consecutive units, class ``c`` holds ``w * n_c / n`` units within
``1 + k * n_c / n < 2`` (``k`` classes), cyclically too, so a rotation of the order (``PackDataset``'s
per-epoch step order, ``schedule.py``) keeps it. A source's share of a window then differs from its
share of the run by at most about two of its units' amounts over the window's amount, plus what the
other sources inside its class's units vary. That floor is the data's: a 100-step window of 100 units
cannot hold a source to better than about one unit (1 pp by tokens, where packs hold about C tokens
each; far more by samples, where a pack of short texts holds a hundred samples and a video pack one).
The plan measures the result on the run it wrote (``window_deviation``, reported by the plan and in
stats) rather than trusting a bound that depends on the data. Balance is untouched: the order moves
whole slots. A balanced plan also deals the packs of every few near-equal-cost slots across their
classes before ordering them (``schedule._mix_slots``), so a slot holds several sources and one
slot more or less in a window moves each source's share less.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .mixture import source_slices

__all__ = ["Mix", "StepMix", "interleave", "window_deviation", "WINDOW_STEPS"]

WINDOW_STEPS = 100  # the window the "even over steps" is measured on
_PLOTTED = 2000  # points of each source's share along the run that window_deviation keeps for mixture.png


@dataclass(frozen=True, slots=True, kw_only=True)
class Mix:
    """Every packed sub-sample's source and amount, by pack: what ``interleave`` and the window measure read."""

    pack: np.ndarray  # int64 per sub-sample: its pack (numbering of the arrays it came from)
    source: np.ndarray  # int16 per sub-sample: index into ``names``
    amount: np.ndarray  # float64 per sub-sample: 1, or its tokens (data.mix_by)
    n_packs: int
    names: tuple[str, ...]  # sources, in data.source_list order
    asked: np.ndarray  # float64 [sources]: share of the mixture asked for (targets / their sum)

    @classmethod
    def of_packs(cls, source: np.ndarray, tokens: np.ndarray, indexes: np.ndarray, offsets: np.ndarray,
                 names: tuple[str, ...], targets: np.ndarray, by_tokens: bool) -> Mix:
        n_packs = len(offsets) - 1
        total = float(targets.sum())
        return cls(pack=np.repeat(np.arange(n_packs, dtype=np.int64), np.diff(offsets)), source=source[indexes],
                   amount=tokens[indexes].astype(np.float64) if by_tokens else np.ones(len(indexes)),
                   n_packs=n_packs, names=names,
                   asked=targets / total if total > 0 else np.zeros(len(names)))

    def dominant(self) -> np.ndarray:
        """Per pack, the source with the largest amount in it (its class)."""
        return _dominant(self.pack, self.source, self.amount, self.n_packs)[0]

    def units(self, unit_of_pack: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(unit, source, amount) per sub-sample whose pack is in a unit (``unit_of_pack`` -1: in none)."""
        unit = unit_of_pack[self.pack]
        keep = unit >= 0
        return unit[keep], self.source[keep], self.amount[keep]

    def interleaved(self, unit_packs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``interleave``'s order of units, unit ``u`` being the packs of row ``u`` of ``unit_packs``
        ([units, packs per unit]: one train pack each, or the D packs of a balanced slot)."""
        unit_of_pack = np.full(self.n_packs, -1, np.int64)
        unit_of_pack[unit_packs] = np.arange(len(unit_packs))[:, None]
        return interleave(*self.units(unit_of_pack), len(unit_packs), rng)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepMix:
    """The train split as written, per sub-sample: the optimizer step that reads it (all ranks together)."""

    step: np.ndarray  # int64 per sub-sample of a scheduled pack
    source: np.ndarray  # int16
    amount: np.ndarray  # float64
    n_steps: int

    @classmethod
    def of_run(cls, mix: Mix, n_train: int, schedule) -> StepMix:
        """``mix`` in written order; with a schedule (``schedule.Schedule``) train pack ``r * n + j`` is slot
        ``j``, read at step ``j // micro_batches_per_step`` (packs in no slot left out); without one a step is
        one train pack."""
        step_of_pack = np.full(mix.n_packs, -1, np.int64)
        if schedule is None:
            step_of_pack[:n_train] = np.arange(n_train)
            n_steps = n_train
        else:
            n, m = schedule.packs_per_rank, schedule.micro_batches_per_step
            step_of_pack[: schedule.scheduled] = np.tile(np.arange(n) // m, schedule.data_parallel_size)
            n_steps = n // m
        step, source, amount = mix.units(step_of_pack)
        return cls(step=step, source=source, amount=amount, n_steps=n_steps)


def _bit_reversed(n: int) -> np.ndarray:
    """0..n-1 in van der Corput order: any run of consecutive values samples 0..n-1 evenly."""
    if n <= 1:
        return np.arange(n, dtype=np.int64)
    bits = int(np.ceil(np.log2(n)))
    idx = np.arange(1 << bits, dtype=np.int64)
    rev = np.zeros_like(idx)
    for b in range(bits):
        rev |= ((idx >> b) & 1) << (bits - 1 - b)
    return rev[rev < n]


def _dominant(unit: np.ndarray, source: np.ndarray, amount: np.ndarray,
              n_units: int) -> tuple[np.ndarray, np.ndarray]:
    """Per unit, its dominant source and that source's amount in it (one source at a time: memory O(units))."""
    dominant = np.zeros(n_units, np.int64)
    most = np.zeros(n_units)
    for s, mine in enumerate(source_slices(source, int(source.max()) + 1 if source.size else 0)):
        held = np.bincount(unit[mine], weights=amount[mine], minlength=n_units)
        more = held > most
        dominant[more], most[more] = s, held[more]
    return dominant, most


def interleave(unit: np.ndarray, source: np.ndarray, amount: np.ndarray, n_units: int,
               rng: np.random.Generator) -> np.ndarray:
    """Pure: an order of ``n_units`` units that spreads every source evenly (module doc).

    ``unit``, ``source``, ``amount``: one entry per sub-sample."""
    if n_units == 0:
        return np.zeros(0, np.int64)
    dominant, held = _dominant(unit, source, amount, n_units)
    keys = np.empty(n_units, np.float64)
    for c in np.unique(dominant):
        members = np.flatnonzero(dominant == c)
        by_held = members[np.argsort(held[members], kind="stable")]
        dealt = np.roll(by_held[_bit_reversed(len(by_held))], int(rng.integers(len(by_held))))
        keys[dealt] = (np.arange(len(dealt)) + rng.random()) / len(dealt)
    return np.argsort(keys, kind="stable")


def _window_sums(values: np.ndarray, window: int) -> np.ndarray:
    """Sums of every ``window`` consecutive values, cyclically (window k starts at value k)."""
    wrapped = np.concatenate([values, values[: window - 1]])
    sums = np.concatenate([[0.0], np.cumsum(wrapped)])
    return sums[window : window + len(values)] - sums[: len(values)]


def window_deviation(step: np.ndarray, source: np.ndarray, amount: np.ndarray, n_steps: int, asked: np.ndarray,
                     window: int = WINDOW_STEPS) -> tuple[np.ndarray, int, np.ndarray]:
    """Per source, the largest |share in a window of ``window`` consecutive steps - asked share| over every
    window of the run read cyclically (a rotated epoch included); the window used (all steps when fewer);
    and per source its share in every window, thinned to about ``_PLOTTED`` points ([sources, points]:
    what mixture.png draws, so the shares are computed once).

    ``step``, ``source``, ``amount``: one entry per sub-sample of the run (``step`` in [0, n_steps)). One source
    at a time, so memory stays a few arrays of ``n_steps`` whatever the number of sources."""
    if n_steps == 0:
        return np.zeros(len(asked)), 0, np.zeros((len(asked), 0))
    window = max(1, min(window, n_steps))
    totals = _window_sums(np.bincount(step, weights=amount, minlength=n_steps), window)
    worst, series = np.zeros(len(asked)), []
    for s, at in enumerate(source_slices(source, len(asked))):
        mine = _window_sums(np.bincount(step[at], weights=amount[at], minlength=n_steps), window)
        share = np.divide(mine, totals, out=np.zeros(n_steps), where=totals > 0)
        worst[s] = float(np.abs(share - asked[s]).max())
        series.append(share[:: max(1, n_steps // _PLOTTED)])
    return worst, window, np.array(series)
