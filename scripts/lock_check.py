"""Check that this Python environment holds exactly the versions a lock file pins, and print them.

    python scripts/lock_check.py requirements/core.txt            # table + verdict, exit 1 on drift
    python scripts/lock_check.py --quiet requirements/core.txt    # verdict only (make install)
    python scripts/lock_check.py --report-only requirements/ref.txt  # what differs, exit 0 (make test-latest)
    python scripts/lock_check.py --quiet requirements/core.txt --with requirements/automodel.txt  # make install

A package some environments install with --no-deps beside their lock (requirements/automodel.txt) is no
stray: pinned in a NO_DEPS_LOCKS file next to the lock, it must be at that pin where it is installed, and
`--with FILE` makes it required (make install / install-ref, which install it).

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
# Hashed requirements files installed with --no-deps after the main lock (see requirements/automodel.in).
NO_DEPS_LOCKS = ("automodel.txt",)


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


def compare(pins: dict[str, str], have: dict[str, str], beside: dict[str, str] | None = None) -> list[str]:
    """One line per difference: a pin missing or at another version, or a package the lock does not name.

    `beside`: pins of a no-deps file next to the lock; such a package may be absent, but where it is
    installed it must be at its pin.
    """
    beside = {n: v for n, v in (beside or {}).items() if n not in pins}
    problems = [f"{n}: lock {v}, installed {have.get(n, 'nothing')}" for n, v in sorted(pins.items())
                if have.get(n) != v]
    problems += [f"{n}: lock {v}, installed {have[n]}" for n, v in sorted(beside.items())
                 if n in have and have[n] != v]
    own = {"vlmpack-offline", "pip"}
    problems += [f"{n}: installed {v}, not in the lock" for n, v in sorted(have.items())
                 if n not in pins and n not in beside and n not in own]
    return problems


def beside_pins(lock: Path) -> dict[str, str]:
    """The pins of the NO_DEPS_LOCKS files in the lock's folder (other than the lock itself)."""
    pins = {}
    for name in NO_DEPS_LOCKS:
        path = lock.parent / name
        if path.is_file() and path.resolve() != lock.resolve():
            pins.update(read_pins(path))
    return pins


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lock", type=Path)
    ap.add_argument("--with", dest="with_", type=Path, action="append", default=[], metavar="FILE",
                    help="a no-deps requirements file installed too: its pins are required as well")
    ap.add_argument("--quiet", action="store_true", help="print the verdict only")
    ap.add_argument("--report-only", action="store_true", help="list differences, never fail")
    args = ap.parse_args(argv)
    pins, have, beside = read_pins(args.lock), installed(), beside_pins(args.lock)
    for path in args.with_:
        pins.update(read_pins(path))
    shown = sorted([*pins, *(n for n in beside if n in have and n not in pins)])
    if not args.quiet and not args.report_only:
        print(f"{sys.executable}: Python {sys.version.split()[0]}, versions from "
              + " + ".join(map(str, [args.lock, *args.with_])))
        for name in shown:
            print(f"  {name:32s} {have.get(name, '-')}")
    problems = compare(pins, have, beside)
    for p in problems:
        print(f"  differs from {args.lock}: {p}")
    if args.report_only:
        print(f"{len(problems)} difference(s) from {args.lock}")
        return 0
    if problems:
        print(f"{sys.executable}: {len(problems)} package(s) differ from {args.lock}; "
              f"rebuild the environment (rm -rf the venv, then make install / install-ref)", file=sys.stderr)
        return 1
    print(f"{Path(sys.prefix).name}: all {len(shown)} packages exactly as in "
          + " + ".join(map(str, [args.lock, *args.with_])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
