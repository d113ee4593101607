"""Pure planning: which samples share a pack. No I/O, numpy arrays in, ``Bins`` out.

    >>> import numpy as np
    >>> bins = pack_samples(np.array([6, 5, 4, 3, 2]), PackLimits(capacity=10))
    >>> [bins.pack(p).tolist() for p in range(bins.n_packs)]
    [[0, 2], [1, 3, 4]]

Samples are given by index (their position in the caller's arrays); a pack
lists its samples longest first, ties by index, so the result is a pure
function of (lengths, media tokens, limits, algorithm).
"""

from __future__ import annotations

import numpy as np

from ..errors import PlanError
from .best_fit import best_fit_decreasing
from .first_fit import first_fit_decreasing
from .hashbucket import hashbucket
from .limited import pack_with_limits
from .records import Bins, PackLimits, lower_bound

__all__ = ["ALGORITHMS", "Bins", "PackLimits", "lower_bound", "pack_samples"]

ALGORITHMS = {
    "best_fit_decreasing": best_fit_decreasing,
    "first_fit_decreasing": first_fit_decreasing,
    "hashbucket": hashbucket,
}


def pack_samples(
    lengths: np.ndarray,
    limits: PackLimits,
    *,
    algorithm: str = "best_fit_decreasing",
    media_tokens: np.ndarray | None = None,
) -> Bins:
    """Put every sample into exactly one pack within ``limits``; see each algorithm's module."""
    if algorithm not in ALGORITHMS:
        raise PlanError(f"unknown packing.algorithm {algorithm!r}: use one of {', '.join(ALGORITHMS)}")
    lengths = np.asarray(lengths)
    if lengths.size and (int(lengths.min()) < 1 or int(lengths.max()) > limits.capacity):
        bad = int(np.flatnonzero((lengths < 1) | (lengths > limits.capacity))[0])
        raise PlanError(
            f"sample #{bad} has token_len {int(lengths[bad])}, outside 1..{limits.capacity} "
            "(sample.max_token_len): `vlmpack bucket` drops longer samples as overlong before packing"
        )
    if limits.unlimited:
        return ALGORITHMS[algorithm](lengths, limits.capacity)
    media = np.zeros_like(lengths) if media_tokens is None else np.asarray(media_tokens)
    return pack_with_limits(lengths, media, limits, algorithm)
