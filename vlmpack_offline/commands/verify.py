"""``vlmpack verify``: re-read the packed output and check it against the manifest and plan."""

from __future__ import annotations

import click

from ._options import config_options, run_stage

__all__ = ["command"]


@click.command("verify")
@config_options
def command(config_path: str, overrides: tuple[str, ...]) -> None:
    """Check the written shards: .idx files, shard counts, every ok sample once, media bytes, capacity.

    Exits non-zero and lists the first problems when anything does not match.
    """
    from ..stages import verify  # imported when the command runs: --help loads no stage

    run_stage(verify.run, config_path, overrides)
