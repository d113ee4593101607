"""The share arithmetic a mixture's weights must reach, written from its definition for the tests."""

from __future__ import annotations

import math


def largest_remainder(weights: list[float], total: int) -> list[int]:
    """``total`` split in proportion to ``weights`` as whole numbers: floors, then one more to the largest
    remainders until the parts add up to ``total``."""
    exact = [w / sum(weights) * total for w in weights]
    floor = [math.floor(x) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: -(exact[i] - floor[i]))[: total - sum(floor)]:
        floor[i] += 1
    return floor
