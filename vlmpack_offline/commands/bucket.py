"""``vlmpack bucket``: decide which samples share a pack."""

from __future__ import annotations

import click

from ._options import config_options, run_stage


@click.command("bucket")
@config_options
def command(config_path: str, overrides: tuple[str, ...]) -> None:
    """Group the manifest's ok samples into packs (manifest -> work_dir/bins/)."""
    from ..stages import bucket  # imported when the command runs: --help loads no stage

    run_stage(bucket.run, config_path, overrides)
