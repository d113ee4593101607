"""How many times each sample is used: a mixture's rules (``data.sources``) applied to the scanned samples.

Bucket calls ``use_counts`` before it packs, so a new weight reruns bucket, plan and write, never the
scan. Each source has one rule, measured in samples or in tokens (``data.mix_by``):

* ``repeat: r``: ``r`` times the source (2.5 = every sample twice, plus a seeded half once more);
* ``count: N``: exactly ``N`` samples (tokens), whole passes first, the rest a seeded subset;
* ``weight: w``: a share ``w / sum(weights)`` of the weighted part, which is as large as its sources
  hold (in samples, split by largest remainder so the parts add up exactly).

A target below a source's size leaves a seeded subset out (down-sampling); above it repeats whole
passes and a seeded subset (up-sampling). Each of ``plan.epochs`` draws its own subsets
(``numpy.random.default_rng((seed, epoch, source))``), and a sample's uses add up over the draws.
By tokens the subset is the seeded order's prefix whose tokens come closest to the target: exact to
within one sample. The result is a deterministic function of the samples, the rules and the seed.

Bucket then packs the copies (``packing/copies.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..config import Config
from ..errors import ConfigError

__all__ = ["SourceRule", "MixtureTargets", "rules_of", "source_slices", "use_counts", "uses_text"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceRule:
    """One source's rule: ``kind`` is weight, repeat or count (``repeat`` 1 when the config gives none)."""

    name: str
    kind: str
    value: float

    def describe(self) -> str:
        return f"{self.kind} {self.value:g}"


@dataclass(frozen=True, slots=True, kw_only=True)
class MixtureTargets:
    """What ``use_counts`` aimed at and reached, per source (in ``data.mix_by`` units), over all epochs."""

    available: np.ndarray  # float64 [S]: the source's packable samples (tokens): one pass
    target: np.ndarray  # float64 [S]: asked, summed over the epochs
    used: np.ndarray  # float64 [S]: reached
    empty: tuple[str, ...]  # sources with nothing packable although their rule asks for some


def rules_of(config: Config) -> tuple[SourceRule, ...]:
    """The rule of every source, in ``data.source_list`` order."""
    out = []
    for source in config.data.source_list:
        if source.weight is not None:
            out.append(SourceRule(name=source.name, kind="weight", value=float(source.weight)))
        elif source.count is not None:
            out.append(SourceRule(name=source.name, kind="count", value=float(source.count)))
        else:
            out.append(SourceRule(name=source.name, kind="repeat",
                                  value=1.0 if source.repeat is None else float(source.repeat)))
    return tuple(out)


def source_slices(source: np.ndarray, n_sources: int) -> list[np.ndarray]:
    """Per source, the positions holding it, ascending: one stable (radix) sort, not a pass per source."""
    order = np.argsort(source, kind="stable")
    bounds = np.searchsorted(source[order], np.arange(n_sources + 1))
    return [order[bounds[s] : bounds[s + 1]] for s in range(n_sources)]


def _targets(rules: Sequence[SourceRule], available: np.ndarray, by_tokens: bool) -> np.ndarray:
    """Per source, the samples (tokens) one epoch asks for."""
    target = np.zeros(len(rules), np.float64)
    weighted = [i for i, r in enumerate(rules) if r.kind == "weight" and available[i] > 0]  # empty: no share
    for i, rule in enumerate(rules):
        if rule.kind == "repeat":
            target[i] = rule.value * available[i]
        elif rule.kind == "count":
            target[i] = rule.value
    weights = np.array([rules[i].value for i in weighted])
    if weighted and weights.sum() > 0:
        part = available[weighted].sum()
        share = weights / weights.sum() * part
        if not by_tokens:  # whole samples that add up to the part exactly: largest remainder
            floor = np.floor(share)
            extra = int(round(part - floor.sum()))
            floor[np.argsort(-(share - floor), kind="stable")[:extra]] += 1
            share = floor
        target[weighted] = share
    return target if by_tokens else np.floor(target + 0.5)


def use_counts(source: np.ndarray, tokens: np.ndarray, eligible: np.ndarray, rules: Sequence[SourceRule],
               *, by_tokens: bool, epochs: int, seed: int) -> tuple[np.ndarray, MixtureTargets]:
    """Pure: uses per sample (uint32) and the per-source accounting (module doc).

    ``source``: code per sample (index into ``rules``); ``tokens``: each sample's tokens (read when
    ``by_tokens``); ``eligible``: packable samples (bucket's overlong drops are not)."""
    n_sources = len(rules)
    measure = tokens.astype(np.int64) if by_tokens else np.ones(len(source), np.int64)
    uses = np.zeros(len(source), np.uint32)
    members = [m[eligible[m]] for m in source_slices(source, n_sources)]
    available = np.array([float(measure[m].sum()) for m in members])
    per_epoch = _targets(rules, available, by_tokens)
    empty = tuple(rules[s].name for s in range(n_sources) if rules[s].value > 0 and available[s] == 0)
    used = np.zeros(n_sources, np.float64)
    for epoch in range(epochs):
        for s, m in enumerate(members):
            if not m.size or per_epoch[s] <= 0:
                continue
            values = measure[m].astype(np.float64)
            passes = int(per_epoch[s] // available[s])
            rest = per_epoch[s] - passes * available[s]
            uses[m] += passes
            used[s] += passes * available[s]
            if rest <= 0:
                continue
            order = np.random.default_rng((seed, epoch, s)).permutation(m.size)
            reached = np.cumsum(values[order])
            k = int(np.searchsorted(reached, rest, side="left"))  # reached[k] >= rest (first such)
            if k >= m.size:
                k = m.size - 1
            before = reached[k - 1] if k else 0.0
            take = k + 1 if reached[k] - rest <= rest - before else k  # the nearer prefix
            uses[m[order[:take]]] += 1
            used[s] += reached[take - 1] if take else 0.0
    if uses.size and int(uses.max()) >= 2**16:
        raise ConfigError(f"a sample would be used {int(uses.max())} times: lower the repeat / count / weight of "
                          "its source (at most 65535 uses of one sample)")
    return uses, MixtureTargets(available=available, target=per_epoch * epochs, used=used, empty=empty)


def uses_text(uses: dict[str, int]) -> str:
    """An accounting's ``{"0": 172, "1": 200, "2": 28}`` (uses -> samples) as "172 left out, 200 x1, 28 x2"."""
    parts = [f"{n} left out" if k == "0" else f"{n} x{k}" for k, n in sorted(uses.items(), key=lambda kv: int(kv[0]))]
    return ", ".join(parts) or "none"
