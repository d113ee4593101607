"""``vlmpack scan``: count every sample's exact tokens into work_dir/manifest.sqlite."""

from __future__ import annotations

import click

from ._options import config_options, finish, load_from_options

__all__ = ["command"]


@click.command("scan")
@config_options
def command(config_path: str, overrides: tuple[str, ...]) -> None:
    """Count exact tokens of every sample of the WebDataset shards into work_dir/manifest.sqlite.

    Runs process.workers processes over shards, commits per shard and resumes after a crash:
    rerun the same command. Bad samples are recorded with a drop reason, never skipped silently.
    """
    from ..stages import scan

    finish(scan.run(load_from_options(config_path, overrides)))
