"""One exception family, so the CLI maps every expected failure to an exit code and a clear line.

Messages say what went wrong, where, and how to fix it.
"""

from __future__ import annotations

__all__ = [
    "VlmpackError",
    "ConfigError",
    "ShardError",
    "StaleArtifactError",
    "PlanError",
    "LengthMismatchError",
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


class LengthMismatchError(VlmpackError):
    """A sample materialized at load time does not have its planned token length."""
