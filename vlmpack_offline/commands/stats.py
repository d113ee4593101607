"""``vlmpack stats``: how well the plan packs, as a table, stats.json and a PNG."""

from __future__ import annotations

import click

from ..stages import stats
from ._options import config_options, finish, load_from_options


@click.command("stats")
@config_options
def command(config_path: str, overrides: tuple[str, ...]) -> None:
    """Print packing quality (fill, lower bound, drops); write stats.json and stats.png."""
    finish(stats.run(load_from_options(config_path, overrides)))
