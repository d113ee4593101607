"""Even mixing over steps: the plan orders packs (or balanced slots) so every source's share holds in every window.

A random order keeps each source's share right on average only: in a window of 100 steps a source
of weight 0.3 spread over 800 packs drifts by a few percentage points. ``interleave`` orders the
units (packs, or the balanced schedule's slots of one pack per rank) instead:

1. each unit's *class* is the source with most samples (tokens, by ``data.mix_by``) in it;
2. within a class, units are sorted by that source's share in them and dealt in bit-reversed
   (van der Corput) order, so any run of consecutive members of a class samples its whole range;
3. the ``n_c`` units of class ``c`` get the keys ``(i + u_c) / n_c`` (``u_c`` a seeded offset) and
   all units are sorted by key: every class is spread at a constant stride over the run.

Guarantee (3): in any ``w`` consecutive units, class ``c`` holds ``w * n_c / n`` units within
``1 + k * n_c / n < 2`` (``k`` classes), cyclically too, so a rotation of the order (``PackDataset``'s
per-epoch step order, ``schedule.py``) keeps it. A source's share in a window then differs from its
share of the run by what its units' compositions vary within their class, which (2) evens out; the
plan measures the result on the run it wrote (``window_deviation``, reported in stats) rather than
trusting a bound that depends on the data. Balance is untouched: the order moves whole slots.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Mix", "interleave", "per_step", "window_deviation", "WINDOW_STEPS"]

WINDOW_STEPS = 100  # the window the "even over steps" is measured on


@dataclass(frozen=True, slots=True, kw_only=True)
class Mix:
    """Each bins pack's content per source, and the share every source was asked for."""

    composition: np.ndarray  # float64 [packs, sources]: samples (or tokens) of each source in each pack
    names: tuple[str, ...]  # sources, in data.source_list order
    asked: np.ndarray  # float64 [sources]: share of the mixture asked for (targets / their sum)

    @classmethod
    def of_packs(cls, source: np.ndarray, tokens: np.ndarray, indexes: np.ndarray, offsets: np.ndarray,
                 names: tuple[str, ...], targets: np.ndarray, by_tokens: bool) -> Mix:
        n_packs, n_sources = len(offsets) - 1, len(names)
        pack_of = np.repeat(np.arange(n_packs, dtype=np.int64), np.diff(offsets))
        weights = tokens[indexes].astype(np.float64) if by_tokens else None
        flat = np.bincount(pack_of * n_sources + source[indexes], weights=weights, minlength=n_packs * n_sources)
        total = float(targets.sum())
        asked = targets / total if total > 0 else np.zeros(n_sources)
        return cls(composition=flat.reshape(n_packs, n_sources).astype(np.float64), names=names, asked=asked)


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


def interleave(composition: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Pure: an order of the units (rows of ``composition``, [units, sources]) that spreads every source evenly."""
    n = len(composition)
    if n == 0:
        return np.zeros(0, np.int64)
    dominant = composition.argmax(axis=1)
    totals = composition.sum(axis=1)
    share = np.divide(composition[np.arange(n), dominant], totals, out=np.zeros(n), where=totals > 0)
    keys = np.empty(n, np.float64)
    for c in np.unique(dominant):
        members = np.flatnonzero(dominant == c)
        by_share = members[np.argsort(share[members], kind="stable")]
        dealt = np.roll(by_share[_bit_reversed(len(by_share))], int(rng.integers(len(by_share))))
        keys[dealt] = (np.arange(len(dealt)) + rng.random()) / len(dealt)
    return np.argsort(keys, kind="stable")


def per_step(train: np.ndarray, schedule) -> np.ndarray:
    """[steps, sources] from the train packs' rows in written order: with a schedule (``schedule.Schedule``) a
    step is ``micro_batches_per_step`` slots of every rank (packs in no slot left out); without one, a pack."""
    if schedule is None:
        return train
    d, n, m = schedule.data_parallel_size, schedule.packs_per_rank, schedule.micro_batches_per_step
    slots = train[: d * n].reshape(d, n, -1).sum(axis=0)
    return slots.reshape(n // m, m, -1).sum(axis=1)


def window_deviation(per_step: np.ndarray, asked: np.ndarray, window: int = WINDOW_STEPS) -> tuple[np.ndarray, int]:
    """Per source, the largest |share in a window of ``window`` consecutive steps - asked share|, over every
    window of the run read cyclically (a rotated epoch included); and the window used (all steps when fewer).

    ``per_step``: [steps, sources], each step's samples (tokens) of each source, all ranks together."""
    steps = len(per_step)
    if steps == 0:
        return np.zeros(len(asked)), 0
    window = min(window, steps)
    wrapped = np.concatenate([per_step, per_step[: window - 1]])
    sums = np.concatenate([np.zeros((1, per_step.shape[1])), np.cumsum(wrapped, axis=0)])
    win = sums[window:window + steps] - sums[:steps]
    totals = win.sum(axis=1, keepdims=True)
    shares = np.divide(win, totals, out=np.zeros_like(win), where=totals > 0)
    return np.abs(shares - asked).max(axis=0), window
