"""``vlmpack stats``: how well the plan packs, as a table, stats.json and a PNG."""

from __future__ import annotations

import click

from ._options import config_options, run_stage


@click.command("stats")
@config_options
def command(config_path: str, overrides: tuple[str, ...]) -> None:
    """Print packing quality (fill, lower bound, drops); write stats.json and stats.png."""
    from ..stages import stats  # imported when the command runs: --help loads no stage

    run_stage(stats.run, config_path, overrides)
