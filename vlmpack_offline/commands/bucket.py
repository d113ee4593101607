"""``vlmpack bucket``: decide which samples share a pack."""

from __future__ import annotations

import click

from ..stages import bucket
from ._options import config_options, finish, load_from_options


@click.command("bucket")
@config_options
def command(config_path: str, overrides: tuple[str, ...]) -> None:
    """Group the manifest's ok samples into packs (manifest -> work_dir/bins/)."""
    finish(bucket.run(load_from_options(config_path, overrides)))
