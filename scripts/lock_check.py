"""Check that this Python environment holds exactly the versions a lock file pins, and print them.

    python scripts/lock_check.py requirements/core.txt            # table + verdict, exit 1 on drift
    python scripts/lock_check.py --quiet requirements/core.txt    # verdict only (make install)
    python scripts/lock_check.py --report-only requirements/ref.txt  # what differs, exit 0 (make test-latest)

Why: `make test` must show that the suite ran on the lock's versions, not on whatever a machine had
cached; `make test-latest` shows which releases moved since the lock was made.
"""

from __future__ import annotations

import argparse
import re
import sys
from importlib import metadata
from pathlib import Path

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pins(lock: Path) -> dict[str, str]:
    """`name==version` lines of a pip-compile lock, by normalised name."""
    pins = {}
    for line in lock.read_text().splitlines():
        m = _PIN.match(line)
        if m:
            pins[_norm(m.group(1))] = m.group(2)
    return pins


def installed() -> dict[str, str]:
    return {_norm(d.metadata["Name"]): d.version for d in metadata.distributions() if d.metadata["Name"]}


def compare(pins: dict[str, str], have: dict[str, str]) -> list[str]:
    """One line per difference: a pin missing or at another version, or a package the lock does not name."""
    problems = [f"{n}: lock {v}, installed {have.get(n, 'nothing')}" for n, v in sorted(pins.items())
                if have.get(n) != v]
    own = {"vlmpack-offline", "pip"}
    problems += [f"{n}: installed {v}, not in the lock" for n, v in sorted(have.items())
                 if n not in pins and n not in own]
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lock", type=Path)
    ap.add_argument("--quiet", action="store_true", help="print the verdict only")
    ap.add_argument("--report-only", action="store_true", help="list differences, never fail")
    args = ap.parse_args(argv)
    pins, have = read_pins(args.lock), installed()
    if not args.quiet and not args.report_only:
        print(f"{sys.executable}: Python {sys.version.split()[0]}, versions from {args.lock}")
        for name in sorted(pins):
            print(f"  {name:32s} {have.get(name, '-')}")
    problems = compare(pins, have)
    for p in problems:
        print(f"  differs from {args.lock}: {p}")
    if args.report_only:
        print(f"{len(problems)} difference(s) from {args.lock}")
        return 0
    if problems:
        print(f"{sys.executable}: {len(problems)} package(s) differ from {args.lock}; "
              f"rebuild the environment (rm -rf the venv, then make install / install-ref)", file=sys.stderr)
        return 1
    print(f"{Path(sys.prefix).name}: all {len(pins)} packages exactly as in {args.lock}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
