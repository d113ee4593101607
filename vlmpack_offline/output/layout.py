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
path; other URLs (``s3://``, ``gs://``) cannot overlap the local output folders.
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
    if work is not None:
        for entry, root in inputs:
            how = _overlap(work, root)
            if how in ("is the same folder as", "is inside"):
                raise ConfigError(
                    f"{config.source}: data.work_dir {str(work)!r} {how} data.wds_dir entry {entry!r}: "
                    f"the scan's input folder would hold the pipeline's own artifacts; {fix}"
                )
