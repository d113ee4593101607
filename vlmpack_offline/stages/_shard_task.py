"""One shard to scan, as the parent lists it: a light module, so listing shards and deciding that a finished
scan is up to date import nothing of the counting (``_scan_shard.py`` re-exports it)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..config import DEFAULT_SOURCE
from ..tario import source_stat

__all__ = ["ShardTask"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardTask:
    shard: str  # relpath, e.g. "sub/shard-000001.tar"
    path: str  # absolute path (not resolved: a symlink stays a symlink)
    outside: str = ""  # where a symlink leads when that is outside data.wds_dir: never read
    source: str = DEFAULT_SOURCE  # the data.sources entry it belongs to

    def stat(self) -> tuple[int, int]:
        """(size, mtime_ns) that identify this shard's content (the link itself for one leading outside)."""
        if self.outside:
            link = os.lstat(self.path)
            return link.st_size, link.st_mtime_ns
        return source_stat(self.path)
