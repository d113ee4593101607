"""What each part of the GPU suite found, and the two files that come back: ``gpu_suite.json`` and ``gpu_suite.txt``.

A part ``ran`` (every check it could make passed), was ``skipped`` (with why: no CUDA device, a
package that cannot travel, the time budget) or ``failed`` (an error, or a correctness check over
its tolerance: the reasons listed). Within a part that ran, single items may be skipped (the
flash-attn path when flash-attn is not installed): ``skipped`` lists them with why. ``targets``
are the issue's performance goals, reported met or missed: a slow result is a measurement, not a
failure. The files are rewritten after every part, so a run cut short still returns what it did.

The suite exits 0 only when no part failed.
"""

from __future__ import annotations

import json
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

__all__ = ["RAN", "SKIPPED", "FAILED", "Target", "Part", "run_part", "exit_code", "write_report"]

RAN, SKIPPED, FAILED = "ran", "skipped", "failed"
JSON_NAME, TEXT_NAME = "gpu_suite.json", "gpu_suite.txt"


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """One of the issue's goals: what, the measured value, met or not (None: not measured in this run)."""

    name: str  # "packed / padded real tokens/s at C=16384 >= 1.8 (varlen)"
    value: str  # the measured value as printed
    met: bool | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Part:
    name: str  # "throughput", "cost_model", "numerics", "megatron"
    status: str  # RAN, SKIPPED or FAILED
    why: str = ""  # why it was skipped, or what failed
    seconds: float = 0.0
    results: dict = field(default_factory=dict)  # the numbers, as JSON
    failures: tuple[str, ...] = ()  # checks over their tolerance, items that raised
    skipped: tuple[str, ...] = ()  # "item: why" for items of a part that ran
    targets: tuple[Target, ...] = ()
    lines: tuple[str, ...] = ()  # the text report's lines for this part


def run_part(name: str, function: Callable[[], Part], *, log: Callable[[str], None] = print) -> Part:
    """``function()`` with its time; an exception becomes a failed part carrying its traceback."""
    log(f"== {name}")
    started = time.perf_counter()
    try:
        part = function()
    except Exception as error:  # noqa: BLE001 - the suite reports a part's failure and runs the next part
        part = Part(name=name, status=FAILED, why=f"{type(error).__name__}: {error}",
                    results={"traceback": traceback.format_exc()})
        log(part.results["traceback"])
    seconds = time.perf_counter() - started
    status = FAILED if part.failures and part.status == RAN else part.status
    why = part.why or ("; ".join(part.failures) if status == FAILED else "")
    part = replace(part, seconds=round(seconds, 1), status=status, why=why)
    log(f"-- {name}: {part.status}{f' ({part.why})' if part.why else ''} in {part.seconds:.1f} s")
    return part


def exit_code(parts: list[Part]) -> int:
    return 1 if any(p.status == FAILED for p in parts) else 0


def _text(environment: dict, parts: list[Part]) -> str:
    out = ["vlmpack GPU suite", ""]
    out += [f"  {key}: {value}" for key, value in environment.items()]
    for part in parts:
        out += ["", f"[{part.name}] {part.status.upper()} in {part.seconds:.1f} s" + (f": {part.why}" if part.why else "")]
        out += [f"  {line}" for line in part.lines]
        out += [f"  skipped: {item}" for item in part.skipped]
        for target in part.targets:
            verdict = {True: "met", False: "MISSED", None: "not measured"}[target.met]
            out.append(f"  target {target.name}: {target.value} ({verdict})")
    failed = [p.name for p in parts if p.status == FAILED]
    out += ["", f"exit {exit_code(parts)}: " + (f"failed: {', '.join(failed)}" if failed else "no part failed")]
    return "\n".join(out) + "\n"


def write_report(out_dir: Path, environment: dict, parts: list[Part], *, finished: bool) -> tuple[Path, Path]:
    """Write (rewrite) ``gpu_suite.json`` and ``gpu_suite.txt`` in ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    body = {"format": "vlmpack.gpu_suite_report/1", "finished": finished, "exit_code": exit_code(parts),
            "environment": environment, "parts": [asdict(p) for p in parts]}
    json_path, text_path = out_dir / JSON_NAME, out_dir / TEXT_NAME
    json_path.write_text(json.dumps(body, indent=2, default=str) + "\n")
    text_path.write_text(_text(environment, parts) + ("" if finished else "(run cut short: parts above only)\n"))
    return json_path, text_path
