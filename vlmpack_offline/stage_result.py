"""What every stage returns: the CLI prints ``summary`` and exits with ``exit_code``."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["StageResult"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StageResult:
    stage: str  # "scan", "bucket", "plan", "write", "verify", "stats"
    skipped: bool = False  # True when the artifact was already up to date (a no-op rerun)
    summary: list[str] = field(default_factory=list)  # human-readable lines printed by the CLI
    counts: dict[str, int] = field(default_factory=dict)  # machine-readable numbers for tests
    seconds: float = 0.0  # wall time of the stage
    exit_code: int = 0  # non-zero when the stage found problems (verify; scan over max_drop_ratio; bucket: nothing fits)

    def render(self) -> str:
        head = f"[{self.stage}] " + ("up to date, nothing to do" if self.skipped else f"done in {self.seconds:.1f}s")
        return "\n".join([head, *("  " + line for line in self.summary)])
