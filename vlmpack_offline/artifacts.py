"""Atomic artifact writes and input fingerprints, shared by every stage.

Each stage writes to ``<name>.tmp`` and ``os.replace``s it into place, so a
``kill -9`` never leaves a half-written artifact under its final name. Each
artifact records the fingerprint of what it was built from (config sections +
upstream fingerprint); a later stage compares it and refuses a stale input.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .kill_points import kill_point

__all__ = ["fingerprint", "atomic_open", "atomic_write_text", "canonical_json"]


def canonical_json(payload: Any) -> str:
    """JSON with sorted keys and no spaces: the same data always gives the same bytes."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint(payload: Any) -> str:
    """Short sha256 of ``payload``'s canonical JSON."""
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()[:16]


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO]:
    """Open ``path.tmp`` for writing; on success fsync and rename it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, mode) as handle:
        try:
            yield handle
        except BaseException:
            handle.close()
            tmp.unlink(missing_ok=True)
            raise
        handle.flush()
        os.fsync(handle.fileno())
    kill_point(f"writing:{path.name}")
    os.replace(tmp, path)
    kill_point(f"wrote:{path.name}")


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_open(path, "w") as handle:
        handle.write(text)
