"""One exception family, so the CLI maps every expected failure to an exit code and a clear line.

Messages say what went wrong, where, and how to fix it.
"""

from __future__ import annotations

import errno

__all__ = [
    "VlmpackError",
    "ConfigError",
    "ShardError",
    "StaleArtifactError",
    "PlanError",
    "LayoutError",
    "LengthMismatchError",
    "MediaDecodeError",
    "MachineFault",
]


class VlmpackError(Exception):
    """Base class: an expected failure with a message meant for the user."""

    exit_code = 1


class ConfigError(VlmpackError):
    """The YAML config or a ``--set`` override is invalid."""

    exit_code = 2


class ShardError(VlmpackError):
    """A source or output shard cannot be used as it is."""


class StaleArtifactError(VlmpackError):
    """An artifact was built from other inputs than the ones given now."""

    exit_code = 3


class PlanError(VlmpackError):
    """A pack plan breaks an invariant (sample missing or repeated, pack over capacity)."""


class LayoutError(ConfigError):
    """The chosen packed layout (``sample.sample_type``) cannot hold some planned samples, or a packed
    directory is read as a layout it was not written in."""


class LengthMismatchError(VlmpackError):
    """A sample materialized at load time does not have its planned token length."""


class MediaDecodeError(VlmpackError):
    """A packed sample's media cannot be read or decoded at load time: cut or damaged after the scan looked at
    it, or damage its structure check cannot see (``media/integrity.py``). One line naming the pack, the sample,
    where its bytes are and the fix. Built from its message alone, so a DataLoader worker's copy reaches the
    main process as this class with the same text (``torch/_utils.py``, ``ExceptionWrapper.reraise``)."""

    @classmethod
    def naming(cls, *, pack_id: int, sample_id: str, members: list[str], shard: str, cause: BaseException) -> MediaDecodeError:
        """The error for ``members`` (the pack's member names) of sample ``sample_id``, read from ``shard``."""
        text = (str(cause).strip().splitlines() or [""])[0]
        where = f"{shard} member {', '.join(members)}" if shard else f"member {', '.join(members)}"
        return cls(
            f"pack {pack_id}, sample {sample_id!r} ({where}): its media does not decode ({type(cause).__name__}: "
            f"{text}); rescan with scan.decode_check: true (it drops such samples as corrupt_media) or remove the "
            "file from its source shard, then rerun bucket, plan and write"
        )


class MachineFault(VlmpackError):
    """The machine refused a read or write (disk full, read-only, permissions): what, where, what to do."""

    _FIXES = {
        errno.ENOSPC: ("no space left on the device", "free space there (or point the config elsewhere)"),
        errno.EDQUOT: ("disk quota exceeded", "free space or raise the quota"),
        errno.EROFS: ("the filesystem is read-only", "point the config at a writable folder"),
        errno.EACCES: ("permission denied", "give this user access to it (or point the config elsewhere)"),
        errno.EPERM: ("operation not permitted", "give this user access to it (or point the config elsewhere)"),
    }

    @classmethod
    def from_error(cls, exc: BaseException, where: str) -> MachineFault | None:
        """The fault ``exc`` stands for (an ``OSError`` or sqlite's own wording), or None if it is not one."""
        code = getattr(exc, "errno", None)
        text = str(exc).lower()
        if code is None and "disk is full" in text:
            code = errno.ENOSPC
        elif code is None and ("readonly database" in text or "read-only" in text):
            code = errno.EROFS
        if code not in cls._FIXES:
            return None
        what, fix = cls._FIXES[code]
        path = getattr(exc, "filename", None) or where
        return cls(f"{what}: {path}: {fix}, then rerun the same command (finished work is kept)")
