"""Verdicts and built objects kept across runs, so a scan does once per folder what it would do in every process.

What is kept: the generic path's proof (``tokens/proof.py``), the counting tokenizer's snapshot
(``tokens/tokenizer_snapshot.py``), the loader's verdict on a folder (``loader/servable.py``), transformers'
model-type tables (``tokens/rules.py``) and the synthetic processor folders the demo, tests and benchmarks build
(``synthetic/processor_dir.py``, ``processor_dirs``). Each entry sits under a key that hashes everything its value follows from
(the folder's files, the package versions, our own deciding source), so a change anywhere is decided afresh and
nothing has to be invalidated by hand. Best effort: a cache that cannot be written costs the next run the work.

Where: ``$VLMPACK_CACHE_DIR`` else ``~/.cache/vlmpack``, one folder per kind.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path

__all__ = ["cache_dir", "file_sha256", "folder_digest", "installed_fact", "key_of", "read_json", "sources_digest", "version_of",
           "write_json"]

log = logging.getLogger(__name__)

FOLDER_FILES = (".json", ".jinja", ".txt", ".model", ".tiktoken")  # what processors and tokenizers read (no weights)
_PACKAGE = Path(__file__).resolve().parent


def cache_dir(kind: str) -> Path:
    return Path(os.environ.get("VLMPACK_CACHE_DIR") or Path.home() / ".cache" / "vlmpack") / kind


@functools.cache
def version_of(package: str) -> str:
    """The installed distribution's version, without importing it ("-" when absent). Read once per process:
    ``importlib.metadata`` searches every path entry for it, and a scan's start builds several keys."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"


def file_sha256(path: Path) -> bytes:
    """The sha256 of a file's bytes, read once per process while its size and time stay the same (the rule a shard's
    identity follows too, ``ShardTask.stat``): a scan's start asks it of each processor file for its settings
    (``scan_inputs.py``) and for every cache key here."""
    stat = path.stat()
    stamp = (str(path), stat.st_size, stat.st_mtime_ns)
    found = _FILE_DIGESTS.get(stamp)
    if found is None:
        found = _FILE_DIGESTS[stamp] = hashlib.sha256(path.read_bytes()).digest()
    return found


_FILE_DIGESTS: dict[tuple[str, int, int], bytes] = {}


def folder_digest(path: str | Path, digest) -> None:
    """Feed ``digest`` the names and contents of the folder's processor / tokenizer files (``FOLDER_FILES``)."""
    folder = Path(path)
    for file in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in FOLDER_FILES):
        digest.update(str(file.relative_to(folder)).encode() + b"\0")
        digest.update(file_sha256(file))


def sources_digest(names: Iterable[str], digest) -> None:
    """Feed ``digest`` our own source files (paths relative to the package) whose code decides the cached value."""
    for name in names:
        source = _PACKAGE / name
        digest.update(source.read_bytes() if source.is_file() else b"-")


def key_of(*, folder: str | Path | None = None, sources: Iterable[str] = (), packages: Iterable[str] = (),
           extra: object = None) -> str:  # fmt: skip
    """One key for a folder's files, our deciding sources, the named packages' versions and any JSON-able extra."""
    digest = hashlib.sha256()
    if folder is not None:
        folder_digest(folder, digest)
    sources_digest(sources, digest)
    digest.update(json.dumps([[version_of(p) for p in packages], extra], sort_keys=True, default=str).encode())
    return digest.hexdigest()[:32]


def read_json(kind: str, key: str) -> object | None:
    """The value kept under ``key``, or None (absent, unreadable or damaged: decided afresh)."""
    try:
        return json.loads((cache_dir(kind) / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None


def write_json(kind: str, key: str, value: object) -> None:
    """Keep ``value`` under ``key``; it appears whole or not at all (a temporary file renamed into place)."""
    directory = cache_dir(kind)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        temporary = directory / f".{key}.{os.getpid()}.tmp"
        temporary.write_text(json.dumps(value))
        os.replace(temporary, directory / f"{key}.json")
    except OSError as exc:
        log.debug("%s not cached in %s: %s", kind, directory, exc)


def installed_fact(name: str, compute: Callable[[], object], *, package: str = "transformers") -> object:
    """``compute()`` (JSON-able), once per install of ``package``: a fact about the installed code (a class default,
    a table of names) whose probe imports modules that pull torch. Keyed by the package's version and the time its
    ``__init__.py`` was written, so a reinstall probes again."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    origin = spec.origin if spec is not None else None
    written = Path(origin).stat().st_mtime_ns if origin else None
    key = key_of(packages=(package,), extra=[name, origin, written])
    kept = read_json("installed", key)
    if isinstance(kept, dict) and "value" in kept:
        return kept["value"]
    value = compute()
    write_json("installed", key, {"value": value})
    return value
