"""Packing a mixture's copies: as tightly as distinct samples, with no pack holding a sample twice.

Bucket packs every copy in one packing pass (``copies``: each sample's copies spread evenly over the
order, so they rarely meet), then ``separate_copies`` keeps them apart: a surplus copy trades places
with a same-length sample of another pack (vectorized; both packs keep their length), and the few
packs still holding a sample twice are packed again with a no-second-copy rule. The number of packs
is that of packing the copies as distinct samples, give or take the repack's pack or two.
"""

from __future__ import annotations

import numpy as np

from .records import PackLimits

__all__ = ["copies", "separate_copies"]


def copies(uses: np.ndarray) -> np.ndarray:
    """Every copy to pack as sample indexes, each sample's copies spread evenly over the order.

    Copy ``j`` of a sample used ``u`` times gets the key ``(j + f) / u`` (``f`` in [0, 1) by the sample's
    position), and copies are ordered by key. Packers place samples of equal length in this order
    (``_runs.sorted_runs`` breaks ties by position), so the copies of a sample sit a ``u``-th of their
    length's run apart and rarely meet in one pack; ``separate_copies`` moves the few that do."""
    live = np.flatnonzero(uses)
    if live.size == 0 or int(uses[live].max()) == 1:  # every sample once: nothing to spread
        return live.astype(np.int64)
    counts = uses[live].astype(np.int64)
    items = np.repeat(live.astype(np.int64), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    copy = np.arange(items.size, dtype=np.int64) - first
    spread = np.repeat(np.arange(live.size, dtype=np.float64) / live.size, counts)
    # introsort: deterministic for the same input, twice as fast as a stable sort here (ties do not matter)
    return items[np.argsort((copy + spread) / np.repeat(counts, counts), kind="quicksort")]


_PASSES = 4  # vectorized same-length passes
_REPACK_MAX = 20_000  # copies in packs still holding a sample twice that are packed again (quadratic)


def _surplus(indexes: np.ndarray, pack_of: np.ndarray, packs: np.ndarray | None = None) -> np.ndarray:
    """Positions of every copy beyond the first of a sample in its pack (only in ``packs``, when given)."""
    where = np.arange(len(indexes)) if packs is None else np.flatnonzero(np.isin(pack_of, packs))
    key = pack_of[where] * (int(indexes.max()) + 1) + indexes[where]
    order = np.argsort(key, kind="stable")
    same = key[order][1:] == key[order][:-1]
    return where[order[1:][same]]


def _same_length_trades(indexes: np.ndarray, pack_of: np.ndarray, surplus: np.ndarray, key: np.ndarray,
                        shift: int) -> np.ndarray:
    """Vectorized: trade each surplus copy for a distinct sample of the same ``key`` (per position: length and
    visual tokens) in another pack, where no pack then holds a sample twice (in place). ``shift`` varies which
    samples of a key are offered, pass to pass. Returns the packs that traded."""
    n = int(indexes.max()) + 1
    offer = _marked(key, key[surplus])  # only positions whose key some surplus copy has can trade
    offer[surplus] = False
    candidates = np.flatnonzero(offer)
    candidates = candidates[np.argsort(key[candidates], kind="stable")]
    involved = _marked(pack_of, np.concatenate([pack_of[surplus], pack_of[candidates]]))
    held = np.sort(pack_of[involved] * n + indexes[involved])  # what the packs that may trade hold

    def holds(keys: np.ndarray) -> np.ndarray:
        at = np.minimum(np.searchsorted(held, keys), len(held) - 1)
        return held[at] == keys

    wanted = surplus[np.argsort(key[surplus], kind="stable")]
    cand_key, want_key = key[candidates], key[wanted]
    rank = np.arange(len(wanted)) - np.searchsorted(want_key, want_key, "left")
    lo, hi = np.searchsorted(cand_key, want_key, "left"), np.searchsorted(cand_key, want_key, "right")
    found = hi > lo
    pick = lo + (rank + shift) % np.maximum(hi - lo, 1)
    d, c = wanted[found], candidates[pick[found]]
    x, y, p, q = indexes[d], indexes[c], pack_of[d], pack_of[c]
    ok = (p != q) & (x != y) & ~holds(q * n + x) & ~holds(p * n + y)
    ok &= _first(c, ok)  # each offered sample in one trade
    received = np.concatenate([q * n + x, p * n + y])  # a pack receiving one sample twice keeps the first trade
    both = _first(received, np.concatenate([ok, ok]))
    ok &= both[: len(ok)] & both[len(ok) :]
    indexes[d[ok]], indexes[c[ok]] = y[ok], x[ok]
    return np.concatenate([p[ok], q[ok]])


def _marked(values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """``values`` in ``wanted``, by a lookup table (values are small non-negative ints: lengths, pack numbers)."""
    table = np.zeros(int(max(values.max(initial=0), wanted.max(initial=0))) + 1, bool)
    table[wanted] = True
    return table[values]


def _first(values: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Where ``ok``, True only at the first occurrence of each value among the ``ok`` ones."""
    first = np.zeros(len(values), bool)
    masked = np.where(ok, values, -1 - np.arange(len(values)))  # not ok: unique placeholders
    first[np.unique(masked, return_index=True)[1]] = True
    return first & ok


def separate_copies(indexes: np.ndarray, offsets: np.ndarray, lengths: np.ndarray, limits: PackLimits,
                    media_tokens: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Packs (indexes, offsets) where no pack holds a sample twice, and the copies still left together.

    1. Each surplus copy of ``x`` trades places with a sample of the same length (and visual tokens) in another
       pack that does not hold ``x`` (vectorized; both packs keep their length): at scale every length has
       thousands of samples, and this settles nearly all.
    2. The packs still holding a copy twice are packed again, best fit decreasing with the rule that a pack
       takes no second copy of a sample (up to ``_REPACK_MAX`` copies: a few packs more at most).
    Copies stay together only where 2 was too large to run; the bucket summary counts them.
    """
    n_packs = len(offsets) - 1
    pack_of = np.repeat(np.arange(n_packs, dtype=np.int64), np.diff(offsets))
    media = np.zeros(len(lengths), np.int64) if media_tokens is None else media_tokens.astype(np.int64)
    indexes = indexes.copy()
    surplus = _surplus(indexes, pack_of)
    sample_key = lengths.astype(np.int64) * (int(media.max()) + 1) + media
    for shift in range(_PASSES):
        if not surplus.size:
            return indexes, offsets, 0
        touched = _same_length_trades(indexes, pack_of, surplus, sample_key[indexes], shift * 7919)
        surplus = _surplus(indexes, pack_of, np.union1d(touched, pack_of[surplus]))
    if not surplus.size:
        return indexes, offsets, 0
    affected = np.isin(pack_of, np.unique(pack_of[surplus]))
    if np.count_nonzero(affected) > _REPACK_MAX:
        return indexes, offsets, int(surplus.size)
    repacked = _repack_apart(indexes[affected], lengths, media, limits)
    kept = ~np.isin(np.arange(n_packs), pack_of[affected])
    sizes = np.concatenate([np.diff(offsets)[kept], [len(p) for p in repacked]]).astype(np.int64)
    new_offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=new_offsets[1:])
    new_indexes = np.concatenate([indexes[~affected], *(np.asarray(p, indexes.dtype) for p in repacked)])
    return new_indexes, new_offsets, 0


def _repack_apart(items: np.ndarray, lengths: np.ndarray, media: np.ndarray, limits: PackLimits) -> list[list[int]]:
    """Best fit decreasing of ``items`` (sample indexes, copies included) where no pack takes a sample twice."""
    packs: list[list[int]] = []
    room: list[int] = []
    visual: list[int] = []
    for x in sorted(items.tolist(), key=lambda i: -int(lengths[i])):
        size, tokens = int(lengths[x]), int(media[x])
        best = -1
        for p in range(len(packs)):
            if room[p] >= size and (best < 0 or room[p] < room[best]) and x not in packs[p] \
                    and (limits.max_samples is None or len(packs[p]) < limits.max_samples) \
                    and (limits.max_media_tokens is None or visual[p] + tokens <= limits.max_media_tokens):
                best = p
        if best < 0:
            packs.append([])
            room.append(limits.capacity)
            visual.append(0)
            best = len(packs) - 1
        packs[best].append(x)
        room[best] -= size
        visual[best] += tokens
    return packs
