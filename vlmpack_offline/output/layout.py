"""Folder layouts a stage must refuse: an output folder that overlaps an input folder.

::

    data.wds_dir      /data/shards          <- scan reads every .tar below it
    data.work_dir     /data/work            <- scan/bucket/plan write, write reads
    data.packed_wds_dir /data/packed        <- write writes pretrain-*.tar and deletes its own old ones

Refused, with the two settings named:

* ``packed_wds_dir`` equal to, inside, or containing a ``wds_dir`` entry: the next scan
  would read the packed tars as input, and a rebuild could delete input tars;
* ``packed_wds_dir`` equal to, inside, or containing ``work_dir``;
* ``work_dir`` equal to or inside a ``wds_dir`` entry (the scan's input tree would hold
  the pipeline's own artifacts).

A ``wds_dir`` entry is a folder, a ``.tar`` file, or a glob; for a glob the folder before its
first wildcard counts (``/data/*/train-*.tar`` -> ``/data``). Paths are compared after
``resolve()``, so symlinks and ``..`` do not hide an overlap. A ``file://`` entry is its local
path; other URLs (``s3://``, ``gs://``, ``msc://``) cannot overlap the local output folders, but a URL
``packed_wds_dir`` equal to, inside or containing a URL ``wds_dir`` entry is refused as for folders:
same scheme (``s3a`` is ``s3``, ``gcs`` is ``gs``) and bucket, one prefix under the other, compared
by their ``/``-separated names with empty ones dropped (``s3://team//in/`` is ``s3://team/in``).
An ``msc://`` profile is compared by its name as given: which bucket it maps to is the MSC
configuration's business, read only when the store is opened.
"""

from __future__ import annotations

import glob
from pathlib import Path

from ..config import Config
from ..errors import ConfigError
from ..tario import is_url

__all__ = ["check_folder_layout"]


def _root_of(entry: str) -> Path | None:
    """The local folder (or file) a ``wds_dir`` entry covers; None for a remote URL."""
    if entry.startswith("file://"):
        entry = entry.removeprefix("file://")
    elif is_url(entry):
        return None
    if glob.has_magic(entry):
        parts = Path(entry).parts
        fixed = [p for p in parts[: next(i for i, p in enumerate(parts) if glob.has_magic(p))]]
        return Path(*fixed) if fixed else Path(".")
    return Path(entry)


_SAME_STORE = {"s3a": "s3", "gcs": "gs"}  # fsspec's other names for one protocol (s3fs, gcsfs)


def _url_parts(entry: str) -> tuple[str, ...] | None:
    """A store URL as (scheme, bucket or MSC profile, prefix names...); for a glob its fixed part; None for a path."""
    if not is_url(entry) or entry.startswith("file://"):
        return None
    scheme, _, rest = entry.partition("://")
    names = [name for name in rest.split("/") if name and name != "."]
    if any(glob.has_magic(name) for name in names):
        names = names[: next(i for i, name in enumerate(names) if glob.has_magic(name))]
    scheme = scheme.lower()
    return (_SAME_STORE.get(scheme, scheme), *names)


def _url_overlap(a: tuple[str, ...], b: tuple[str, ...]) -> str | None:
    if a == b:
        return "is the same prefix as"
    if a[: len(b)] == b:
        return "is inside"
    if b[: len(a)] == a:
        return "contains"
    return None


def _overlap(a: Path, b: Path) -> str | None:
    if a == b:
        return "is the same folder as"
    if a.is_relative_to(b):
        return "is inside"
    if b.is_relative_to(a):
        return "contains"
    return None


def check_folder_layout(config: Config) -> None:
    """Raise ``ConfigError`` when the configured folders overlap (see module doc)."""
    data = config.data
    entries = [e for source in data.source_list
               for e in (source.wds_dir if isinstance(source.wds_dir, list) else [source.wds_dir])]
    inputs = [(entry, root.resolve()) for entry in entries if entry and (root := _root_of(entry)) is not None]
    # a URL output (s3://, output/object_store.py) cannot overlap local folders; its staging lies in work_dir
    packed = Path(data.packed_wds_dir).resolve() if data.packed_wds_dir and not is_url(data.packed_wds_dir) else None
    work = Path(data.work_dir).resolve() if data.work_dir else None
    fix = "point them at separate folders"
    if packed is not None:
        for entry, root in inputs:
            if how := _overlap(packed, root):
                raise ConfigError(
                    f"{config.source}: data.packed_wds_dir {str(packed)!r} {how} data.wds_dir entry {entry!r}: "
                    f"a later scan would read the packed tars as input and a rebuild could delete input tars; {fix}"
                )
        if work is not None and (how := _overlap(packed, work)):
            raise ConfigError(
                f"{config.source}: data.packed_wds_dir {str(packed)!r} {how} data.work_dir {str(work)!r}; {fix}"
            )
    if (packed_url := _url_parts(data.packed_wds_dir or "")) is not None:
        for entry in entries:
            if entry and (root_url := _url_parts(entry)) is not None and (how := _url_overlap(packed_url, root_url)):
                raise ConfigError(
                    f"{config.source}: data.packed_wds_dir {data.packed_wds_dir!r} {how} data.wds_dir entry {entry!r}: "
                    "a later scan would read the packed tars as input and a rebuild could delete input tars; "
                    "point them at separate prefixes"
                )
    if work is not None:
        for entry, root in inputs:
            how = _overlap(work, root)
            if how in ("is the same folder as", "is inside"):
                raise ConfigError(
                    f"{config.source}: data.work_dir {str(work)!r} {how} data.wds_dir entry {entry!r}: "
                    f"the scan's input folder would hold the pipeline's own artifacts; {fix}"
                )
