"""One gate for every loss: ``scan.max_drop_ratio`` over all the samples lost so far, in every stage.

A sample can be lost at three places: the scan (a bad file, a bad JSON ...), bucket (``overlong``,
``layout_unfit``) and nowhere else. Each stage compares everything lost up to it with the input samples
and, past the ratio, ends with exit 1 and the same line, so a capacity that cuts 45% of the data stops
``bucket`` (after it wrote its reports) and every later stage, and ``scripts/pack_wds.sh`` with them::

    too many samples dropped: 180 of 400 (45.0%) > scan.max_drop_ratio 0.05; top reasons: overlong 171,
    corrupt_media 9; each drop and its error is in work/manifest.jsonl, work/bins/overlong.jsonl (...)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .stage_result import StageResult

__all__ = ["Losses", "gate_line", "gated"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Losses:
    total: int  # input samples: every sample the scan met, ok, dropped or in a shard it could not read
    by_reason: Mapping[str, int] = field(default_factory=dict)  # every drop so far, by reason

    @property
    def dropped(self) -> int:
        return sum(self.by_reason.values())

    def to_json(self) -> dict:
        return {"total": self.total, "by_reason": dict(sorted(self.by_reason.items()))}

    @classmethod
    def from_json(cls, data: Mapping) -> Losses:
        return cls(total=int(data["total"]), by_reason={k: int(v) for k, v in data["by_reason"].items()})


def gate_line(losses: Losses, limit: float, reports: Sequence[str | Path]) -> str | None:
    """The line that closes the gate, or None while the losses are within ``limit`` (``scan.max_drop_ratio``)."""
    dropped, total = losses.dropped, losses.total
    if not total or dropped / total <= limit:
        return None
    reasons = sorted(((r, n) for r, n in losses.by_reason.items() if n), key=lambda item: (-item[1], item[0]))
    top = ", ".join(f"{reason} {n}" for reason, n in reasons[:3])
    return (f"too many samples dropped: {dropped} of {total} ({dropped / total:.1%}) > scan.max_drop_ratio {limit:g}; "
            f"top reasons: {top}; each drop and its error is in {', '.join(str(r) for r in reports)} "
            "(fix the data or the config, or raise scan.max_drop_ratio to accept)")


def gated(result: StageResult, losses: Losses, limit: float, reports: Sequence[str | Path],
          details: Sequence[str] = ()) -> StageResult:
    """``result`` with the gate's line (and ``details`` after it) and exit code 1 when the gate closes."""
    line = gate_line(losses, limit, reports)
    if line is None:
        return result
    return dataclasses.replace(result, summary=[*result.summary, line, *details], exit_code=1)
